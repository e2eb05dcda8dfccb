// The arithmetic of waiting (docs/guarantees.md, 5): when a refused waiter tries again, and how
// long a waiting writer announces itself. Acquisition (acquisition.h) decides with it.
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
// writer that gave up or crashed keeps readers out briefly. A waiter in line, of any kind, uses
// the span for its place there (fair waiting). 0 for shared holds and semaphores not in line,
// and for single tries.
inline uint64_t WriterQueueMs(const AcquireOptions& options, bool in_line, TimePoint now, TimePoint wait_until) {
  const bool writer = options.kind == LockKind::kExclusive && options.permits == 0;
  if ((!writer && !in_line) || options.wait_ms == 0 || now >= wait_until) {
    return 0;
  }
  uint64_t span = options.lease_ms == 0 ? 10000 : std::clamp<uint64_t>(options.lease_ms, 1000, 10000);
  if (wait_until != TimePoint::max()) {
    auto left = std::chrono::duration_cast<Millis>(wait_until - now).count() + 1;
    span = std::min<uint64_t>(span, static_cast<uint64_t>(left));
  }
  return span;
}

}  // namespace dlock

#endif  // DLOCK_CORE_WAITING_H_
