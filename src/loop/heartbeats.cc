#include "loop/heartbeats.h"

#include <algorithm>
#include <vector>

#include "core/token.h"

namespace dlock {
namespace {

// Renewals due within this share of their period are sent together with the one that fired:
// renewing a little early is harmless and turns many timers into one batch.
Millis CoalesceWindow(uint64_t heartbeat_ms) {
  return Millis(std::min<uint64_t>(heartbeat_ms / 8, 1000));
}
constexpr Millis kMaxCoalesceWindow(1000);

// Pause before retrying a renewal that failed for a transient reason.
Millis RetryDelay(uint64_t heartbeat_ms) {
  uint64_t base = std::clamp<uint64_t>(heartbeat_ms / 4, 10, 1000);
  return Millis(RandomBetween(base / 2, base));
}

}  // namespace

Heartbeats::Heartbeats(EventLoop* loop, Backend* backend, CallbackDepth* callbacks)
    : loop_(loop), backend_(backend), callbacks_(callbacks), timer_(loop, [this] { Tick(); }) {}

Heartbeats::~Heartbeats() = default;

// Beyond this many locks waiting in the intake, the loop is woken to take them in, so that a
// fast acquire/release loop does not keep thousands of released locks alive until the tick.
constexpr size_t kMaxIntake = 1024;

void Heartbeats::Track(std::shared_ptr<LockState> lock, bool fresh) {
  uint64_t period = lock->heartbeat_ms.load();
  if (fresh && period == 0) return;  // nothing to renew, nothing to forget
  TimePoint now = Now();
  TimePoint due = now + Millis(period);
  TimePoint needed_by = due - CoalesceWindow(period);
  std::lock_guard<std::mutex> guard(intake_mu_);
  intake_.emplace_back(std::move(lock), due);
  if (intake_.size() >= kMaxIntake) needed_by = now;
  ArmTimerLocked(needed_by);
}

void Heartbeats::ArmTimerLocked(TimePoint at) {
  // evtimer_add is thread-safe (evthread) and only wakes the loop when `at` becomes its
  // earliest timeout.
  if (at >= timer_at_) return;
  timer_at_ = at;
  timer_.StartAt(at);
}

void Heartbeats::TrackOnLoop(std::shared_ptr<LockState> lock, TimePoint due) {
  if (stopped_ || lock->Phase() != LockPhase::kHeld) return;
  uint64_t period = lock->heartbeat_ms.load();
  auto it = entries_.find(lock.get());
  if (period == 0) {  // no heartbeats (any more)
    if (it != entries_.end() && !it->second.in_flight) {
      Unschedule(&it->second);
      entries_.erase(it);
    }
    return;
  }
  if (it == entries_.end()) {
    it = entries_.emplace(lock.get(), Entry{lock, TimePoint(), false, {}}).first;
  }
  if (!it->second.in_flight) Schedule(&it->second, due);
}

void Heartbeats::Schedule(Entry* entry, TimePoint due) {
  Unschedule(entry);
  entry->due = due;
  queue_.emplace(due, entry->lock.get());
  if (queue_.begin()->second == entry->lock.get()) ArmTimer();
}

void Heartbeats::Unschedule(Entry* entry) {
  if (entry->due != TimePoint()) queue_.erase({entry->due, entry->lock.get()});
  entry->due = TimePoint();
}

void Heartbeats::ArmTimer() {
  if (queue_.empty()) return;
  std::lock_guard<std::mutex> guard(intake_mu_);
  ArmTimerLocked(queue_.begin()->first);
}

void Heartbeats::Tick() {
  std::vector<std::pair<std::shared_ptr<LockState>, TimePoint>> intake;
  {
    std::lock_guard<std::mutex> guard(intake_mu_);
    intake.swap(intake_);
    timer_at_ = TimePoint::max();  // it just fired
  }
  if (stopped_) return;
  for (auto& [lock, due] : intake) TrackOnLoop(std::move(lock), due);
  TimePoint now = Now();
  // First take every entry due now (or within its coalescing window) off the queue, then act
  // on them; acting may put entries back, so the two steps stay apart.
  std::vector<Entry*> due;
  for (auto it = queue_.begin(); it != queue_.end() && it->first <= now + kMaxCoalesceWindow;) {
    Entry& entry = entries_.at(it->second);
    // An entry whose renewal is out is only waiting for its deadline: no early window.
    Millis window = entry.in_flight ? Millis(0) : CoalesceWindow(entry.lock->heartbeat_ms.load());
    if (it->first > now + window) {
      ++it;
      continue;
    }
    it = queue_.erase(it);
    entry.due = TimePoint();
    due.push_back(&entry);
  }
  std::vector<RenewRequest> batch;
  std::vector<std::pair<std::shared_ptr<LockState>, std::string>> lost;
  for (Entry* entry : due) {
    LockState& lock = *entry->lock;
    if (lock.Phase() != LockPhase::kHeld) {  // released (or lost) since: forget it
      entries_.erase(&lock);
      continue;
    }
    int64_t deadline = lock.deadline_ns.load();
    if (deadline != kNoDeadline && ToNanos(now) >= deadline) {
      lost.emplace_back(entry->lock,
                        "its lease could not be renewed before the local deadline" +
                            (entry->last_error.empty() ? std::string()
                                                       : " (last error: " + entry->last_error + ")"));
      continue;
    }
    if (!entry->in_flight) {
      entry->in_flight = true;
      batch.push_back(RenewRequest{entry->lock, lock.lease_ms.load(), now});
    }
    // Until the renewal answers, the deadline is what to watch for.
    if (deadline != kNoDeadline) {
      entry->due = FromNanos(deadline);
      queue_.emplace(entry->due, &lock);
    }
  }
  for (auto& [lock, reason] : lost) ReportLost(lock, reason);
  if (stopped_) return;  // an on_lost callback closed the client
  if (!batch.empty()) {
    batches_sent_.fetch_add(1);
    backend_->RenewBatch(std::move(batch), this);
  }
  ArmTimer();
}

void Heartbeats::OnRenewed(const RenewRequest& request, const Status& status) {
  if (stopped_) return;
  auto it = entries_.find(request.lock.get());
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  entry.in_flight = false;
  LockState& lock = *entry.lock;
  if (lock.Phase() != LockPhase::kHeld) {
    Unschedule(&entry);
    entries_.erase(it);
    return;
  }
  TimePoint now = Now();
  if (status.ok()) {
    entry.last_error.clear();
    if (request.lease_ms == lock.lease_ms.load()) lock.ExtendDeadline(request.sent, request.lease_ms);
    uint64_t period = lock.heartbeat_ms.load();
    if (period == 0) {
      Unschedule(&entry);
      entries_.erase(it);
      return;
    }
    Schedule(&entry, request.sent + Millis(period));
    return;
  }
  if (status.code() == Code::kNotHeld) {
    ReportLost(entry.lock, "the server no longer has this owner's lock (expired, deleted or taken over)");
    return;
  }
  entry.last_error = status.message();
  int64_t deadline = lock.deadline_ns.load();
  TimePoint retry = now + RetryDelay(lock.heartbeat_ms.load());
  if (deadline != kNoDeadline && retry > FromNanos(deadline)) retry = FromNanos(deadline);
  Schedule(&entry, retry);
}

void Heartbeats::ReportLost(std::shared_ptr<LockState> lock, const std::string& reason) {
  auto it = entries_.find(lock.get());
  if (it != entries_.end()) {
    Unschedule(&it->second);
    entries_.erase(it);
  }
  std::lock_guard<std::recursive_mutex> callback_guard(lock->callback_mu);
  lock->SetLostReason(reason);
  if (!lock->Transition(LockPhase::kLost)) return;  // released meanwhile: nothing to report
  if (lock->on_lost == nullptr) return;
  CallbackScope scope(callbacks_);
  lock->on_lost(lock->name.c_str(), lock->fencing_token, lock->on_lost_arg);
}

void Heartbeats::StopOnLoop() {
  stopped_ = true;
  {
    std::lock_guard<std::mutex> guard(intake_mu_);
    intake_.clear();
    timer_.Cancel();
    timer_at_ = TimePoint::min();  // never arm again
  }
  queue_.clear();
  entries_.clear();
}

}  // namespace dlock
