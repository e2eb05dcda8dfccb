#include "core/options.h"

#include <cstring>

namespace dlock {

Status CheckLease(uint64_t lease_ms) {
  if (lease_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " is too long (at most ten years, " +
                                   std::to_string(kMaxLeaseMs) + " ms; 0 means no expiry)");
  }
  return Status::Ok();
}

Status CheckHeldLease(uint64_t lease_ms) {
  Status s = CheckLease(lease_ms);
  if (s.ok() && lease_ms != 0 && lease_ms < kMinLeaseMs) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " is too short to hold a lock (at least " +
                                   std::to_string(kMinLeaseMs) + " ms, or 0 for no expiry)");
  }
  return s;
}

Status CheckWait(int64_t wait_ms) {
  if (wait_ms < -1) {
    return Status::InvalidArgument("wait_ms " + std::to_string(wait_ms) +
                                   " must be 0 (one try), a positive number of ms, or -1 (no limit)");
  }
  return Status::Ok();
}

Status CheckRetry(uint64_t min_ms, uint64_t max_ms) {
  if (min_ms < 1 || min_ms > max_ms || max_ms > kMaxRetryMs) {
    return Status::InvalidArgument("retry_ms needs 1 <= min_ms <= max_ms <= " +
                                   std::to_string(kMaxRetryMs));
  }
  return Status::Ok();
}

Status CheckHeartbeat(uint64_t heartbeat_ms) {
  if (heartbeat_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("heartbeat_ms " + std::to_string(heartbeat_ms) +
                                   " is too long (at most ten years; 0 means no heartbeats)");
  }
  return Status::Ok();
}

Status CheckMaxHold(uint64_t max_hold_ms) {
  if (max_hold_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("max_hold_ms " + std::to_string(max_hold_ms) +
                                   " is too long (at most ten years; 0 means no maximum)");
  }
  return Status::Ok();
}

Status CheckMinHold(uint64_t min_hold_ms) {
  if (min_hold_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("min_hold_ms " + std::to_string(min_hold_ms) +
                                   " is too long (at most ten years; 0 means no minimum)");
  }
  return Status::Ok();
}

Status CheckLockDelay(uint64_t lock_delay_ms) {
  if (lock_delay_ms > kMaxLockDelayMs) {
    return Status::InvalidArgument("lock_delay_ms " + std::to_string(lock_delay_ms) +
                                   " is above its cap of " + std::to_string(kMaxLockDelayMs) +
                                   " ms (0 means none)");
  }
  return Status::Ok();
}

Status CheckLockName(const char* name) {
  if (name == nullptr) return Status::InvalidArgument("lock name is NULL");
  size_t n = strnlen(name, kMaxNameBytes + 1);
  if (n == 0) return Status::InvalidArgument("lock name is empty");
  if (n > kMaxNameBytes) {
    return Status::InvalidArgument("lock name is longer than " + std::to_string(kMaxNameBytes) +
                                   " bytes");
  }
  return Status::Ok();
}

Status CheckOwner(const char* owner) {
  if (owner != nullptr && strnlen(owner, kMaxOwnerBytes + 1) > kMaxOwnerBytes) {
    return Status::InvalidArgument("owner label is longer than " + std::to_string(kMaxOwnerBytes) +
                                   " bytes");
  }
  return Status::Ok();
}

Status CheckReentrantContext(const char* context) {
  if (context == nullptr) return Status::Ok();
  if (context[0] == '\0') {
    return Status::InvalidArgument("reentrant context is empty: name one (a task, a request id), or "
                                   "pass NULL to turn reentrancy off");
  }
  if (strnlen(context, kMaxContextBytes + 1) > kMaxContextBytes) {
    return Status::InvalidArgument("reentrant context is longer than " + std::to_string(kMaxContextBytes) +
                                   " bytes");
  }
  return Status::Ok();
}

Status CheckValue(const void* data, size_t len) {
  if (len > kMaxValueBytes) {
    return Status::InvalidArgument("value is " + std::to_string(len) + " bytes, longer than " +
                                   std::to_string(kMaxValueBytes));
  }
  if (data == nullptr && len > 0) return Status::InvalidArgument("value is NULL with a length");
  return Status::Ok();
}

uint64_t AcquireOptions::HeartbeatFor(uint64_t lease) const {
  return heartbeat_ms.has_value() ? *heartbeat_ms : DefaultHeartbeatMs(lease);
}

Status AcquireOptions::Validate() const {
  if (heartbeat_ms.has_value() && lease_ms != 0 && *heartbeat_ms >= lease_ms) {
    return Status::InvalidArgument("heartbeat_ms " + std::to_string(*heartbeat_ms) +
                                   " must be less than lease_ms " + std::to_string(lease_ms) +
                                   " (or 0 for no heartbeats)");
  }
  Status s = CheckHeldLease(lease_ms);
  if (!s.ok()) return s;
  if (max_hold_ms != 0 && lease_ms == 0) {
    // A hold with no lease never ends by itself: heartbeats that stop would end nothing.
    return Status::InvalidArgument("max_hold_ms " + std::to_string(max_hold_ms) +
                                   " needs a lease: lease_ms 0 never expires, so nothing would end the hold");
  }
  if (max_hold_ms != 0 && heartbeat_ms.has_value() && *heartbeat_ms == 0) {
    // Nothing renews it: it ends with its lease anyway, and no heartbeat would report the loss.
    return Status::InvalidArgument("max_hold_ms " + std::to_string(max_hold_ms) +
                                   " needs heartbeats: with heartbeat_ms 0 the lock ends with its lease anyway");
  }
  if (min_hold_ms != 0 && max_hold_ms != 0 && min_hold_ms > max_hold_ms) {
    return Status::InvalidArgument("min_hold_ms " + std::to_string(min_hold_ms) +
                                   " is more than max_hold_ms " + std::to_string(max_hold_ms) +
                                   ": the name would stay taken after the hold must end");
  }
  if (take > 1 && permits == 0) {
    return Status::InvalidArgument("take " + std::to_string(take) +
                                   " needs a semaphore: set permits (dlock_options_set_permits)");
  }
  if (take > permits && permits != 0) {
    return Status::InvalidArgument("take " + std::to_string(take) + " is more than the semaphore's " +
                                   std::to_string(permits) + " permits: it could never be granted");
  }
  if (kind == LockKind::kShared && permits != 0) {
    return Status::InvalidArgument("a lock is shared or a semaphore of " + std::to_string(permits) +
                                   " permits, not both (set kind exclusive, or permits 0)");
  }
  return Status::Ok();
}

}  // namespace dlock
