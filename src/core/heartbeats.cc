#include "core/heartbeats.h"

#include <algorithm>
#include <functional>
#include <string>
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

Heartbeats::Heartbeats(EventLoop* loop, Backend* backend, CallbackDepth* callbacks, Metrics* metrics)
    : loop_(loop), backend_(backend), callbacks_(callbacks), metrics_(metrics), timer_(loop, [this] { Tick(); }) {}

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
    it = entries_.emplace(lock.get(), Entry{lock, TimePoint(), false, {}, {}}).first;
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
  struct Loss {
    std::shared_ptr<LockState> lock;
    LossCause cause;
    std::string reason;
  };
  std::vector<Loss> lost;
  for (Entry* entry : due) {
    LockState& lock = *entry->lock;
    if (lock.Phase() != LockPhase::kHeld) {  // released (or lost) since: forget it
      entries_.erase(&lock);
      continue;
    }
    // Refused, and the look that says why is out: its answer reports the loss.
    if (lock.refused.load()) continue;
    // Past max_hold_ms: no more renewals; the lock ends with the lease it has.
    const bool past_max_hold = lock.PastMaxHold(now);
    int64_t deadline = lock.deadline_ns.load();
    if (deadline != kNoDeadline && ToNanos(now) >= deadline) {
      if (past_max_hold && entry->last_error.empty()) {  // failing renewals: an expiry all the same
        lost.push_back({entry->lock, LossCause::kMaxHold, lock.MaxHoldReason()});
      } else {
        lost.push_back({entry->lock, LossCause::kExpired,
                        "its lease could not be renewed before the local deadline" +
                            (entry->last_error.empty() ? std::string()
                                                       : " (last error: " + entry->last_error + ")")});
      }
      continue;
    }
    if (!entry->in_flight && lock.heartbeat_ms.load() != 0 && !past_max_hold) {
      entry->in_flight = true;
      batch.push_back(RenewRequest{entry->lock, lock.lease_ms.load(), now});
      metrics_->RenewalSent();
    }
    // Until the renewal answers, the deadline is what to watch for.
    if (deadline != kNoDeadline) {
      entry->due = FromNanos(deadline);
      queue_.emplace(entry->due, &lock);
    }
  }
  for (Loss& loss : lost) ReportLost(loss.lock, loss.cause, loss.reason);
  if (stopped_) return;  // an on_lost callback closed the client
  if (!batch.empty()) {
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
  metrics_->RenewalAnswered(status.ok()                       ? RenewalOutcome::kSucceeded
                            : status.code() == Code::kNotHeld ? RenewalOutcome::kRefused
                                                              : RenewalOutcome::kFailed,
                            now - request.sent);
  if (status.ok()) {
    // One command in flight per lock: this answer is the server's latest word on the lease.
    entry.last_error.clear();
    lock.SetDeadline(request.sent, request.lease_ms);
    uint64_t period = lock.heartbeat_ms.load();
    if (period != 0) Schedule(&entry, request.sent + Millis(period));
    AfterAnswer(&lock);
    return;
  }
  if (status.code() == Code::kNotHeld) {
    if (lock.releasing.load()) {  // the release may have landed first: its answer decides
      Unschedule(&entry);
      entries_.erase(it);
      return;
    }
    // No more renewals, and extends wait (in flight): the look at the name decides what the
    // loss report says, and ReportLost answers the waiting extends with it.
    std::shared_ptr<LockState> lost = entry.lock;
    Unschedule(&entry);
    entry.in_flight = true;
    ExplainRefusal(lost, [this, lost](LossCause cause, std::string reason) {
      if (!stopped_) ReportLost(lost, cause, reason, /*explained=*/true);
    });
    return;
  }
  entry.last_error = status.message();
  metrics_->Emit([&] {
    Event e{Event::Type::kRenewalFailed, lock.name};
    e.elapsed_ms = ElapsedMs(now - request.sent);
    e.fencing_token = lock.fencing_token;
    e.status = static_cast<int>(status.code());
    e.detail = status.message();
    return e;
  });
  int64_t deadline = lock.deadline_ns.load();
  TimePoint retry = now + RetryDelay(lock.heartbeat_ms.load());
  if (deadline != kNoDeadline && retry > FromNanos(deadline)) retry = FromNanos(deadline);
  Schedule(&entry, retry);
  AfterAnswer(&lock);
}

