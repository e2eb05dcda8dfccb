// One dlock_acquire_async in progress, on the loop thread: the same waiting policy as the
// blocking Client::Acquire (docs/guarantees.md, 5), as a state machine driven by backend replies,
// release notifications and a timer, so that a thousand waiters cost no thread each.
#ifndef DLOCK_CORE_ASYNC_ACQUIRE_H_
#define DLOCK_CORE_ASYNC_ACQUIRE_H_

#include <functional>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/options.h"
#include "core/waiting.h"
#include "loop/event_loop.h"

namespace dlock {

class Client;

// What dlock_acquire_cancel matches: a callback's arg (scope null), or a queue and a tag.
struct CancelKey {
  const void* scope = nullptr;
  uint64_t id = 0;
  bool operator==(const CancelKey&) const = default;
};

using AcquireDone = std::function<void(const Status&, std::shared_ptr<LockState>)>;

class AsyncAcquire : public ReleaseWatcher, public std::enable_shared_from_this<AsyncAcquire> {
 public:
  AsyncAcquire(Client* client, LockRequest request, AcquireOptions options, CancelKey key,
               AcquireDone done);
  ~AsyncAcquire() override;

  void Start();                    // loop thread
  void Cancel(const Status& why);  // loop thread; done runs now unless already finished
  const CancelKey& key() const { return key_; }
  bool attempt_in_flight() const { return in_flight_; }  // loop thread

  // ReleaseWatcher: called under the backend's locks, so they only schedule work.
  void OnWatchReady(bool live) override;
  void OnReleased() override;
  const std::string& waiter_id() const override { return request_.waiter_id; }
  void OnHandedOver(uint64_t fencing_token) override;

 private:
  void HandedOver();
  void Adopt(const AcquireAttempt& attempt, TimePoint sent);
  void Attempt();
  void OnAttempt(const Status& s, const AcquireAttempt& attempt, TimePoint sent);
  void Finish(const Status& s, std::shared_ptr<LockState> lock);

  Client* client_;
  LockRequest request_;  // queue_ms set per attempt
  const AcquireOptions options_;
  const CancelKey key_;
  AcquireDone done_;
  const TimePoint start_;
  WaitPolicy policy_;
  Timer timer_;
  uint32_t attempts_ = 0;
  bool watching_ = false;
  bool live_ = false;
  bool in_flight_ = false;
  bool released_meanwhile_ = false;  // a release was announced while an attempt was out
  bool grant_heard_ = false;         // a hand-over heard: the next attempt confirms it
  bool finished_ = false;
};

}  // namespace dlock

#endif  // DLOCK_CORE_ASYNC_ACQUIRE_H_
