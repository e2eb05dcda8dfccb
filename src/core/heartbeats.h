// Heartbeats (docs/guarantees.md, 4): renews held leases in the background, on the loop thread,
// and carries the caller's extends: every lease-changing command of a lock goes through here,
// one at a time, so that the answers arrive in the order the server applied them and the
// local deadline always follows the lease the server really has.
// All renewals due in one tick go to the backend as one batch (one round trip for Redis).
// A renewal refused because the owner no longer matches marks the lock lost at once; transient
// errors are retried until the lock's local deadline passes, then the lock is lost. Losses
// are reported through the lock's on_lost callback, once.
#ifndef DLOCK_CORE_HEARTBEATS_H_
#define DLOCK_CORE_HEARTBEATS_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/callback_scope.h"
#include "loop/event_loop.h"

namespace dlock {

// Why the server refused this owner's lock: `looked` and `info` are a look at the name just
// after the refusal. Nobody holds it: deleted; another owner holds it (an exclusive lock):
// taken_over; the look failed: refused. Sets *reason to the details.
LossCause ClassifyRefusal(const LockState& lock, const Status& looked, LockInfo info,
                          std::string* reason);

class Heartbeats : public RenewSink {
 public:
  // metrics: the client's, counted into (outlives this).
  Heartbeats(EventLoop* loop, Backend* backend, CallbackDepth* callbacks, Metrics* metrics);
  ~Heartbeats() override;

  // Any thread. Starts (or, after an extend, restarts) renewing lock. Does not wake the loop
  // unless the lock is due before the timer already set: acquire/release cycles shorter than
  // a heartbeat cost the loop thread nothing. Released locks are simply skipped later.
  void Track(std::shared_ptr<LockState> lock, bool fresh);
  // Loop thread. Sets the lock's lease to lease_ms from now, after any renewal or extend of it
  // still in flight; done gets Ok, NotHeld (the lock is then lost), or an error.
  void Extend(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done);
  // Loop thread. Forgets everything; renewals still in flight are ignored when they answer.
  void StopOnLoop();

  void OnRenewed(const RenewRequest& request, const Status& status) override;

  // Loop thread. A refusal says only that the server no longer has this owner's hold; one look
  // at the name says which loss it was (ClassifyRefusal). Calls `then` on the loop, after one Inspect round
  // trip (bounded by the backend's timeout).
  void ExplainRefusal(std::shared_ptr<LockState> lock,
                      std::function<void(LossCause, std::string)> then);

 private:
  struct PendingExtend {
    uint64_t lease_ms;
    StatusCallback done;
  };
  struct Entry {
    std::shared_ptr<LockState> lock;
    TimePoint due;             // when the next renewal (or the loss check) is due
    bool in_flight = false;    // a renewal or an extend is out: at most one per lock
    std::string last_error;
    // Waiting for the one in flight; rare, so a vector (a deque allocates even when empty,
    // which doubled the memory of every held lock).
    std::vector<PendingExtend> extends;
  };
  void SendExtend(Entry* entry, PendingExtend extend);
  void OnExtended(const std::shared_ptr<LockState>& lock, uint64_t lease_ms, TimePoint sent,
                  const Status& status, const StatusCallback& done);
  // After an answer: the next queued extend, or drop an entry that has nothing left to do.
  void AfterAnswer(LockState* lock);
  void TrackOnLoop(std::shared_ptr<LockState> lock, TimePoint due);
  void Schedule(Entry* entry, TimePoint due);
  void Unschedule(Entry* entry);
  void Tick();
  void ArmTimer();
  void ArmTimerLocked(TimePoint at);
  // explained: the cause comes from a look made while the lock was valid (LockState::Lose).
  void ReportLost(std::shared_ptr<LockState> lock, LossCause cause, const std::string& reason,
                  bool explained = false);

  EventLoop* loop_;
  Backend* backend_;
  CallbackDepth* callbacks_;
  Metrics* metrics_;
  Timer timer_;
  bool stopped_ = false;
  std::unordered_map<LockState*, Entry> entries_;
  std::set<std::pair<TimePoint, LockState*>> queue_;  // by due time
  // Locks handed over by callers' threads, taken in by the next Tick.
  std::mutex intake_mu_;
  // (lock, when its next renewal is due), guarded by intake_mu_
  std::vector<std::pair<std::shared_ptr<LockState>, TimePoint>> intake_;
  TimePoint timer_at_ = TimePoint::max();           // guarded: when timer_ fires; max = unset
};

}  // namespace dlock

#endif  // DLOCK_CORE_HEARTBEATS_H_