void Heartbeats::Extend(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) {
  if (stopped_) {
    done(Status::Cancelled("the client was closed"));
    return;
  }
  auto it = entries_.find(lock.get());
  if (it == entries_.end()) it = entries_.emplace(lock.get(), Entry{lock, TimePoint(), false, {}, {}}).first;
  if (it->second.in_flight) {
    it->second.extends.push_back({lease_ms, std::move(done)});
    return;
  }
  SendExtend(&it->second, {lease_ms, std::move(done)});
}

void Heartbeats::SendExtend(Entry* entry, PendingExtend extend) {
  std::shared_ptr<LockState> lock = entry->lock;
  if (lock->Phase() != LockPhase::kHeld) {
    metrics_->Extended(CallOutcome::kNotHeld);
    extend.done(Status::NotHeld("lock '" + lock->name + "' is no longer held"));
    AfterAnswer(lock.get());
    return;
  }
  entry->in_flight = true;
  TimePoint sent = Now();
  // A shorter lease takes effect on the server as soon as it arrives: stop trusting the old
  // one now, whatever the answer (or its absence) says later.
  uint64_t old_lease = lock->lease_ms.load();
  if (extend.lease_ms != 0 && (old_lease == 0 || extend.lease_ms < old_lease)) {
    lock->CapDeadline(sent, extend.lease_ms);
  }
  backend_->ExtendAsync(lock, extend.lease_ms,
                        [this, lock, lease_ms = extend.lease_ms, sent,
                         done = std::move(extend.done)](const Status& status) {
                          OnExtended(lock, lease_ms, sent, status, done);
                        });
}

void Heartbeats::OnExtended(const std::shared_ptr<LockState>& lock, uint64_t lease_ms,
                            TimePoint sent, const Status& status, const StatusCallback& done) {
  if (stopped_) {
    done(status.ok() ? Status::Cancelled("the client was closed") : status);
    return;
  }
  auto it = entries_.find(lock.get());
  if (it != entries_.end()) it->second.in_flight = false;
  metrics_->Extended(status.ok() && lock->Phase() == LockPhase::kHeld ? CallOutcome::kOk
                     : status.ok() || status.code() == Code::kNotHeld ? CallOutcome::kNotHeld
                                                                       : CallOutcome::kError);
  if (status.code() == Code::kNotHeld) {
    // Found by the caller's own extend: reported by its NOT_HELD, not by on_lost. The entry
    // stays in flight (queued extends wait) until the look at the name answers.
    if (it != entries_.end()) it->second.in_flight = true;
    ExplainRefusal(lock, [this, lock, done](LossCause cause, std::string reason) {
      lock->Lose(cause, std::move(reason), metrics_, /*explained=*/true);
      auto again = entries_.find(lock.get());
      if (again != entries_.end()) again->second.in_flight = false;
      done(Status::NotHeld("lock '" + lock->name + "' was lost: " + lock->LostCause()));
      if (!stopped_) AfterAnswer(lock.get());
    });
    return;
  }
  if (status.ok() && lock->Phase() != LockPhase::kHeld) {  // lost or released meanwhile
    done(Status::NotHeld("lock '" + lock->name + "' was lost before the extend answered"));
    AfterAnswer(lock.get());
    return;
  }
  if (status.ok()) {
    lock->lease_ms.store(lease_ms);
    if (!lock->heartbeat_explicit) {
      lock->heartbeat_ms.store(DefaultHeartbeatMs(lease_ms));
    }
    lock->SetDeadline(sent, lease_ms);
    if (it != entries_.end()) {
      it->second.last_error.clear();
      uint64_t period = lock->heartbeat_ms.load();
      if (period != 0) {
        Schedule(&it->second, sent + Millis(period));
      } else {
        Unschedule(&it->second);
      }
    }
  }
  done(status);
  AfterAnswer(lock.get());
}

void Heartbeats::AfterAnswer(LockState* lock) {
  auto it = entries_.find(lock);
  if (it == entries_.end() || it->second.in_flight) return;
  Entry& entry = it->second;
  if (!entry.extends.empty()) {
    PendingExtend next = std::move(entry.extends.front());
    entry.extends.erase(entry.extends.begin());
    SendExtend(&entry, std::move(next));
    return;
  }
  bool renewing = lock->Phase() == LockPhase::kHeld && lock->heartbeat_ms.load() != 0;
  if (!renewing) {
    Unschedule(&entry);
    entries_.erase(it);
  }
}

