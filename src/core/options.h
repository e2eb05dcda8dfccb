// Acquire options (dlock_options) and their validation.
#ifndef DLOCK_CORE_OPTIONS_H_
#define DLOCK_CORE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/status.h"

namespace dlock {

// Told once that a held lock was found lost in the background, on the loop thread, with why.
// (The C ABI wraps a dlock_lost_fn or a completion queue in one.)
using LostHandler =
    std::function<void(const std::string& name, uint64_t fencing_token, const std::string& reason)>;

// Told that someone asked the holders of a held lock to let go (dlock_request_release), on the
// loop thread, with their reason ("" = none). The holder may release, or not.
using ReleaseRequestHandler =
    std::function<void(const std::string& name, uint64_t fencing_token, const std::string& reason)>;

// Every default and bound of the acquire options, in one place.
constexpr uint64_t kDefaultLeaseMs = 10000;
constexpr uint64_t kMinLeaseMs = 10;  // shorter cannot be held: drift alone eats it
constexpr uint64_t kMaxLeaseMs = 10ull * 366 * 24 * 3600 * 1000;  // ten years
constexpr uint64_t kMaxRetryMs = 3600000;
constexpr uint64_t kDefaultRetryMinMs = 50;
constexpr uint64_t kDefaultRetryMaxMs = 1000;
constexpr size_t kMaxNameBytes = 1024;
constexpr size_t kMaxOwnerBytes = 256;
constexpr size_t kMaxContextBytes = 256;  // a reentrant context (dlock_options_set_reentrant)
constexpr size_t kMaxValueBytes = 4096;  // a value stored with a hold (DLOCK_MAX_VALUE_BYTES)
constexpr size_t kMaxReasonBytes = 1024; // an operator's reason for a break or a release request
constexpr uint64_t kMaxLockDelayMs = 60000;  // as Chubby's and Consul's lock-delay

// The kind of hold asked for (dlock_kind, same values).
enum class LockKind : int { kExclusive = 0, kShared = 1 };

struct AcquireOptions {
  uint64_t lease_ms = kDefaultLeaseMs;       // 0 = no expiry
  std::optional<uint64_t> heartbeat_ms;      // unset = lease/3; 0 = none
  int64_t wait_ms = 0;                       // 0 = one try, -1 = no limit
  uint64_t retry_min_ms = kDefaultRetryMinMs;
  uint64_t retry_max_ms = kDefaultRetryMaxMs;
  std::string owner;                         // label for people and tools
  std::string value;                         // stored with the hold, any bytes; "" = none
  LockKind kind = LockKind::kExclusive;
  uint32_t permits = 0;                      // semaphore of n permits; 0 = not a semaphore
  uint32_t take = 1;                         // permits one acquire takes (a semaphore's), >= 1
  bool fair = true;                          // waiting exclusive acquires: in arrival order
  uint64_t max_hold_ms = 0;                  // heartbeats stop renewing after this; 0 = none
  uint64_t min_hold_ms = 0;                  // the name stays taken at least this long; 0 = none
  uint64_t lock_delay_ms = 0;                // closed this long after an unclean end; 0 = none
  LostHandler on_lost;                       // empty = nobody to tell
  ReleaseRequestHandler on_release_requested;  // empty = requests are not listened for
  std::string reentrant_context;             // "" = not reentrant (dlock_options_set_reentrant)

  // Checks the combination (single values are checked by the setters).
  Status Validate() const;
  // The heartbeat period in ms for a lease, 0 for none.
  uint64_t HeartbeatFor(uint64_t lease) const;
};

// The heartbeat period a lease gets unless one is set: a third of it, so that two renewals
// may fail before it runs out. 0 (none) for no expiry.
inline uint64_t DefaultHeartbeatMs(uint64_t lease_ms) {
  return lease_ms == 0 ? 0 : (lease_ms / 3 > 0 ? lease_ms / 3 : 1);
}

// Setter checks (one value each).
Status CheckLease(uint64_t lease_ms);
Status CheckWait(int64_t wait_ms);
Status CheckRetry(uint64_t min_ms, uint64_t max_ms);
Status CheckHeartbeat(uint64_t heartbeat_ms);
Status CheckMaxHold(uint64_t max_hold_ms);
Status CheckMinHold(uint64_t min_hold_ms);
Status CheckLockDelay(uint64_t lock_delay_ms);
// A lease a lock can be held with (acquire and extend): 0, or kMinLeaseMs..kMaxLeaseMs.
Status CheckHeldLease(uint64_t lease_ms);
Status CheckLockName(const char* name);
Status CheckOwner(const char* owner);
Status CheckValue(const void* data, size_t len);
Status CheckReentrantContext(const char* context);  // NULL is "off", and fine

// When a wait of wait_ms from start ends: never for -1, or for waits beyond what the clock can
// add (anything longer than the longest lease counts as no limit).
inline TimePoint WaitUntil(TimePoint start, int64_t wait_ms) {
  if (wait_ms < 0 || static_cast<uint64_t>(wait_ms) > kMaxLeaseMs) return TimePoint::max();
  return start + Millis(wait_ms);
}

}  // namespace dlock

#endif  // DLOCK_CORE_OPTIONS_H_
