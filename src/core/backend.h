// What a backend (Redis, DynamoDB, ...) does for the generic client. The client owns the
// waiting policy, lock states and heartbeat scheduling; a backend owns its wire protocol.
#ifndef DLOCK_CORE_BACKEND_H_
#define DLOCK_CORE_BACKEND_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/lock_state.h"
#include "core/status.h"

namespace dlock {

struct AcquireAttempt {
  bool acquired = false;
  uint64_t fencing_token = 0;  // when acquired
  int64_t holder_ttl_ms = -2;  // when not: the holder's remaining lease, -1 none, -2 unknown
};

// A waiter's wake-up line: the backend notifies it when the lock it waits for is released.
class WakeSignal {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    ++notifications_;
    cv_.notify_all();
  }
  void MarkReady(bool ready) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = ready;
    cv_.notify_all();
  }
  // Waits until the subscription is live or until `until`; true when live.
  bool WaitReady(TimePoint until) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [&] { return ready_; });
    return ready_;
  }
  // Waits for a notification newer than *seen or until `until`; true when notified.
  bool WaitNotified(uint64_t* seen, TimePoint until) {
    std::unique_lock<std::mutex> lock(mu_);
    bool notified = cv_.wait_until(lock, until, [&] { return notifications_ != *seen; });
    *seen = notifications_;
    return notified;
  }
  uint64_t notifications() {
    std::lock_guard<std::mutex> lock(mu_);
    return notifications_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t notifications_ = 0;
  bool ready_ = false;
};

struct RenewRequest {
  std::shared_ptr<LockState> lock;
  uint64_t lease_ms;
  TimePoint sent;
};

class RenewSink {
 public:
  virtual ~RenewSink() = default;
  // Called on the loop thread exactly once per renewal: OK, NotHeld, or a transient error.
  virtual void OnRenewed(const RenewRequest& request, const Status& status) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "redis 127.0.0.1:6379": names the server in error messages.
  virtual std::string Describe() const = 0;
  // Connects (and authenticates) once, so that open fails early on a bad address.
  virtual Status Check() = 0;
  // One acquire attempt. Blocking; any thread.
  virtual Status TryAcquire(const std::string& name, const std::string& owner_value,
                            uint64_t lease_ms, AcquireAttempt* out) = 0;
  // Ok, NotHeld when the owner no longer holds it, or an error. Blocking; any thread.
  virtual Status Release(const LockState& lock) = 0;
  // Releases several, best effort (client close). Blocking; any thread.
  virtual void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) {
    for (const auto& l : locks) (void)Release(*l);
  }
  // Ok, NotHeld, or an error. Blocking; any thread.
  virtual Status Extend(const LockState& lock, uint64_t lease_ms) = 0;
  // Loop thread: sends all renewals in one round trip where the protocol allows; reports each
  // to sink->OnRenewed exactly once.
  virtual void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) = 0;
  // Any thread: subscribe/unsubscribe signal to releases of name.
  virtual void Watch(const std::string& name, WakeSignal* signal) = 0;
  virtual void Unwatch(const std::string& name, WakeSignal* signal) = 0;
  // Loop thread: drop connections and fail what is in flight. Called once, at close.
  virtual void ShutdownOnLoop() = 0;
};

}  // namespace dlock

#endif  // DLOCK_CORE_BACKEND_H_
