// One dlock_acquire_async (or _queued) in progress: the loop thread's driver of an Acquisition
// (the waiting written once, acquisition.h), fed by backend replies, release notifications and
// a timer, so that a thousand waiters cost no thread each.
#ifndef DLOCK_CORE_ASYNC_ACQUIRE_H_
#define DLOCK_CORE_ASYNC_ACQUIRE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "core/acquisition.h"
#include "core/backend.h"
#include "core/options.h"
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
  bool attempt_in_flight() const { return acquisition_.in_flight(); }  // loop thread

  // ReleaseWatcher: called under the backend's locks, so they only schedule work.
  void OnWatchReady(bool live) override;
  void OnReleased() override;
  const std::string& waiter_id() const override { return acquisition_.request().waiter_id; }
  void OnHandedOver(uint64_t fencing_token) override;

 private:
  // Does what a step of the acquisition asks; answer and sent: the attempt just answered.
  void Execute(const Acquisition::Step& step, const AcquireAttempt* answer = nullptr,
               TimePoint sent = {});
  void Send();
  void OnAttempt(const Status& s, const AcquireAttempt& attempt, TimePoint sent);
  void Finish(const Status& s, std::shared_ptr<LockState> lock);
  // Posts an event to the loop thread, where the acquisition lives.
  template <typename Event>
  void Post(Event event);

  Client* client_;
  const AcquireOptions options_;  // before acquisition_, which refers to it
  const CancelKey key_;
  AcquireDone done_;
  Acquisition acquisition_;
  Timer timer_;
  std::atomic<bool> heard_live_{false};  // the last OnWatchReady, before its event is run
};

}  // namespace dlock

#endif  // DLOCK_CORE_ASYNC_ACQUIRE_H_
