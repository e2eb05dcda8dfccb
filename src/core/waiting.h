// The waiting policy's next wake-up (README guarantee 5), shared by the blocking and the async
// acquire: the jittered, exponentially growing fallback retry, or just after the holder's lease
// may run out, whichever comes first.
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

}  // namespace dlock

#endif  // DLOCK_CORE_WAITING_H_
