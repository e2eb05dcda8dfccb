// The state of one acquisition, shared by the caller's handle, the client's registry and the
// heartbeat scheduler. Fields that change after acquisition are atomics: the caller's thread
// reads validity while the loop thread renews it.
#ifndef DLOCK_CORE_LOCK_STATE_H_
#define DLOCK_CORE_LOCK_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "core/metrics.h"
#include "core/options.h"

namespace dlock {

class ReleaseWatcher;

// Base of backend-specific per-lock state (see AcquireAttempt::backend_data).
struct BackendLockData {
  virtual ~BackendLockData() = default;
};

enum class LockPhase : int {
  kHeld = 0,
  kLost = 1,      // expired, taken over, or not renewed in time; reported once
  kReleased = 2,  // released by its owner
  kClosed = 3,    // released because its client was closed
};

struct LockState {
  LockState(std::string name_in, std::string owner_value_in, uint64_t token, uint32_t tries,
            const AcquireOptions& options, TimePoint sent,
            std::shared_ptr<BackendLockData> data = nullptr)
      : name(std::move(name_in)),
        owner_value(std::move(owner_value_in)),
        fencing_token(token),
        attempts(tries),
        kind(options.kind),
        permits(options.permits),
        take(options.take),
        heartbeat_explicit(options.heartbeat_ms.has_value()),
        max_hold_ms(options.max_hold_ms),
        min_hold_ms(options.min_hold_ms),
        lock_delay_ms(options.lock_delay_ms),
        on_lost(options.on_lost),
        on_release_requested(options.on_release_requested),
        reentrant_context(options.reentrant_context),
        has_value(!options.value.empty()),
        lease_ms(options.lease_ms),
        backend_data(std::move(data)),
        heartbeat_ms(options.HeartbeatFor(options.lease_ms)) {
    SetDeadline(sent, options.lease_ms);
  }

  const std::string name;
  const std::string owner_value;  // what the server stores: secret token [+ "|" + label]
  const uint64_t fencing_token;
  const uint32_t attempts;
  const LockKind kind;
  const uint32_t permits;  // semaphore size; 0 = not a semaphore
  const uint32_t take;     // permits this hold counts for (1 but for a semaphore's take)
  const bool heartbeat_explicit;
  const uint64_t max_hold_ms;  // 0 = none
  const uint64_t min_hold_ms;  // 0 = none (LockRequest::min_hold_ms)
  const uint64_t lock_delay_ms;  // 0 = none (LockRequest::lock_delay_ms)
  const LostHandler on_lost;
  const ReleaseRequestHandler on_release_requested;
  // Reentrancy (dlock_options_set_reentrant): the context whose acquires of this name re-enter
  // this hold ("" = none), and the handles on it not yet released; 0 once its last release has
  // begun (no re-entry then). Under the client's mutex.
  const std::string reentrant_context;
  uint32_t entries = 1;
  // Hears release requests for this hold (core/release_requests.h) when on_release_requested is
  // set: watched through the backend from the acquire until the client forgets the lock. Set
  // before the heartbeats track the lock, then read only; a backend that hears of requests
  // with a renewal's answer tells it (DynamoDB).
  std::shared_ptr<ReleaseWatcher> request_listener;

  // Whether the server may keep a value with this hold (set at acquire or since): its
  // release, renewals and extends then look after the value too.
  std::atomic<bool> has_value;
  std::atomic<uint64_t> lease_ms;
  const std::shared_ptr<BackendLockData> backend_data;  // owned and locked by the backend
  std::atomic<uint64_t> heartbeat_ms;
  std::atomic<int64_t> deadline_ns{kNoDeadline};
  std::atomic<int> phase{static_cast<int>(LockPhase::kHeld)};
  // Set when its owner's release is sent: a renewal in flight that the server refuses after the
  // release deleted the lock is the release's doing, not a loss (the release's answer settles).
  std::atomic<bool> releasing{false};
  // Set when the server refused this owner, before the look that says why (ClassifyRefusal)
  // answers: the lock is no longer valid from that moment.
  std::atomic<bool> refused{false};
  // An acquire nobody took (cancelled after it won, or left in a freed queue): its release gives
  // it back, as if it had not happened, leaving none of its job rules behind.
  std::atomic<bool> given_back{false};

  LockPhase Phase() const { return static_cast<LockPhase>(phase.load()); }

