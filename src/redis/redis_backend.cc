#include "redis/redis_backend.h"

#include <vector>

#include "core/token.h"
#include "redis/topology/cluster_channel.h"
#include "redis/lock_ops.h"
#include "redis/topology/node_channel.h"
#include "redis/topology/sentinel_channel.h"
#include "redis/redis_url.h"

namespace dlock::redis {
namespace {

// The Backend over the lock operations (lock_ops.h) on a channel. The topology lives in the
// channel; nothing here knows how many servers answer.
class RedisBackend : public Backend {
 public:
  // one_server: every key lives on the one server the channel talks to (not a cluster).
  RedisBackend(EventLoop* loop, const RedisConfig& config, std::unique_ptr<Channel> channel,
               bool one_server)
      : loop_(loop),
        prefix_(config.params.prefix),
        wait_replicas_(config.wait_replicas),
        channel_(std::move(channel)),
        sharded_(channel_->sharded_pubsub()),
        connections_(config.connections),
        one_server_(one_server) {}

  Status Check() override { return channel_->Ping(); }

  Status TryAcquire(const LockRequest& request, AcquireAttempt* out) override {
    // Safe to retry: acquire.lua answers the same to an owner that already holds the lock.
    Status s = Run(channel_.get(), AcquireOp(prefix_, request, wait_replicas_), out);
    // The attempt may have reached the server before the connection failed or the reply
    // turned to garbage: if it did, the lock is ours and nobody knows it. Give it back, best
    // effort, in the background: the caller's bound must not pay another timeout for it.
    if (!s.ok() && s.code() != Code::kInvalidArgument) PostGiveBack(HoldRef::Of(request));
    return s;
  }

  bool AcquiresManyAtOnce() const override { return one_server_; }

  Status TryAcquireMany(const std::vector<LockRequest>& requests, std::vector<AcquireAttempt>* out,
                        size_t* refused) override {
    if (!one_server_) return Backend::TryAcquireMany(requests, out, refused);
    ReplyPtr reply;
    Status s = channel_->Eval(AcquireManyCall(prefix_, requests, wait_replicas_), &reply);
    ManyAttempt many;
    if (s.ok()) s = ReadAcquireMany(reply.get(), channel_->server(), requests, &many);
    // As in TryAcquire: it may have won before the reply was lost.
    if (!s.ok() && s.code() != Code::kInvalidArgument) {
      for (const LockRequest& request : requests) PostGiveBack(HoldRef::Of(request));
    }
    *out = std::move(many.attempts);
    *refused = many.refused;
    return s;
  }

  Status Release(const LockState& lock) override {
    NoResult none;
    Status s =
        Run(channel_.get(), ReleaseOp(prefix_, HoldRef::Of(lock), sharded_), &none);
    // Not confirmed, and the caller's handle is gone: try once more in the background, or the
    // key stays until its lease runs out (never, without one).
    if (!s.ok()) PostGiveBack(HoldRef::Of(lock));
    return s;
  }

  void ReleaseMany(const std::vector<const LockState*>& locks, std::vector<Status>* out) override {
    if (!one_server_) return Backend::ReleaseMany(locks, out);
    std::vector<HoldRef> holds;
    holds.reserve(locks.size());
    for (const LockState* lock : locks) holds.push_back(HoldRef::Of(*lock));
    ReplyPtr reply;
    Status s = channel_->Eval(ReleaseManyCall(prefix_, holds), &reply);
    if (s.ok()) s = ReadReleaseMany(reply.get(), channel_->server(), holds, out);
    if (s.ok()) return;
    // As in Release: not confirmed, so tried once more in the background.
    out->assign(locks.size(), s);
    for (HoldRef& hold : holds) PostGiveBack(std::move(hold));
  }

  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    // What stays unanswered ends with its lease.
    std::vector<ScriptCall> calls;
    calls.reserve(locks.size());
    for (const auto& l : locks) {
      auto op = ReleaseOp(prefix_, HoldRef::Of(*l), sharded_);
      calls.push_back(std::move(op).TakeAllKeys());  // one round
    }
    channel_->EvalAll(calls);
  }

  void TryAcquireAsync(const LockRequest& request, AttemptCallback done) override {
    RunAsync<AcquireAttempt>(
        channel_.get(), AcquireOp(prefix_, request, wait_replicas_),
        [this, hold = HoldRef::Of(request), done = std::move(done)](const Status& s,
                                                                     AcquireAttempt attempt) {
          if (!s.ok() && s.code() != Code::kInvalidArgument) GiveBack(hold);  // as in TryAcquire
          done(s, attempt);
        });
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    RunAsync<NoResult>(channel_.get(), ReleaseOp(prefix_, HoldRef::Of(*lock), sharded_),
                       [done = std::move(done)](const Status& s, NoResult) { done(s); });
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    RunAsync<NoResult>(channel_.get(), ExtendOp(prefix_, HoldRef::Of(*lock), lease_ms),
                       [done = std::move(done)](const Status& s, NoResult) { done(s); });
  }

  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    // Calls made in one loop iteration leave together: one round trip for the batch.
    for (auto& request : batch) {
      RunAsync<NoResult>(
          channel_.get(),
          ExtendOp(prefix_, HoldRef::Of(*request.lock), request.lease_ms),
          [sink, request](const Status& s, NoResult) { sink->OnRenewed(request, s); });
    }
  }

