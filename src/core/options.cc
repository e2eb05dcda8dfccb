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

Status CheckHeartbeat(uint64_t heartbeat_ms) {
  if (heartbeat_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("heartbeat_ms " + std::to_string(heartbeat_ms) +
                                   " is too long (at most ten years; 0 means no heartbeats)");
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

uint64_t AcquireOptions::HeartbeatFor(uint64_t lease) const {
  if (heartbeat_ms.has_value()) return *heartbeat_ms;
  return lease == 0 ? 0 : (lease / 3 > 0 ? lease / 3 : 1);
}

Status AcquireOptions::Validate() const {
  if (heartbeat_ms.has_value() && lease_ms != 0 && *heartbeat_ms >= lease_ms) {
    return Status::InvalidArgument("heartbeat_ms " + std::to_string(*heartbeat_ms) +
                                   " must be less than lease_ms " + std::to_string(lease_ms) +
                                   " (or 0 for no heartbeats)");
  }
  if (lease_ms != 0 && lease_ms < 10) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " is too short to hold a lock (at least 10 ms, or 0 for no expiry)");
  }
  if (kind == LockKind::kShared && permits != 0) {
    return Status::InvalidArgument("a lock is shared or a semaphore of " + std::to_string(permits) +
                                   " permits, not both (set kind exclusive, or permits 0)");
  }
  return Status::Ok();
}

}  // namespace dlock
