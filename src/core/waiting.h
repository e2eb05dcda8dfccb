// The waiting policy (docs/guarantees.md, 5), written once for the blocking and the async acquire:
// after a refused attempt, give up, subscribe to the lock's releases (once, before the next
// attempt, so that a release in between cannot be missed), or sleep until the jittered,
// exponentially growing fallback retry or just after the holder's lease may run out, whichever
// comes first. A release notification cuts any sleep short.
#ifndef DLOCK_CORE_WAITING_H_
#define DLOCK_CORE_WAITING_H_

#include <algorithm>
#include <cstdint>

#include "core/clock.h"
#include "core/options.h"
#include "core/token.h"

namespace dlock {

// The holder's remaining lease as a backend reported it, clamped before any arithmetic: the
// server supplies it, and a value such as INT64_MAX must not overflow into a wake-up in the
// past (a busy loop). -1 (no expiry) and -2 (unknown) pass through; other negatives are unknown.
inline int64_t ClampHolderTtl(int64_t holder_ttl_ms) {
  if (holder_ttl_ms < -2) return -2;
  return std::min<int64_t>(holder_ttl_ms, static_cast<int64_t>(kMaxLeaseMs));
}

// When a waiter that just failed an attempt at `now` should try again, at the latest.
// *backoff_ms is the current upper bound of the jittered retry; it doubles up to retry_max_ms.
inline TimePoint NextWake(TimePoint now, int64_t holder_ttl_ms, const AcquireOptions& options,
                          uint64_t* backoff_ms) {
  TimePoint wake = now + Millis(RandomBetween(options.retry_min_ms, *backoff_ms));
  *backoff_ms = std::min(options.retry_max_ms, *backoff_ms * 2);
  int64_t ttl = ClampHolderTtl(holder_ttl_ms);
  if (ttl >= 0) wake = std::min(wake, now + Millis(ttl + 1));
  return wake;
}

// How long a refused exclusive acquire at `now` announces itself (LockRequest::queue_ms): its
// lease, between 1 s and 10 s (10 s without one), and never past the end of its wait, so that a
// writer that gave up or crashed keeps readers out briefly. 0 for shared holds, semaphores and
// single tries.
inline uint64_t WriterQueueMs(const AcquireOptions& options, TimePoint now, TimePoint wait_until) {
  if (options.kind != LockKind::kExclusive || options.permits != 0 || options.wait_ms == 0 ||
      now >= wait_until) {
    return 0;
  }
  uint64_t span = options.lease_ms == 0 ? 10000 : std::clamp<uint64_t>(options.lease_ms, 1000, 10000);
  if (wait_until != TimePoint::max()) {
    auto left = std::chrono::duration_cast<Millis>(wait_until - now).count() + 1;
    span = std::min<uint64_t>(span, static_cast<uint64_t>(left));
  }
  return span;
}

// What a waiter does next after a refused attempt.
struct WaitStep {
  enum class Kind { kGiveUp, kSubscribe, kSleep };
  Kind kind;
  // kSubscribe: how long to wait for the subscription to go live before the next attempt
  // anyway; kSleep: when to try again at the latest.
  TimePoint until;
};

class WaitPolicy {
 public:
  // Waits for a subscription go live at most this long before trying again without it.
  static constexpr Millis kSubscribeWait{1000};

  WaitPolicy(const AcquireOptions& options, bool backend_notifies, TimePoint start)
      : options_(options),
        notifies_(backend_notifies),
        wait_until_(WaitUntil(start, options.wait_ms)),
        backoff_ms_(options.retry_min_ms) {}

  // queue_ms: the refused attempt's writer announcement; the next attempt comes within half
  // of it, to renew it.
  WaitStep AfterRefusal(TimePoint now, int64_t holder_ttl_ms, uint64_t queue_ms = 0) {
    if (options_.wait_ms == 0 || now >= wait_until_) return {WaitStep::Kind::kGiveUp, now};
    TimePoint until = wait_until_;
    if (queue_ms > 0) until = std::min(until, now + Millis(std::max<uint64_t>(queue_ms / 2, 1)));
    // A fair waiter's place in line says how long its lease may be counted from its last
    // attempt (a release hands the lock over with what is left of it): it renews its place
    // within a third of the lease, so that a hand-over finds at least two thirds left.
    if (queue_ms > 0 && options_.fair && options_.lease_ms > 0) {
      until = std::min(until, now + Millis(std::max<uint64_t>(options_.lease_ms / 3, 1)));
    }
    if (notifies_ && !subscribed_) {
      subscribed_ = true;
      return {WaitStep::Kind::kSubscribe, std::min(until, now + kSubscribeWait)};
    }
    return {WaitStep::Kind::kSleep,
            std::min(NextWake(now, holder_ttl_ms, options_, &backoff_ms_), until)};
  }
  bool subscribed() const { return subscribed_; }
  // Subscribed before the first attempt (a fair waiter): no kSubscribe step.
  void MarkSubscribed() { subscribed_ = true; }
  TimePoint wait_until() const { return wait_until_; }

 private:
  const AcquireOptions& options_;
  const bool notifies_;
  const TimePoint wait_until_;
  uint64_t backoff_ms_;
  bool subscribed_ = false;
};

}  // namespace dlock

#endif  // DLOCK_CORE_WAITING_H_
