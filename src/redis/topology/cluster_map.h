// Reading a Redis Cluster's answers: the slot map (CLUSTER SLOTS) and redirections (MOVED,
// ASK) and the refusals worth retrying (TRYAGAIN, CLUSTERDOWN). Every number the server sends
// is range-checked before use.
#ifndef DLOCK_REDIS_TOPOLOGY_CLUSTER_MAP_H_
#define DLOCK_REDIS_TOPOLOGY_CLUSTER_MAP_H_

#include <hiredis/hiredis.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dlock::redis {

struct NodeAddress {
  std::string host;
  int port = 0;
  // "127.0.0.1:7000", "[::1]:7000": a node's name in maps and messages.
  std::string Name() const;
};

// A host a server names (a cluster node, Sentinel's master): a DNS name or an address, never
// bytes that would reach messages and terminals raw (control bytes, spaces) or longer than a
// DNS name can be.
bool PlausibleHost(std::string_view host);

// Slots first..last are served by master.
struct SlotRange {
  int first = 0;
  int last = 0;
  NodeAddress master;
};

// CLUSTER SLOTS's answer from the node `asked` (whose address stands in where the answer
// leaves the host empty). Ranges whose master's address is unknown ("?") are left out: their
// slots count as served by no node until the next map.
Status ParseClusterSlots(const redisReply* reply, const NodeAddress& asked,
                         const std::string& server, std::vector<SlotRange>* out);

struct Redirect {
  enum Kind { kNone, kMoved, kAsk, kTryAgain, kClusterDown };
  Kind kind = kNone;
  int slot = -1;     // MOVED, ASK
  NodeAddress to;    // MOVED, ASK
};

// kNone unless reply is one of the cluster's error replies. A MOVED or ASK that does not read
// (bad slot or address) is kNone too: the error reaches the caller as it is.
Redirect ParseRedirect(const redisReply* reply, const NodeAddress& from);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_CLUSTER_MAP_H_