  Status SetValue(const LockState& lock, const std::string& value) override {
    NoResult none;
    return Run(channel_.get(), SetValueOp(prefix_, HoldRef::Of(lock), value, sharded_), &none);
  }

  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) override {
    RunAsync<NoResult>(channel_.get(), SetValueOp(prefix_, HoldRef::Of(*lock), value, sharded_),
                       [done = std::move(done)](const Status& s, NoResult) { done(s); });
  }

  Status Inspect(const std::string& name, LockInfo* out) override {
    return Run(channel_.get(), InspectOp(prefix_, name), out);
  }

  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out) override {
    return Run(channel_.get(), BreakOp(prefix_, name, reason, now, sharded_), out);
  }

  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) override {
    std::string id;
    Status s = NewOwnerToken(&id);  // 128 random bits: tells this request from any other
    if (!s.ok()) return s;
    Asked out;
    s = Run(channel_.get(), RequestReleaseOp(prefix_, name, id, reason, sharded_), &out);
    *asked = out.holds;
    return s;
  }
  // A holder listens on the channel its waiters wake on: one subscription per name.
  void WatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    Watch(name, watcher);
  }
  void UnwatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    Unwatch(name, watcher);
  }

  void InspectAsync(const std::string& name, InspectCallback done) override {
    RunAsync<LockInfo>(channel_.get(), InspectOp(prefix_, name),
                       [done = std::move(done)](const Status& s, LockInfo info) { done(s, std::move(info)); });
  }

  // Tokens: max(counter + 1, server TIME in µs), so they rise across a restart that lost the
  // data too. Releases are published, so waiters wake on them; an exclusive release hands the
  // lock to the first fair waiter in line (release.lua) and tells only it. Shared and semaphore holds
  // expire by the server's clock (lua/acquire.lua); a waiting writer keeps new shared holds out
  // with an announcement key that lapses unless it retries.
  uint32_t Capabilities() const override {
    // Releases, hand-overs and new values are published (release.lua, set_value.lua).
    return kCapFencingStrict | kCapNotifies | kCapShared | kCapPermits | kCapFair | kCapObservePush |
           kCapBreak | kCapMinHold | kCapLockDelay | kCapReleaseRequest;
  }
  void LeaveLine(const LockRequest& request) override {
    auto leave = [this, op = LeaveLineOp(prefix_, request, sharded_)] {
      RunAsync<NoResult>(channel_.get(), op, [](const Status&, NoResult) {});
    };
    // On the loop thread, sent now: a client closed right after (a waiter cancelled by close)
    // counts it among the answers its teardown waits for.
    if (loop_->InLoopThread()) {
      leave();
      return;
    }
    // A blocking waiter that gives up leaves the line before its acquire returns: a release
    // made once it returned must not hand the lock to it (a try right after would find it
    // held by the waiter that gave up). Sent again from the loop if it fails.
    NoResult none;
    Status s = Run(channel_.get(), LeaveLineOp(prefix_, request, sharded_), &none);
    if (!s.ok() && s.code() != Code::kNotHeld) loop_->Post(std::move(leave));  // NotHeld: nothing was handed
  }
  void Watch(const std::string& name, ReleaseWatcher* watcher) override {
    channel_->Watch(LockKeys::Channel(prefix_, name), watcher);
  }
  void Unwatch(const std::string& name, ReleaseWatcher* watcher) override {
    channel_->Unwatch(LockKeys::Channel(prefix_, name), watcher);
  }

  size_t PendingAsync() const override { return channel_->PendingAsync(); }
  void ShutdownOnLoop() override { channel_->ShutdownOnLoop(); }
  // Every node's connections, blocking, async and pub/sub (and Sentinel's sentinels): they all
  // count into the config's counter.
  int64_t OpenConnections() const override { return connections_ ? connections_->open() : -1; }

 private:
  // Gives back an acquire that may have won, or a release not confirmed (fire and forget).
  // Loop thread.
  void GiveBack(const HoldRef& hold) {
    RunAsync<NoResult>(channel_.get(), ReleaseOp(prefix_, hold, sharded_),
                       [](const Status&, NoResult) {});
  }
  // The same from any thread.
  void PostGiveBack(HoldRef hold) {
    loop_->Post([this, hold = std::move(hold)] { GiveBack(hold); });
  }

  EventLoop* loop_;
  const std::string prefix_;
  const int wait_replicas_;
  std::unique_ptr<Channel> channel_;
  const bool sharded_;
  const std::shared_ptr<ConnectionCount> connections_;
  const bool one_server_;
};

}  // namespace
}  // namespace dlock::redis

namespace dlock {

Status PrepareRedis(const Url& url, int64_t) {
  return redis::CheckUrl(url, redis::ParseRedisUrl);
}

Status NewRedisBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  return redis::OpenFromUrl(url, redis::ParseRedisUrl, [loop](const redis::RedisConfig& config) {
    auto channel = std::make_unique<redis::NodeChannel>(loop, config);
    return std::make_unique<redis::RedisBackend>(loop, config, std::move(channel), /*one_server=*/true);
  }, out);
}

Status PrepareRedisCluster(const Url& url, int64_t) {
  return redis::CheckUrl(url, redis::ParseRedisClusterUrl);
}

Status NewRedisClusterBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  return redis::OpenFromUrl(url, redis::ParseRedisClusterUrl, [loop](const redis::RedisClusterConfig& config) {
    auto channel = std::make_unique<redis::ClusterChannel>(loop, config);
    return std::make_unique<redis::RedisBackend>(loop, config.node, std::move(channel), /*one_server=*/false);
  }, out);
}

Status PrepareRedisSentinel(const Url& url, int64_t) {
  return redis::CheckUrl(url, redis::ParseRedisSentinelUrl);
}

Status NewRedisSentinelBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  return redis::OpenFromUrl(url, redis::ParseRedisSentinelUrl, [loop](const redis::RedisSentinelConfig& config) {
    auto channel = std::make_unique<redis::SentinelChannel>(loop, config);
    return std::make_unique<redis::RedisBackend>(loop, config.node, std::move(channel), /*one_server=*/true);
  }, out);
}

}  // namespace dlock
