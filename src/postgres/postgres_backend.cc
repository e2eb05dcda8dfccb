#include "postgres/postgres_backend.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/token.h"
#include "postgres/blocking_session.h"
#include "postgres/connection.h"
#include "postgres/lock_protocol.h"

namespace dlock::postgres {
namespace {

// The table's quoted name and its functions' (PQescapeIdentifier on a pooled connection).
Status QuoteNames(BlockingSession* session, const PostgresConfig& config, TimePoint deadline, std::string* table,
                  std::map<std::string, std::string>* functions) {
  Status s = session->QuoteIdentifier(config.table, deadline, table);
  for (const char* f : kFunctionNames) {
    if (s.ok()) s = session->QuoteIdentifier(config.table + "_" + f, deadline, &(*functions)[f]);
  }
  return s;
}

// Release notifications: one connection per client LISTENs on the table's channel, and every
// release's NOTIFY (lock_protocol.h, Notification) wakes the watchers of that name. A listener
// that breaks tells its watchers (a release may have been missed: they try again), and LISTENs
// again on a new connection. Loop thread, but for Add and Remove (any thread).
class Listener {
 public:
  Listener(EventLoop* loop, const PostgresConfig* config, const Statements* sql,
           std::shared_ptr<ConnectionCount> count)
      : loop_(loop),
        config_(config),
        sql_(sql),
        conn_(loop, config, [this](const std::string&, const std::string& payload) { Heard(payload); },
              std::move(count)),
        retry_(loop, [this] { Listen(); }) {
    conn_.SetOnDrop([this](const Status&) { Dropped(); });
  }

  void Add(const std::string& name, ReleaseWatcher* w) {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.emplace(name, w);
    loop_->Post([this, name, w] {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_) return;
      if (!started_) {
        started_ = true;
        return Listen();
      }
      if (!live_) return;
      auto [from, to] = watchers_.equal_range(name);
      for (auto it = from; it != to; ++it) {
        if (it->second == w) return w->OnWatchReady(true);
      }
    });
  }

  void Remove(const std::string& name, ReleaseWatcher* w) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [from, to] = watchers_.equal_range(name);
    for (auto it = from; it != to; ++it) {
      if (it->second == w) {
        watchers_.erase(it);
        return;
      }
    }
  }

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shut_ = true;
    }
    retry_.Cancel();
    conn_.Close(Status::Cancelled(config_->Describe() + ": client closed"));
  }

 private:
  void Listen() {
    conn_.Query(sql_->listen, {}, Now() + Millis(config_->params.timeout_ms), [this](const Status& s, Answer) {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_) return;
      if (!s.ok()) {
        failures_ = std::min(failures_ + 1, 5);
        retry_.StartAfter(Millis(100 << failures_));
        return;
      }
      failures_ = 0;
      live_ = true;
      for (auto& [name, w] : watchers_) {
        w->OnWatchReady(true);
        if (relistened_) w->OnReleased();  // a release may have come while none listened
      }
      relistened_ = true;
    });
  }

  // A release wakes the name's watchers; a waiter served from the line wakes that waiter only
  // (and the observers, who hear every change, new values too); a release request reaches the
  // holders'.
  void Heard(const std::string& payload) {
    Notification n;
    if (!ParseNotification(payload, &n)) return;  // not dlock's
    std::lock_guard<std::mutex> lock(mu_);
    auto [from, to] = watchers_.equal_range(n.name);
    for (auto it = from; it != to; ++it) {
      ReleaseWatcher* w = it->second;
      if (n.requested) {
        w->OnReleaseRequested(n.id, n.reason);  // holders' listeners (waiters do nothing with it)
      } else if (n.changed) {
        if (w->hears_every_change()) w->OnReleased();  // observers read again; waiters sleep on
      } else if (!n.granted) {
        w->OnReleased();
      } else if (w->waiter_id() == n.hold) {
        w->OnHandedOver(n.token);
      } else if (w->hears_every_change()) {
        w->OnReleased();
      }
    }
  }

  void Dropped() {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_ || !live_) return;  // a failed LISTEN retries on its own
    live_ = false;
    for (auto& [name, w] : watchers_) {
      w->OnWatchReady(false);
      w->OnReleased();
    }
    retry_.StartAfter(Millis(50));
  }

  EventLoop* loop_;
  const PostgresConfig* config_;
  const Statements* sql_;
  std::mutex mu_;
  std::multimap<std::string, ReleaseWatcher*> watchers_;
  bool started_ = false, live_ = false, relistened_ = false, shut_ = false;
  int failures_ = 0;
  Connection conn_;
  Timer retry_;
};