void Heartbeats::ReportLost(std::shared_ptr<LockState> lock, LossCause cause, const std::string& reason,
                            bool explained) {
  std::vector<PendingExtend> extends;  // waiting behind the renewal that found the loss
  auto it = entries_.find(lock.get());
  if (it != entries_.end()) {
    extends = std::move(it->second.extends);
    Unschedule(&it->second);
    entries_.erase(it);
  }
  {
    std::lock_guard<std::recursive_mutex> callback_guard(lock->callback_mu);
    if (lock->Lose(cause, reason, metrics_, explained) && lock->on_lost) {
      CallbackScope scope(callbacks_);
      lock->on_lost(lock->name, lock->fencing_token, lock->LostCause());  // "CAUSE: reason"
    }
  }
  for (PendingExtend& extend : extends) {
    metrics_->Extended(CallOutcome::kNotHeld);
    extend.done(Status::NotHeld("lock '" + lock->name + "' was lost: " + lock->LostCause()));
  }
}

LossCause ClassifyRefusal(const LockState& lock, const Status& looked, LockInfo info,
                          std::string* reason) {
  const std::string refused = "the server no longer had this owner's lock";
  if (!looked.ok()) {
    *reason = refused + " (looking again failed: " + looked.message() + ")";
    return LossCause::kRefused;
  }
  for (const BrokenRecord& b : info.broken) {
    if (b.fencing_token == lock.fencing_token) {
      *reason = b.reason.empty() ? std::string("an operator broke the lock (no reason given)")
                                 : "an operator broke the lock: " + b.reason;
      return LossCause::kBroken;
    }
  }
  // A hold whose lease ran out is nobody's (DynamoDB lists it until it is overwritten).
  std::erase_if(info.holders, [](const HolderInfo& h) { return h.remaining_ms == 0; });
  if (info.holders.empty()) {
    *reason = refused + ", and nobody held it (deleted, or its lease ran out on the server)";
    return LossCause::kDeleted;
  }
  for (const HolderInfo& h : info.holders) {
    if (h.fencing_token != 0 && h.fencing_token == lock.fencing_token) {
      *reason = refused + ", though it still lists this hold";  // a split view (Redlock)
      return LossCause::kRefused;
    }
  }
  // Shared and semaphore holds stand beside others: only an exclusive one is taken over.
  const bool beside_others = lock.kind == LockKind::kShared || lock.permits != 0;
  if (beside_others && info.permits == lock.permits && info.kind == lock.kind) {
    *reason = refused + ", while " + std::to_string(info.holders.size()) + " other hold(s) stand";
    return LossCause::kDeleted;
  }
  const HolderInfo& first = info.holders.front();
  // 0: the backend cannot show it (etcd's layout=mutex keeps a holder's token with the holder).
  std::string who = "fencing token " + (first.fencing_token != 0 ? std::to_string(first.fencing_token) : "unknown");
  if (!first.owner.empty()) who += ", label '" + first.owner + "'";
  *reason = "another owner holds it now (" + who + ")";
  return LossCause::kTakenOver;
}

void Heartbeats::ExplainRefusal(std::shared_ptr<LockState> lock,
                                std::function<void(LossCause, std::string)> then) {
  if (!lock->MarkRefused()) {  // past its local deadline already: an expiry, no look needed
    const bool max_hold = lock->PastMaxHold(Now());
    then(max_hold ? LossCause::kMaxHold : LossCause::kExpired,
         max_hold ? lock->MaxHoldReason()
                  : "its lease ran out before it was renewed (the server no longer had this owner's lock)");
    return;
  }
  const std::string name = lock->name;
  backend_->InspectAsync(name, [lock = std::move(lock), then = std::move(then)](const Status& s,
                                                                                LockInfo info) {
    std::string reason;
    const LossCause cause = ClassifyRefusal(*lock, s, std::move(info), &reason);
    then(cause, std::move(reason));
  });
}

void Heartbeats::StopOnLoop() {
  stopped_ = true;
  for (auto& [ptr, entry] : entries_) {
    for (auto& extend : entry.extends) extend.done(Status::Cancelled("the client was closed"));
    entry.extends.clear();
  }
  {
    std::lock_guard<std::mutex> guard(intake_mu_);
    intake_.clear();
    timer_.Free();
    timer_at_ = TimePoint::min();  // never arm again
  }
  queue_.clear();
  entries_.clear();
}

}  // namespace dlock
