// One Redis server as a Channel: a pool of blocking connections for callers' threads (no
// thread waits on another's round trip), one pipelined async connection on the loop, and one
// subscriber connection for all waiters.
#ifndef DLOCK_REDIS_TOPOLOGY_NODE_CHANNEL_H_
#define DLOCK_REDIS_TOPOLOGY_NODE_CHANNEL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "loop/event_loop.h"
#include "redis/wire/async_connection.h"
#include "redis/topology/channel.h"
#include "redis/redis_url.h"
#include "redis/topology/subscriber.h"
#include "redis/wire/sync_connection.h"

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

  // For a node whose address another server may take over: a Sentinel master, which after a
  // failover may come back at the same address, empty, and still say it is a master for a
  // while. Once any connection to a guarded node fails (refused, closed, silent), script calls
  // stop using it until the owner vouches for it again: a blocking call runs `recheck` (the
  // owner asks who the master is, and vouches or not; its error, if any, becomes the call's)
  // before it reconnects and retries; a
  // call that finds the node not vouched for fails with kIoError (an async call after running
  // `recheck_in_background`). Command and CommandAsync (the owner's own checks) are not held.
  void Guard(std::function<Status()> recheck, std::function<void()> recheck_in_background);
  // Connection failures so far. Read it before checking the node, then Vouch with it: a
  // failure after the check began is not vouched for.
  uint64_t failures() const { return failures_.load(); }
  void Vouch(uint64_t failures_seen);
  // True unless guarded and a connection failed since the last Vouch.
  bool vouched() const;

 private:
  class Lease;
  // Runs fn(connection, deadline) on a pooled connection; see node_channel.cc for the bounds.
  // gated: a script call, held back while a guarded node is not vouched for.
  template <typename Fn>
  Status WithConnection(bool gated, Fn&& fn);
  void Failed();
  // [ASKING,] EVAL (the body: no NOSCRIPT round may come in between) [, WAIT], pipelined on
  // one connection: for ASK redirections and for wait_replicas.
  Status EvalPipelined(const ScriptCall& call, bool asking, ReplyPtr* reply);
  void EvalPipelinedAsync(const ScriptCall& call, bool asking, ReplyCallback done);
  std::vector<std::string> WaitArgv(const ScriptCall& call) const;
  // WAIT's answer to the call's writes: Ok, or why too few replicas acknowledged them.
  Status CheckAcknowledged(const redisReply* script_reply, const redisReply* wait_reply,
                           int wanted) const;

  Status NotVouched() const;
  // Async script calls: false after failing done (later) when the node is not vouched for.
  bool PassesGuard(ReplyCallback& done);

  EventLoop* loop_;
  RedisConfig config_;
  std::string server_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<SyncConnection>> idle_;
  AsyncConnection async_;  // loop thread only: heartbeats and async calls, pipelined
  Subscriber subscriber_;

  bool guarded_ = false;  // set before any call, never changed after
  std::function<Status()> recheck_;
  std::function<void()> recheck_in_background_;
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> vouched_{0};
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_NODE_CHANNEL_H_
