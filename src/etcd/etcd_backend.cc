#include "etcd/etcd_backend.h"

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/connection_count.h"
#include "etcd/lock_protocol.h"
#include "etcd/transport.h"
#include "etcd/watches.h"

namespace dlock::etcd {
namespace {

class EtcdBackend : public Backend {
 public:
  EtcdBackend(EventLoop* loop, EtcdConfig config)
      : loop_(loop),
        config_(std::move(config)),
        protocol_(&config_),
        blocking_http_(connections_),
        blocking_(&config_, &blocking_http_),
        async_(&config_, &loop_http_),
        loop_http_(loop, connections_),
        watches_(&config_, loop, loop_http_.client()) {
    protocol_.SetBackground([this](const std::string& path, std::string body) {
      loop_->Post([this, path, body = std::move(body)]() mutable { SendInBackground(path, std::move(body), 8); });
    });
  }

  // Background writes are not sent again from here on (the loop transport's shutdown runs
  // their pending tries).
  ~EtcdBackend() override { shut_down_ = true; }

  Status Check() override {
    Status status;
    protocol_.Probe(&blocking_, CallDeadline(), [&](Status s) { status = std::move(s); });
    return status;
  }

  Status TryAcquire(const LockRequest& request, AcquireAttempt* out) override {
    Status status;
    protocol_.Acquire(&blocking_, request, CallDeadline(), [&](Status s, AcquireAttempt a) {
      status = std::move(s);
      *out = std::move(a);
    });
    return status;
  }

  // lock_protocol.h, "Several names": exclusive holds without job rules in one transaction.
  // (layout=mutex: the names one at a time, each in its own line.)
  bool AcquiresManyAtOnce() const override { return !protocol_.mutex_layout(); }
  Status TryAcquireMany(const std::vector<LockRequest>& requests, std::vector<AcquireAttempt>* out,
                        size_t* refused) override {
    out->assign(requests.size(), AcquireAttempt());
    *refused = requests.size();  // refused, by whom unknown: the names one at a time say
    // Three compares per name: etcd refuses a transaction of more than --max-txn-ops (128 by
    // default) of them; more names go one at a time.
    constexpr size_t kMaxNamesPerTxn = 32;
    if (requests.size() > kMaxNamesPerTxn) return Status::Ok();
    for (const LockRequest& r : requests) {
      if (r.kind != LockKind::kExclusive || r.permits != 0 || r.min_hold_ms != 0 || r.lock_delay_ms != 0) {
        return Status::Ok();
      }
    }
    Status status;
    protocol_.AcquireMany(&blocking_, requests, CallDeadline(), [&](Status s, std::vector<AcquireAttempt> won) {
      status = std::move(s);
      if (!won.empty()) *out = std::move(won);
    });
    return status;
  }

  Status Release(const LockState& lock) override {
    Status status;
    protocol_.Release(&blocking_, BorrowLock(lock), CallDeadline(), [&](Status s) { status = std::move(s); });
    return status;
  }

  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    protocol_.ReleaseAll(&blocking_, locks, CallDeadline());
  }

  void TryAcquireAsync(const LockRequest& request, AttemptCallback done) override {
    auto leaving = leaving_.find(request.name);
    if (leaving != leaving_.end()) {  // after the waiter's key is gone (LeaveLine)
      leaving->second.then.push_back([this, request, done = std::move(done)]() mutable {
        protocol_.Acquire(&async_, request, CallDeadline(), std::move(done));
      });
      return;
    }
    protocol_.Acquire(&async_, request, CallDeadline(), std::move(done));
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    protocol_.Release(&async_, std::move(lock), CallDeadline(), std::move(done));
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    protocol_.Extend(&async_, std::move(lock), lease_ms, CallDeadline(), std::move(done));
  }

  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    // One round per lease length in use; it must be over by the earliest local deadline.
    std::vector<std::shared_ptr<const LockState>> locks;
    TimePoint deadline = TimePoint::max();
    for (const auto& r : batch) {
      locks.push_back(r.lock);
      deadline = std::min(deadline, r.lock->LocalDeadline());
    }
    deadline = std::min(deadline, CallDeadline());
    auto shared = std::make_shared<std::vector<RenewRequest>>(std::move(batch));
    protocol_.Renew(&async_, locks, deadline,
                    [sink, shared](size_t k, Status s) { sink->OnRenewed((*shared)[k], s); });
  }

  Status SetValue(const LockState& lock, const std::string& value) override {
    Status status;
    protocol_.SetValue(&blocking_, BorrowLock(lock), value, CallDeadline(), [&](Status s) { status = std::move(s); });
    return status;
  }

