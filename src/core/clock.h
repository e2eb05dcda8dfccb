// The monotonic clock: the only clock that decides lock validity (docs/guarantees.md, 3).
#ifndef DLOCK_CORE_CLOCK_H_
#define DLOCK_CORE_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <limits>

namespace dlock {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Millis = std::chrono::milliseconds;

inline TimePoint Now() { return Clock::now(); }

// Nanoseconds on the monotonic clock, for deadlines kept in atomics.
inline int64_t ToNanos(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline TimePoint FromNanos(int64_t ns) { return TimePoint(std::chrono::nanoseconds(ns)); }
constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();

// Safety margin subtracted from a lease before trusting it locally: clocks drift and requests
// take time, so a lease of L ms sent at t is only trusted until t + L - (L/100 + 2 ms).
inline Millis LeaseDrift(uint64_t lease_ms) { return Millis(lease_ms / 100 + 2); }

}  // namespace dlock

#endif  // DLOCK_CORE_CLOCK_H_
