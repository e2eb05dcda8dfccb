#include "redis/redis_backend.h"

#include <mutex>
#include <vector>

#include "redis/async_connection.h"
#include "redis/redis_url.h"
#include "redis/reply.h"
#include "redis/scripts.h"
#include "redis/subscriber.h"
#include "redis/sync_connection.h"

namespace dlock::redis {
namespace {

// Idle blocking connections kept for reuse; more are opened when more threads call at once.
constexpr size_t kMaxIdleConnections = 64;

class RedisBackend : public Backend {
 public:
  RedisBackend(EventLoop* loop, RedisConfig config)
      : loop_(loop),
        config_(std::move(config)),
        server_(config_.Describe()),
        async_(loop, config_),
        subscriber_(loop, config_) {}

  Status Check() override {
    return WithConnection([&](SyncConnection& conn, TimePoint deadline) {
      ReplyPtr reply;
      Status s = conn.Command({"PING"}, deadline, &reply);
      if (!s.ok()) return s;
      if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(reply.get(), server_);
      return Status::Ok();
    });
  }

  Status TryAcquire(const std::string& name, const std::string& owner_value, uint64_t lease_ms,
                    AcquireAttempt* out) override {
    LockKeys keys(config_.params.prefix, name);
    ReplyPtr reply;
    // Safe to retry: acquire.lua answers the same to an owner that already holds the lock.
    Status s = WithConnection([&](SyncConnection& conn, TimePoint deadline) {
      return conn.Eval(GetScript(ScriptId::kAcquire), {keys.holder, keys.fence},
                       {owner_value, std::to_string(lease_ms)}, deadline, &reply);
    });
    if (!s.ok()) {
      // The attempt may have reached the server before the connection failed or the reply
      // turned to garbage: if it did, the lock is ours and nobody knows it. Give it back, best
      // effort, in the background: the caller's bound must not pay another timeout for it.
      GiveBack(keys, owner_value);
      return s;
    }
    return ParseAcquireReply(reply.get(), server_, out);
  }

  Status Release(const LockState& lock) override {
    LockKeys keys(config_.params.prefix, lock.name);
    ReplyPtr reply;
    Status s = WithConnection([&](SyncConnection& conn, TimePoint deadline) {
      return conn.Eval(GetScript(ScriptId::kRelease), {keys.holder},
                       {lock.owner_value, keys.channel}, deadline, &reply);
    });
    if (!s.ok()) {
      // Not confirmed, and the caller's handle is gone: try once more in the background, or
      // the key stays until its lease runs out (never, without one).
      GiveBack(keys, lock.owner_value);
      return s;
    }
    return ParseOwnedReply(reply.get(), server_, lock.name);
  }

  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    // One pipeline for all of them: closing a client holding 10,000 locks is one round trip,
    // bounded like any call (C + T), whatever the server does. A stale pooled connection is
    // retried once on a fresh one (WithConnection), from the first unanswered lock. What is
    // still unanswered then ends with its lease.
    size_t answered = 0;
    (void)WithConnection([&](SyncConnection& conn, TimePoint deadline) {
      const Script& script = GetScript(ScriptId::kRelease);
      Status st = conn.LoadScript(script, deadline);
      if (!st.ok()) return st;
      for (size_t i = answered; i < locks.size(); ++i) {
        LockKeys keys(config_.params.prefix, locks[i]->name);
        conn.Append(EvalShaArgv(script, {keys.holder}, {locks[i]->owner_value, keys.channel}));
      }
      for (; answered < locks.size(); ++answered) {
        ReplyPtr reply;
        st = conn.ReadReply(deadline, &reply);
        if (!st.ok()) return st;
      }
      return Status::Ok();
    });
  }

  void TryAcquireAsync(const std::string& name, const std::string& owner_value, uint64_t lease_ms,
                       AttemptCallback done) override {
    LockKeys keys(config_.params.prefix, name);
    async_.Eval(GetScript(ScriptId::kAcquire), {keys.holder, keys.fence},
                {owner_value, std::to_string(lease_ms)},
                [this, keys, owner_value, done = std::move(done)](redisReply* reply,
                                                                 const Status& error) {
                  AcquireAttempt attempt;
                  if (!error.ok()) {
                    // As in TryAcquire: the attempt may have won before the connection failed.
                    async_.Eval(GetScript(ScriptId::kRelease), {keys.holder},
                                {owner_value, keys.channel}, [](redisReply*, const Status&) {});
                    done(error, attempt);
                    return;
                  }
                  Status s = ParseAcquireReply(reply, server_, &attempt);
                  done(s, attempt);
                });
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    LockKeys keys(config_.params.prefix, lock->name);
    async_.Eval(GetScript(ScriptId::kRelease), {keys.holder}, {lock->owner_value, keys.channel},
                [this, lock, done = std::move(done)](redisReply* reply, const Status& error) {
                  done(error.ok() ? ParseOwnedReply(reply, server_, lock->name) : error);
                });
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    LockKeys keys(config_.params.prefix, lock->name);
    async_.Eval(GetScript(ScriptId::kExtend), {keys.holder},
                {lock->owner_value, std::to_string(lease_ms)},
                [this, lock, done = std::move(done)](redisReply* reply, const Status& error) {
                  done(error.ok() ? ParseOwnedReply(reply, server_, lock->name) : error);
                });
  }

  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    // All commands issued here leave in one write on the async connection: one round trip.
    for (auto& request : batch) {
      LockKeys keys(config_.params.prefix, request.lock->name);
      async_.Eval(GetScript(ScriptId::kExtend), {keys.holder},
                     {request.lock->owner_value, std::to_string(request.lease_ms)},
                     [this, sink, request](redisReply* reply, const Status& error) {
                       if (!error.ok()) {
                         sink->OnRenewed(request, error);
                         return;
                       }
                       sink->OnRenewed(request, ParseOwnedReply(reply, server_, request.lock->name));
                     });
    }
  }

