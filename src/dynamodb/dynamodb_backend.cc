#include "dynamodb/dynamodb_backend.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/connection_count.h"
#include "dynamodb/credentials.h"
#include "dynamodb/dynamodb_api.h"
#include "dynamodb/lock_protocol.h"
#include "dynamodb/transports.h"

namespace dlock::dynamodb {
namespace {

// Threads releasing at once when a client holding many locks closes.
constexpr size_t kReleaseAllThreads = 8;

class DynamoDbBackend : public Backend {
 public:
  DynamoDbBackend(EventLoop* loop, DynamoConfig config)
      : api_(std::move(config), &credentials_),
        protocol_(&api_),
        blocking_http_(connections_),
        blocking_(&api_, &blocking_http_),
        async_(&api_, &loop_http_),
        loop_http_(loop, connections_) {
    protocol_.SetBackground([this, loop](const std::string& operation, Json body) {
      loop->Post([this, operation, body = std::move(body)] {
        async_.Call(operation, body, Now() + Millis(api_.config().params.timeout_ms), [](ApiResult) {});
      });
    });
  }

  Status Check() override {
    Credentials credentials;
    Status s = credentials_.Get(&credentials);
    if (!s.ok()) return s;
    // A read of a key no lock uses: proves the endpoint, the credentials and the table.
    Json key = Json::object();
    const DynamoConfig& config = api_.config();
    key[config.partition_key] = Json{{"S", config.params.prefix + ".dlock-open-check"}};
    if (!config.sort_key.empty()) key[config.sort_key] = Json{{"S", "."}};
    ApiResult result;
    CallWithRetries(&blocking_, &credentials_, "GetItem", protocol_.GetItemBody(key),
                    Now() + Millis(config.params.timeout_ms),
                    [&](ApiResult r) { result = std::move(r); });
    return result.outcome == Outcome::kOk ? Status::Ok() : result.status;
  }

  Status TryAcquire(const LockRequest& request, AcquireAttempt* out) override {
    Status status;
    protocol_.Acquire(&blocking_, request, [&](Status s, AcquireAttempt a) {
      status = std::move(s);
      *out = std::move(a);
    });
    return status;
  }

  Status Release(const LockState& lock) override {
    Status status;
    protocol_.Release(&blocking_, BorrowLock(lock), [&](Status s) { status = std::move(s); });
    return status;
  }

  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    // DynamoDB has no conditional batch write: release in parallel, a few at a time. Once a
    // release cannot reach the table, the others stop (each would cost a timeout; their leases
    // end them instead).
    std::atomic<size_t> next{0};
    std::atomic<bool> unreachable{false};
    auto worker = [&] {
      for (size_t i = next++; i < locks.size() && !unreachable; i = next++) {
        if (Release(*locks[i]).code() == Code::kIoError) unreachable = true;
      }
    };
    std::vector<std::thread> threads;
    size_t n = std::min(kReleaseAllThreads, locks.size());
    for (size_t t = 1; t < n; ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
  }

  void TryAcquireAsync(const LockRequest& request, AttemptCallback done) override {
    protocol_.Acquire(&async_, request,
                      [done = std::move(done)](Status s, AcquireAttempt a) { done(s, a); });
  }

  Status SetValue(const LockState& lock, const std::string& value) override {
    Status status;
    protocol_.SetValue(&blocking_, BorrowLock(lock), value, [&](Status s) { status = std::move(s); });
    return status;
  }

  Status Inspect(const std::string& name, LockInfo* out) override {
    Status status;
    protocol_.Inspect(&blocking_, name, [&](Status s, LockInfo info) {
      status = std::move(s);
      *out = std::move(info);
    });
    return status;
  }

  // Break: holds removed and recorded, the fence kept, a marker that lapses as a lease does
  // (lock_protocol.h). DynamoDB has no notifications: waiters retry when the marker lapses.
  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out) override {
    Status status;
    protocol_.Break(&blocking_, name, reason, now, [&](Status s, BreakResult result) {
      status = std::move(s);
      *out = std::move(result);
    });
    return status;
  }

  // Release requests: stored on the item, heard by listening holders at their next renewal
  // (lock_protocol.h, "Release requests"). One write when this client knows the name's fence,
  // else a read and a write; a race with an acquire costs a round more. Bounded by timeout_ms.
  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) override {
    Status status;
    protocol_.RequestRelease(&blocking_, name, reason, [&](Status s, uint32_t n) {
      status = std::move(s);
      *asked = n;
    });
    return status;
  }

  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) override {
    protocol_.SetValue(&async_, std::move(lock), value, std::move(done));
  }

  void InspectAsync(const std::string& name, InspectCallback done) override {
    protocol_.Inspect(&async_, name, std::move(done));
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    protocol_.Release(&async_, std::move(lock), std::move(done));
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    protocol_.Renew(&async_, std::move(lock), lease_ms, CallDeadline(), std::move(done));
  }

  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    // No conditional batch write in DynamoDB: the renewals go out at once, each its own
    // request on the multi handle's kept-alive connections.
    for (auto& request : batch) {
      TimePoint deadline = request.lock->LocalDeadline();
      protocol_.Renew(&async_, request.lock, request.lease_ms, deadline,
                      [sink, request](Status s) { sink->OnRenewed(request, s); });
    }
  }

  // Tokens: one counter per name (fence, seeded from the wall clock in µs), kept in the item
  // across releases, raised by every acquisition of every kind. Shared holds and semaphores:
  // a map of holds in the same item (lock_protocol.h). DynamoDB has no release notifications:
  // waiters use holder_ttl_ms and jittered retries. Job rules: stored with each hold and judged
  // with its lease on the waiters' clocks; an early release leaves a min-hold marker
  // (lock_protocol.h). Release requests: read back by listening holders' renewals (so
  // WatchReleaseRequests is the base class's nothing).
  uint32_t Capabilities() const override {
    return kCapFencingStrict | kCapShared | kCapPermits | kCapBreak | kCapMinHold | kCapLockDelay |
           kCapReleaseRequest;
  }
  void Watch(const std::string&, ReleaseWatcher*) override {}
  void Unwatch(const std::string&, ReleaseWatcher*) override {}

  size_t PendingAsync() const override { return loop_http_.pending(); }
  void ShutdownOnLoop() override { loop_http_.Shutdown(api_.config().Describe() + ": client closed"); }
  // The endpoint's connections, blocking and async (the credentials' fetches are not counted).
  int64_t OpenConnections() const override { return connections_->open(); }

 private:
  // A caller's call ends by timeout_ms (docs/urls.md, "How long a call can take").
  TimePoint CallDeadline() const { return Now() + Millis(api_.config().params.timeout_ms); }

  // First: every connection below counts into it, the last of them when loop_http_ goes.
  const std::shared_ptr<ConnectionCount> connections_ = std::make_shared<ConnectionCount>();
  CredentialsChain credentials_;
  Api api_;
  LockProtocol protocol_;
  http::BlockingTransport blocking_http_;
  HttpCaller blocking_;
  HttpCaller async_;               // loop thread only, as is loop_http_
  // After async_: destroyed first, its shutdown's callbacks (retries) may still call async_.
  http::LoopTransport loop_http_;
};

}  // namespace
}  // namespace dlock::dynamodb

namespace dlock {

Status NewDynamoDbBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  dynamodb::DynamoConfig config;
  Status s = dynamodb::ParseDynamoUrl(url, &config);
  if (!s.ok()) return s;
  *out = std::make_unique<dynamodb::DynamoDbBackend>(loop, std::move(config));
  return Status::Ok();
}

}  // namespace dlock