  Status Inspect(const std::string& name, LockInfo* out) override {
    Status status;
    protocol_.Inspect(&blocking_, name, CallDeadline(), [&](Status s, LockInfo info) {
      status = std::move(s);
      *out = std::move(info);
    });
    return status;
  }

  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) override {
    protocol_.SetValue(&async_, std::move(lock), value, CallDeadline(), std::move(done));
  }

  void InspectAsync(const std::string& name, InspectCallback done) override {
    protocol_.Inspect(&async_, name, CallDeadline(), std::move(done));
  }

  // lock_protocol.h, "Break": holds deleted in one transaction that leaves the closed marker.
  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out) override {
    if (protocol_.mutex_layout()) return Backend::Break(name, reason, now, out);
    Status status;
    protocol_.Break(&blocking_, name, reason, now, CallDeadline(), [&](Status s, BreakResult result) {
      status = std::move(s);
      *out = std::move(result);
    });
    return status;
  }

  // lock_protocol.h, "Release requests": one transaction puts the request key where the name
  // has holds (after a lease grant when the shared one is due: two round trips at most, three
  // when etcd lost that lease), bounded by timeout_ms.
  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) override {
    if (protocol_.mutex_layout()) return Backend::RequestRelease(name, reason, asked);
    Status status;
    protocol_.RequestRelease(&blocking_, name, reason, CallDeadline(), [&](Status s, uint32_t n) {
      status = std::move(s);
      *asked = n;
    });
    return status;
  }
  // A listening holder watches the name's request key for puts (watches.h).
  void WatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    watches_.WatchPuts(protocol_.RequestKey(name), watcher, &TellRequest);
  }
  void UnwatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    watches_.UnwatchPuts(protocol_.RequestKey(name), watcher);
  }

  // Tokens are create revisions (strict); deletions of a held key wake waiters (watches);
  // shared holds and semaphores (lock_protocol.h, "Kinds"); breaks ("Break"); min holds and
  // lock-delays as markers on leases of their own ("Job rules"); release requests put on a key
  // that listening holders watch ("Release requests").
  // layout=mutex: etcd's recipe has exclusive locks only, and no markers beside them; its
  // waiters stand in line by their keys' create revisions (fair).
  uint32_t Capabilities() const override {
    if (protocol_.mutex_layout()) return kCapFencingStrict | kCapNotifies | kCapFair;
    return kCapFencingStrict | kCapNotifies | kCapShared | kCapPermits | kCapBreak | kCapMinHold | kCapLockDelay |
           kCapReleaseRequest;
  }
  std::string CapabilityNote() const override {
    return protocol_.mutex_layout() ? " (etcd's lock recipe, layout=mutex, has exclusive locks only)" : "";
  }
  // layout=mutex: the deletions of every key under NAME/ (holders' and waiters' alike).
  void Watch(const std::string& name, ReleaseWatcher* watcher) override {
    if (protocol_.mutex_layout()) {
      // A waiter in line wakes when the key right before its own goes (Go's waitDeletes);
      // others (unfair waiters, observers) at every deletion.
      return watches_.WatchPrefix(protocol_.LinePrefix(name), watcher,
                                  [this](const Watchers& watchers, const std::vector<std::string>& deleted) {
        watchers.TellEach([&](ReleaseWatcher& w) {
          const LineWake wake = w.waiter_id().empty() ? LineWake::kRelease : protocol_.WakeOf(w.waiter_id(), deleted);
          if (wake == LineWake::kRelease || w.hears_every_change()) {
            w.OnReleased();
          } else if (wake == LineWake::kHandOver) {
            w.OnHandedOver(0);  // a claim its next attempt confirms, as a Redis grant is
          }
        });
      });
    }
    watches_.Watch(protocol_.KeyFor(name), watcher);
  }
  void Unwatch(const std::string& name, ReleaseWatcher* watcher) override {
    if (protocol_.mutex_layout()) return watches_.UnwatchPrefix(protocol_.LinePrefix(name), watcher);
    watches_.Unwatch(protocol_.KeyFor(name), watcher);
  }
  // layout=mutex: the waiter's key goes (its place in line). Blocking off the loop thread. On
  // it, the async acquires of the name wait for the deletion: the client's next try must not
  // find its own waiter's key (the HTTP connections of one client keep no order between them).
  void LeaveLine(const LockRequest& request) override {
    if (!protocol_.mutex_layout() || request.waiter_id.empty()) return;
    if (!loop_->InLoopThread()) return protocol_.LeaveLine(&blocking_, request, CallDeadline(), [](Status) {});
    Leaving& leaving = leaving_[request.name];
    ++leaving.pending;
    leaving.requests.push_back(request);
    protocol_.LeaveLine(&async_, request, CallDeadline(), [this, request](Status) {
      auto it = leaving_.find(request.name);
      if (it == leaving_.end()) return;
      auto& requests = it->second.requests;
      for (auto r = requests.begin(); r != requests.end(); ++r) {
        if (r->waiter_id == request.waiter_id) {
          requests.erase(r);
          break;
        }
      }
      if (--it->second.pending > 0) return;
      std::vector<std::function<void()>> then = std::move(it->second.then);
      leaving_.erase(it);
      for (auto& fn : then) fn();
    });
  }

  // Watch streams never end by themselves: they are not work close waits for.
  // A waiter's LeaveLine counts until its key is gone (it may wait for an endpoint before its
  // request is in flight): a client closed after a give-up leaves no place in line behind.
  size_t PendingAsync() const override {
    size_t leaving = 0;
    for (const auto& entry : leaving_) leaving += static_cast<size_t>(entry.second.pending);
    return loop_http_.requests_in_flight() + leaving;
  }
  void ShutdownOnLoop() override {
    shut_down_ = true;
    watches_.Shutdown();
    // A waiter that left the line just before the close (a give-up) must not leave its key
    // behind: its deletion, still in flight, is made now, blocking (each bounded by timeout_ms).
    std::vector<LockRequest> leaving;
    for (const auto& entry : leaving_) leaving.insert(leaving.end(), entry.second.requests.begin(), entry.second.requests.end());
    for (const LockRequest& request : leaving) protocol_.LeaveLine(&blocking_, request, CallDeadline(), [](Status) {});
    // The background writes' next tries run now, and stop (shut down).
    loop_http_.Shutdown(config_.Describe() + ": client closed");
  }
  // Every endpoint's connections: blocking calls, async calls and watch streams.
  int64_t OpenConnections() const override { return connections_->open(); }

 private:
  // A put of a request key, told to its listening holders (a value dlock did not write is
  // ignored).
  static void TellRequest(const Watchers& watchers, const KeyValue& put) {
    std::string id, reason;
    if (DecodeReleaseRequest(put.value, &id, &reason)) watchers.TellReleaseRequested(id, reason);
  }

  // Loop thread: a write the protocol sends in the background (a release again, a give-back),
  // sent again every 250 ms while etcd cannot take it (no leader, out of reach), up to `tries`
  // times: an election takes about a second, and until the write lands the key holds its lock.
  void SendInBackground(const std::string& path, std::string body, int tries) {
    if (shut_down_) return;
    async_.Call(path, body, CallDeadline(), [this, path, body, tries](CallResult r) {
      const bool refused = r.grpc_code != 0 && r.grpc_code != kGrpcUnavailable;
      if (r.status.ok() || refused || tries <= 1 || shut_down_) return;
      loop_http_.After(Millis(250), [this, path, body, tries] { SendInBackground(path, body, tries - 1); });
    });
  }

  // A call ends by timeout_ms (docs/urls.md, "How long a call can take").
  TimePoint CallDeadline() const { return Now() + Millis(config_.params.timeout_ms); }

  EventLoop* loop_;
  // Before the transports: every connection counts into it, the last of them when loop_http_ goes.
  const std::shared_ptr<ConnectionCount> connections_ = std::make_shared<ConnectionCount>();
  EtcdConfig config_;
  LockProtocol protocol_;
  http::BlockingTransport blocking_http_;
  Transport blocking_;
  Transport async_;                // loop thread only, as are loop_http_ and watches_
  // After async_: destroyed first, its shutdown's callbacks may still call async_.
  http::LoopTransport loop_http_;
  Watches watches_;
  bool shut_down_ = false;  // loop thread
  // layout=mutex, loop thread: names whose waiters' keys are being deleted (LeaveLine), and the
  // async acquires of them that wait for that.
  struct Leaving {
    int pending = 0;
    std::vector<LockRequest> requests;  // their deletions in flight
    std::vector<std::function<void()>> then;
  };
  std::map<std::string, Leaving> leaving_;
};

}  // namespace
}  // namespace dlock::etcd

namespace dlock {

Status NewEtcdBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  etcd::EtcdConfig config;
  Status s = etcd::ParseEtcdUrl(url, &config);
  if (!s.ok()) return s;
  *out = std::make_unique<etcd::EtcdBackend>(loop, std::move(config));
  return Status::Ok();
}

Status PrepareEtcd(const Url& url, int64_t) {
  etcd::EtcdConfig config;
  return etcd::ParseEtcdUrl(url, &config);
}

}  // namespace dlock
