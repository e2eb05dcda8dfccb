// A Redis Cluster as one Channel: each script call goes to the master serving its keys' slot
// (all keys of one lock share the hash tag {NAME}, hence one slot), through that master's
// NodeChannel. The slot map comes from CLUSTER SLOTS and follows MOVED; ASK is served once on
// the named node with ASKING; TRYAGAIN and CLUSTERDOWN are retried, jittered, within the call's
// budget. Async calls made in one loop iteration leave together per master, so a heartbeat tick
// costs one round trip per master. Waiters watch on the master serving their lock's slot and
// follow the map when the slot moves.
//
// Bounds: a call starts no new attempt (redirected or retried) once connect_timeout_ms +
// timeout_ms have passed since it began, and follows at most kMaxRedirections MOVED or ASK in a row;
// each attempt, and a map load, is bounded by the node's own connect_timeout_ms + timeout_ms.
// So a call ends within 3 x (connect_timeout_ms + timeout_ms).
#ifndef DLOCK_REDIS_TOPOLOGY_CLUSTER_CHANNEL_H_
#define DLOCK_REDIS_TOPOLOGY_CLUSTER_CHANNEL_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loop/event_loop.h"
#include "redis/topology/channel.h"
#include "redis/topology/cluster_map.h"
#include "redis/topology/node_channel.h"
#include "redis/redis_url.h"
#include "redis/topology/watch_router.h"

namespace dlock::redis {

class ClusterChannel : public Channel {
 public:
  static constexpr int kMaxRedirections = 5;
  // The most node addresses one client connects to, over its life: every master a slot map or
  // a redirection named, every seed. Redis Cluster's own ceiling is about 1000 nodes; a server
  // naming ever new hosts (a hostile map, redirections to anywhere) stops here, with an error
  // naming the limit. Addresses are not forgotten: a client outliving more than this many
  // address changes (nodes replaced on new addresses) must be reopened.
  static constexpr size_t kMaxNodes = 1024;

  ClusterChannel(EventLoop* loop, RedisClusterConfig config);
  ~ClusterChannel() override;

  const std::string& server() const override { return server_; }
  // Releases go out with SPUBLISH, to the slot's master and replicas only.
  bool sharded_pubsub() const override { return true; }
  // Loads the slot map: each known node, then each seed, until one answers.
  Status Ping() override;
  Status Eval(const ScriptCall& call, ReplyPtr* reply) override;
  void EvalAll(const std::vector<ScriptCall>& calls) override;
  void EvalAsync(const ScriptCall& call, ReplyCallback done) override;
  void Watch(const std::string& channel, ReleaseWatcher* watcher) override;
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher) override;
  size_t PendingAsync() const override { return async_calls_; }
  void ShutdownOnLoop() override;

 private:
  struct AsyncCall;

  // The node at address, created on first use (never destroyed before the channel); null when
  // that would pass kMaxNodes (NodeLimit says so).
  NodeChannel* NodeAt(const NodeAddress& address);
  Status NodeLimit(const NodeAddress& address) const;
  // The master serving slot, or null when the map names none.
  NodeChannel* MasterOf(int slot);
  // The redirection reply from node asks for, if any (an error reply names the target).
  Redirect RedirectOf(const redisReply* reply, NodeChannel* node);
  // The slot of call's keys, or an error when they do not share one.
  Status SlotOf(const ScriptCall& call, int* slot) const;
  // Blocking: a new map from the first node that answers CLUSTER SLOTS.
  Status LoadMap();
  // Loop thread: the same without blocking, in the background; one at a time.
  void RefreshInBackground();
  void TryRefreshFrom(std::vector<NodeAddress> candidates, size_t next);
  // Candidates for a map refresh: the masters of the current map, then the seeds.
  std::vector<NodeAddress> RefreshCandidates();
  // Refused, the map unchanged, when its masters would take the client past kMaxNodes.
  Status ApplyMap(const std::vector<SlotRange>& ranges);
  // False when the node cannot be added (kMaxNodes).
  bool MoveSlot(int slot, const NodeAddress& to);
  void Attempt(std::shared_ptr<AsyncCall> call);
  void Finish(const std::shared_ptr<AsyncCall>& call, redisReply* reply, const Status& error);
  void RetryLater(std::shared_ptr<AsyncCall> call, Millis delay);

  EventLoop* loop_;
  RedisClusterConfig config_;
  std::string server_;

  mutable std::mutex map_mu_;
  std::map<std::string, std::unique_ptr<NodeChannel>> nodes_;    // by NodeAddress::Name()
  std::unordered_map<NodeChannel*, NodeAddress> addresses_;
  std::vector<NodeChannel*> slots_;  // master of each slot; empty until the first map
  std::mutex load_mu_;               // one blocking map load at a time
  uint64_t map_version_ = 0;         // under map_mu_: bumped by every change of slots_

  WatchRouter watches_;  // release channels follow their slot's master

  // Loop thread only.
  size_t async_calls_ = 0;
  bool refreshing_ = false;
  bool shut_down_ = false;
  struct Retry;  // a call waiting out TRYAGAIN or CLUSTERDOWN
  std::vector<std::unique_ptr<Retry>> retries_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_CLUSTER_CHANNEL_H_