class PostgresBackend : public Backend {
 public:
  PostgresBackend(EventLoop* loop, PostgresConfig config)
      : loop_(loop),
        config_(std::move(config)),
        protocol_(&config_),
        blocking_(&config_, connections_),
        async_(loop, &config_, nullptr, connections_),
        listener_(loop, &config_, &protocol_.statements(), connections_),
        retries_(loop) {
    protocol_.SetGiveBack([this](std::string name, std::string hold, std::string owner) {
      loop_->Post([this, name = std::move(name), hold = std::move(hold), owner = std::move(owner)] {
        GiveBack(name, hold, owner, kGiveBackTries);
      });
    });
  }

  // Give-backs are not sent again from here on.
  ~PostgresBackend() override { shut_down_ = true; }

  // Connects, and learns the quoted names its statements use.
  Status Check() override {
    std::string table;
    std::map<std::string, std::string> functions;
    Status s = QuoteNames(&blocking_, config_, CallDeadline(), &table, &functions);
    if (!s.ok()) return s;
    protocol_.SetStatements(StatementsFor([&](const std::string& f) { return functions[f]; }, table));
    return Status::Ok();
  }

  Status TryAcquire(const LockRequest& request, AcquireAttempt* out) override {
    Status status;
    protocol_.Acquire(&blocking_, request, CallDeadline(), [&](Status s, AcquireAttempt a) {
      status = std::move(s);
      *out = std::move(a);
    });
    return status;
  }

  Status Release(const LockState& lock) override {
    Status status;
    protocol_.Release(&blocking_, BorrowLock(lock), CallDeadline(), [&](Status s) { status = std::move(s); });
    return status;
  }