  // Local validity (docs/guarantees.md, 3): sent + lease - drift on the monotonic clock.
  void SetDeadline(TimePoint sent, uint64_t lease) {
    deadline_ns.store(lease == 0 ? kNoDeadline : ToNanos(sent + Millis(lease) - LeaseDrift(lease)));
  }
  // Moves the deadline earlier only: for a lease being shortened.
  void CapDeadline(TimePoint sent, uint64_t lease) {
    int64_t want = ToNanos(sent + Millis(lease) - LeaseDrift(lease));
    int64_t cur = deadline_ns.load();
    while (want < cur && !deadline_ns.compare_exchange_weak(cur, want)) {
    }
  }
  // The local deadline as a time point; TimePoint::max() for a lock without expiry.
  TimePoint LocalDeadline() const {
    int64_t d = deadline_ns.load();
    return d == kNoDeadline ? TimePoint::max() : FromNanos(d);
  }
  bool IsValid() const {
    return Phase() == LockPhase::kHeld && !refused.load() && ToNanos(Now()) < deadline_ns.load();
  }
  // The server refused this owner: no longer valid, from now. Returns whether it was held and
  // within its local deadline until then (a refusal after the deadline is an expiry, and needs
  // no look; one refused already, with its look still out, was).
  bool MarkRefused() {
    const bool in_time = Phase() == LockPhase::kHeld && ToNanos(Now()) < deadline_ns.load();
    refused.store(true);
    return in_time;
  }
  int64_t RemainingMs() const {
    if (Phase() != LockPhase::kHeld || refused.load()) return 0;
    int64_t d = deadline_ns.load();
    if (d == kNoDeadline) return INT64_MAX;
    int64_t left = (d - ToNanos(Now())) / 1000000;
    return left > 0 ? left : 0;
  }
  // Moves kHeld to `to`; true for the one caller that made the move.
  bool Transition(LockPhase to) {
    int expected = static_cast<int>(LockPhase::kHeld);
    return phase.compare_exchange_strong(expected, static_cast<int>(to));
  }

  // Held while on_lost runs; release takes it so that, once release returns, the callback is
  // neither running nor going to run (recursive: the callback may release its own lock).
  std::recursive_mutex callback_mu;

  // Why the lock was lost, for the caller's next release/extend error.
  void SetLostReason(std::string reason) {
    std::lock_guard<std::mutex> lock(reason_mu_);
    lost_reason_ = std::move(reason);
  }
  std::string LostReason() const {
    std::lock_guard<std::mutex> lock(reason_mu_);
    return lost_reason_;
  }
  // Moves kHeld to kLost for `cause`, and counts it (metrics may be null); true for the one
  // caller that made the move. The cause and reason are the first loss's: a later one changes
  // neither. explained: the cause comes from a look made while the lock was still valid
  // (ClassifyRefusal), and stands; otherwise a refusal after the local deadline is an expiry.
  bool Lose(LossCause cause, std::string reason, Metrics* metrics, bool explained = false) {
    // Refused after the local deadline had passed: the lease ran out first (no heartbeats, or
    // none got through), which is what the caller should hear, whoever holds the name since.
    if (!explained && cause != LossCause::kExpired && cause != LossCause::kMaxHold &&
        Phase() == LockPhase::kHeld && deadline_ns.load() != kNoDeadline &&
        ToNanos(Now()) >= deadline_ns.load()) {
      cause = PastMaxHold(Now()) ? LossCause::kMaxHold : LossCause::kExpired;
      reason = cause == LossCause::kMaxHold ? MaxHoldReason()
                                            : "its lease ran out before it was renewed (" + reason + ")";
    }
    {
      std::lock_guard<std::mutex> lock(reason_mu_);
      if (Phase() == LockPhase::kHeld) {
        lost_reason_ = std::move(reason);
        lost_cause_ = cause;
      }
    }
    if (!Transition(LockPhase::kLost)) return false;
    if (metrics != nullptr) {
      const Clock::duration held = Now() - acquired_at;
      metrics->Lost(cause, held, name);
      metrics->Emit([&] {
        Event e{Event::Type::kLost, name};
        e.elapsed_ms = ElapsedMs(held);
        e.fencing_token = fencing_token;
        e.status = 2;  // DLOCK_NOT_HELD: what its next release or extend says
        e.detail = LostCause();
        return e;
      });
    }
    return true;
  }
  // "CAUSE: reason" once lost (dlock_lock_lost_cause), "" while held and valid, and "expired:
  // ..." once the local deadline passed before the heartbeats found out.
  std::string LostCause() const {
    if (Phase() == LockPhase::kHeld) {
      if (IsValid()) return std::string();
      if (refused.load()) {
        return std::string(LossCauseCode(LossCause::kRefused)) +
               ": the server no longer had this owner's lock (looking at the name to say why)";
      }
      if (PastMaxHold(Now())) return std::string(LossCauseCode(LossCause::kMaxHold)) + ": " + MaxHoldReason();
      return std::string(LossCauseCode(LossCause::kExpired)) +
             ": the local deadline passed before a renewal answered";
    }
    if (Phase() != LockPhase::kLost) return std::string();
    std::lock_guard<std::mutex> lock(reason_mu_);
    return std::string(LossCauseCode(lost_cause_)) + ": " + lost_reason_;
  }

  const TimePoint acquired_at = Now();  // for the hold-time histogram, and max_hold_ms

  // Whether max_hold_ms has passed since the acquire: the heartbeats renew it no more.
  bool PastMaxHold(TimePoint now) const {
    return max_hold_ms != 0 && now - acquired_at >= Millis(max_hold_ms);
  }
  std::string MaxHoldReason() const {
    return "maximum hold reached (max_hold_ms " + std::to_string(max_hold_ms) +
           "): renewals stopped, and the lease ran out";
  }

 private:
  mutable std::mutex reason_mu_;
  std::string lost_reason_;
  LossCause lost_cause_ = LossCause::kRefused;  // under reason_mu_
};

}  // namespace dlock

#endif  // DLOCK_CORE_LOCK_STATE_H_