  // Tokens: max(counter + 1, server TIME in µs), so they rise across a restart that lost the
  // data too. Releases are published, so waiters wake on them.
  uint32_t Capabilities() const override { return kCapFencingStrict | kCapNotifies; }
  void Watch(const std::string& name, ReleaseWatcher* watcher) override {
    subscriber_.Watch(LockKeys(config_.params.prefix, name).channel, watcher);
  }
  void Unwatch(const std::string& name, ReleaseWatcher* watcher) override {
    subscriber_.Unwatch(LockKeys(config_.params.prefix, name).channel, watcher);
  }

  size_t PendingAsync() const override { return async_.pending(); }

  void ShutdownOnLoop() override {
    async_.Shutdown("the client was closed");
    subscriber_.ShutdownOnLoop();
  }

 private:
  // Gives back an acquire that may have won, or a release not confirmed, on the loop's
  // connection (fire and forget).
  void GiveBack(const LockKeys& keys, const std::string& owner_value) {
    loop_->Post([this, keys, owner_value] {
      async_.Eval(GetScript(ScriptId::kRelease), {keys.holder}, {owner_value, keys.channel},
                  [](redisReply*, const Status&) {});
    });
  }

  // Runs fn(connection, deadline) on a pooled connection. The whole call, connecting
  // included, ends by start + connect_timeout_ms + timeout_ms; each command by timeout_ms
  // after it starts. A pooled connection that fails at once (reset, closed: the server
  // restarted or dropped an idle client) was most likely stale: the pool is dropped and fn runs
  // once more on a fresh connection, within the same bound. A timeout is not retried: the
  // server is there but silent, and a retry would only double the caller's wait.
  template <typename Fn>
  Status WithConnection(Fn&& fn) {
    const TimePoint call_deadline =
        Now() + Millis(config_.params.connect_timeout_ms) + Millis(config_.params.timeout_ms);
    for (int round = 0;; ++round) {
      Lease conn(this);
      Status s = conn.Open(std::min(call_deadline, Now() + Millis(config_.params.connect_timeout_ms)));
      if (!s.ok()) return s;
      s = fn(*conn.get(), std::min(call_deadline, Now() + Millis(config_.params.timeout_ms)));
      if (s.code() != Code::kIoError || conn->timed_out()) return s;
      {
        std::lock_guard<std::mutex> lock(pool_mu_);
        idle_.clear();
      }
      if (!conn.reused() || round > 0) return s;
    }
  }

  // A pooled blocking connection for the duration of one call.
  class Lease {
   public:
    explicit Lease(RedisBackend* backend) : backend_(backend) {}
    ~Lease() {
      if (conn_ == nullptr || conn_->broken()) return;
      std::lock_guard<std::mutex> lock(backend_->pool_mu_);
      if (backend_->idle_.size() < kMaxIdleConnections) backend_->idle_.push_back(std::move(conn_));
    }
    Status Open(TimePoint deadline) {
      {
        std::lock_guard<std::mutex> lock(backend_->pool_mu_);
        if (!backend_->idle_.empty()) {
          conn_ = std::move(backend_->idle_.back());
          backend_->idle_.pop_back();
          reused_ = true;
          return Status::Ok();
        }
      }
      return SyncConnection::Connect(backend_->config_, deadline, &conn_);
    }
    SyncConnection* operator->() { return conn_.get(); }
    SyncConnection* get() { return conn_.get(); }
    bool reused() const { return reused_; }

   private:
    RedisBackend* backend_;
    bool reused_ = false;
    std::unique_ptr<SyncConnection> conn_;
  };

  EventLoop* loop_;
  RedisConfig config_;
  std::string server_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<SyncConnection>> idle_;
  AsyncConnection async_;  // loop thread only: heartbeats and async calls, pipelined
  Subscriber subscriber_;
};

}  // namespace
}  // namespace dlock::redis

namespace dlock {

Status PrepareRedis(const Url& url, int64_t) {
  redis::RedisConfig config;
  return redis::ParseRedisUrl(url, &config);
}

Status NewRedisBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  redis::RedisConfig config;
  Status s = redis::ParseRedisUrl(url, &config);
  if (!s.ok()) return s;
  *out = std::make_unique<redis::RedisBackend>(loop, std::move(config));
  return Status::Ok();
}

}  // namespace dlock
