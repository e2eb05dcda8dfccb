// One Redis server as a Channel: a pool of blocking connections for callers' threads (no
// thread waits on another's round trip), one pipelined async connection on the loop, and one
// subscriber connection for all waiters.
#ifndef DLOCK_REDIS_NODE_CHANNEL_H_
#define DLOCK_REDIS_NODE_CHANNEL_H_

#include <memory>
#include <mutex>
#include <vector>

#include "loop/event_loop.h"
#include "redis/async_connection.h"
#include "redis/channel.h"
#include "redis/redis_url.h"
#include "redis/subscriber.h"
#include "redis/sync_connection.h"

namespace dlock::redis {

class NodeChannel : public Channel {
 public:
  // mode and on_misrouted: see Subscriber (a cluster node watches sharded channels).
  NodeChannel(EventLoop* loop, RedisConfig config, PubSubMode mode = PubSubMode::kPlain,
              std::function<void(const std::string& channel)> on_misrouted = nullptr);

  const std::string& server() const override { return server_; }
  Status Ping() override;
  Status Eval(const ScriptCall& call, ReplyPtr* reply) override;
  void EvalAll(const std::vector<ScriptCall>& calls) override;
  void EvalAsync(const ScriptCall& call, ReplyCallback done) override;
  void Watch(const std::string& channel, ReleaseWatcher* watcher) override;
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher) override;
  size_t PendingAsync() const override { return async_.pending(); }
  void ShutdownOnLoop() override;

  // For a cluster router. Blocking, any thread, bounded like Eval: one command (CLUSTER SLOTS).
  Status Command(const std::vector<std::string>& argv, ReplyPtr* reply);
  // Loop thread, like EvalAsync.
  void CommandAsync(const std::vector<std::string>& argv, ReplyCallback done);
  // ASKING, then the script, on one connection: a node importing the call's slot serves it
  // once (a cluster's ASK redirection). Like Eval and EvalAsync otherwise (wait_replicas too).
  Status EvalAsking(const ScriptCall& call, ReplyPtr* reply);
  void EvalAskingAsync(const ScriptCall& call, ReplyCallback done);

 private:
  class Lease;
  // Runs fn(connection, deadline) on a pooled connection; see node_channel.cc for the bounds.
  template <typename Fn>
  Status WithConnection(Fn&& fn);
  // [ASKING,] EVAL (the body: no NOSCRIPT round may come in between) [, WAIT], pipelined on
  // one connection: for ASK redirections and for wait_replicas.
  Status EvalPipelined(const ScriptCall& call, bool asking, ReplyPtr* reply);
  void EvalPipelinedAsync(const ScriptCall& call, bool asking, ReplyCallback done);
  std::vector<std::string> WaitArgv(const ScriptCall& call) const;
  // WAIT's answer to the call's writes: Ok, or why too few replicas acknowledged them.
  Status CheckAcknowledged(const redisReply* script_reply, const redisReply* wait_reply,
                           int wanted) const;

  RedisConfig config_;
  std::string server_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<SyncConnection>> idle_;
  AsyncConnection async_;  // loop thread only: heartbeats and async calls, pipelined
  Subscriber subscriber_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_NODE_CHANNEL_H_
