// Where the Redis lock operations go. A channel sends a script call for one lock's keys and
// hands back the reply, blocking (the caller's thread) or async (the loop thread), and carries
// the release notifications waiters listen to. One Redis server is one channel (NodeChannel);
// a cluster router or a quorum are other channels, or compositions of them: the operations
// themselves (lock_ops.h) are written once, against this interface.
#ifndef DLOCK_REDIS_TOPOLOGY_CHANNEL_H_
#define DLOCK_REDIS_TOPOLOGY_CHANNEL_H_

#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/status.h"
#include "redis/wire/reply.h"
#include "redis/wire/scripts.h"

namespace dlock::redis {

// One EVALSHA: the script and its keys (all of one lock, so one hash slot) and arguments.
struct ScriptCall {
  ScriptId script;
  std::vector<std::string> keys;
  std::vector<std::string> args;
  // > 0: the call counts only once this many replicas acknowledged its writes (WAIT, up to
  // half of timeout_ms); fewer is an EBACKEND saying how many did.
  int wait_replicas = 0;
};

class Channel {
 public:
  // reply is null exactly when error is not ok; the reply is freed after the callback.
  using ReplyCallback = std::function<void(redisReply* reply, const Status& error)>;

  virtual ~Channel() = default;
  // For messages: "redis 127.0.0.1:6379".
  virtual const std::string& server() const = 0;
  // Releases are published with SPUBLISH (and watched with SSUBSCRIBE) rather than PUBLISH.
  virtual bool sharded_pubsub() const { return false; }
  // Blocking, any thread: PING (open's reachability and credentials check).
  virtual Status Ping() = 0;
  // Blocking, any thread. A failed call may or may not have run on the server. Bounded by
  // connect_timeout_ms + timeout_ms. An error reply is a reply, not a Status.
  virtual Status Eval(const ScriptCall& call, ReplyPtr* reply) = 0;
  // Blocking, any thread: many calls in one round trip where the topology allows, best
  // effort, answers ignored (a client closing with many locks). Bounded like Eval.
  virtual void EvalAll(const std::vector<ScriptCall>& calls) = 0;
  // Loop thread: done runs exactly once, on the loop thread, never inside this call. Calls
  // made in one loop iteration leave together (heartbeats are one round trip).
  virtual void EvalAsync(const ScriptCall& call, ReplyCallback done) = 0;
  // Any thread: tell watcher about messages on a release channel, until Unwatch returns.
  virtual void Watch(const std::string& channel, ReleaseWatcher* watcher) = 0;
  virtual void Unwatch(const std::string& channel, ReleaseWatcher* watcher) = 0;
  // Loop thread: async calls not answered yet.
  virtual size_t PendingAsync() const = 0;
  // Loop thread: drops every connection for good; what is in flight fails.
  virtual void ShutdownOnLoop() = 0;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_CHANNEL_H_