  // A closing client's locks, in one statement (bounded by one T); what it cannot release ends
  // with its lease.
  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    protocol_.ReleaseAll(&blocking_, locks, CallDeadline(), [](Status) {});
  }

  void TryAcquireAsync(const LockRequest& request, AttemptCallback done) override {
    protocol_.Acquire(&async_, request, CallDeadline(), std::move(done));
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    protocol_.Release(&async_, std::move(lock), CallDeadline(), std::move(done));
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    protocol_.Renew(&async_, {lock}, {lease_ms}, CallDeadline(), [done = std::move(done)](size_t, Status s) { done(s); });
  }

  // All renewals due in one statement (the table's renew function takes arrays), over by the
  // earliest local deadline among them.
  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    std::vector<std::shared_ptr<const LockState>> locks;
    std::vector<uint64_t> leases;
    TimePoint deadline = CallDeadline();
    for (const auto& r : batch) {
      locks.push_back(r.lock);
      leases.push_back(r.lease_ms);
      deadline = std::min(deadline, r.lock->LocalDeadline());
    }
    auto shared = std::make_shared<std::vector<RenewRequest>>(std::move(batch));
    protocol_.Renew(&async_, std::move(locks), std::move(leases), deadline,
                    [sink, shared](size_t k, Status s) { sink->OnRenewed((*shared)[k], s); });
  }

  Status SetValue(const LockState& lock, const std::string& value) override {
    Status status;
    protocol_.SetValue(&blocking_, BorrowLock(lock), value, CallDeadline(), [&](Status s) { status = std::move(s); });
    return status;
  }

  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) override {
    protocol_.SetValue(&async_, std::move(lock), value, CallDeadline(), std::move(done));
  }

  Status Inspect(const std::string& name, LockInfo* out) override {
    Status status;
    protocol_.Inspect(&blocking_, name, CallDeadline(), [&](Status s, LockInfo info) {
      status = std::move(s);
      *out = std::move(info);
    });
    return status;
  }

  void InspectAsync(const std::string& name, InspectCallback done) override {
    protocol_.Inspect(&async_, name, CallDeadline(), std::move(done));
  }

  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out) override {
    Status status;
    protocol_.Break(&blocking_, name, reason, now, CallDeadline(), [&](Status s, BreakResult r) {
      status = std::move(s);
      *out = std::move(r);
    });
    return status;
  }

  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) override {
    std::string id;
    Status status = NewOwnerToken(&id);  // 128 random bits: tells this request from any other
    if (!status.ok()) return status;
    protocol_.RequestRelease(&blocking_, name, id, reason, CallDeadline(), [&](Status s, uint32_t n) {
      status = std::move(s);
      *asked = n;
    });
    return status;
  }
  // A holder listens where waiters do: the client's LISTEN connection.
  void WatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override { listener_.Add(name, watcher); }
  void UnwatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    listener_.Remove(name, watcher);
  }

  // Tokens: max(counter + 1, the server's clock in µs) under the name's row lock (schema.sql).
  // Releases NOTIFY the table's channel; one LISTEN connection per client hears them.
  // Waiters that will wait keep a place in the name's line (schema.sql, the serve function).
  // Release requests and new values are notifications too; a break and the job rules leave
  // markers (schema.sql).
  uint32_t Capabilities() const override {
    return kCapFencingStrict | kCapNotifies | kCapShared | kCapPermits | kCapFair | kCapReleaseRequest | kCapBreak |
           kCapMinHold | kCapLockDelay | kCapObservePush;
  }

  // Off the loop (a blocking waiter) it waits for the answer; on it, fire and forget.
  void LeaveLine(const LockRequest& request) override {
    if (request.waiter_id.empty()) return;
    if (loop_->InLoopThread()) {
      protocol_.Leave(&async_, request, CallDeadline(), [](Status) {});
    } else {
      protocol_.Leave(&blocking_, request, CallDeadline(), [](Status) {});
    }
  }

  void Watch(const std::string& name, ReleaseWatcher* watcher) override { listener_.Add(name, watcher); }
  void Unwatch(const std::string& name, ReleaseWatcher* watcher) override { listener_.Remove(name, watcher); }

  size_t PendingAsync() const override { return async_.pending(); }
  // The blocking pool's, the loop's and the listener's.
  int64_t OpenConnections() const override { return connections_->open(); }
  void ShutdownOnLoop() override {
    shut_down_ = true;
    retries_.RunAllNow();
    listener_.Shutdown();
    async_.Close(Status::Cancelled(config_.Describe() + ": client closed"));
  }

 private:
  // A give-back is tried this many times, 250 ms apart, while the server cannot be reached.
  static constexpr int kGiveBackTries = 8;

  // Loop thread: the leave function for a hold whose acquire or release went unanswered.
  void GiveBack(const std::string& name, const std::string& hold, const std::string& owner, int tries) {
    if (shut_down_) return;
    protocol_.Leave(&async_, name, hold, owner, CallDeadline(), [this, name, hold, owner, tries](Status s) {
      if (s.code() != Code::kIoError || tries <= 1 || shut_down_) return;
      retries_.After(Millis(250), [this, name, hold, owner, tries] { GiveBack(name, hold, owner, tries - 1); });
    });
  }

  // A caller's call ends by timeout_ms (docs/urls.md, "How long a call can take").
  TimePoint CallDeadline() const { return Now() + Millis(config_.params.timeout_ms); }

  std::atomic<bool> shut_down_{false};
  EventLoop* loop_;
  const std::shared_ptr<ConnectionCount> connections_ = std::make_shared<ConnectionCount>();
  PostgresConfig config_;
  LockProtocol protocol_;
  BlockingSession blocking_;
  Connection async_;  // loop thread only
  Listener listener_;
  DelayedCalls retries_;  // loop thread only
};

}  // namespace
}  // namespace dlock::postgres

namespace dlock {

Status NewPostgresBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  postgres::PostgresConfig config;
  Status s = postgres::ParsePostgresUrl(url, &config);
  if (!s.ok()) return s;
  *out = std::make_unique<postgres::PostgresBackend>(loop, std::move(config));
  return Status::Ok();
}

Status PreparePostgres(const Url& url, int64_t wait_ms) {
  postgres::PostgresConfig config;
  Status s = postgres::ParsePostgresUrl(url, &config);
  if (!s.ok()) return s;
  // wait_ms > 0 gives a server that is starting up that long more.
  const TimePoint deadline = Now() + Millis(config.params.timeout_ms + std::max<int64_t>(wait_ms, 0));
  postgres::BlockingSession session(&config, nullptr);
  std::string table;
  std::map<std::string, std::string> functions;
  s = postgres::QuoteNames(&session, config, deadline, &table, &functions);
  if (!s.ok()) return s;
  // One transaction, and one preparer at a time (an advisory lock for the transaction): CREATE
  // OR REPLACE FUNCTION run by two sessions at once can fail ("tuple concurrently updated").
  const std::string schema = postgres::SchemaFor(config, table, [&](const std::string& f) { return functions[f]; });
  return session.Script("BEGIN;\nSELECT pg_advisory_xact_lock(7237012385);\n" + schema + "\nCOMMIT;", deadline);
}

}  // namespace dlock
