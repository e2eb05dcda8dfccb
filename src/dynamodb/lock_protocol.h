// The lock protocol on one DynamoDB item per lock, written once for both transports.
//
// Item: the key attribute(s), then (dynamodb_config.h, attr::)
//   owner          the holder's secret owner token [+ "|label"]; absent when the lock is free
//   recordVersion  random, rewritten by every acquire and heartbeat
//   leaseMs        the holder's lease; 0 = no expiry (fail-closed)
//   renewedAtMs    the holder's wall clock at its last write (used only by trust_local_time=1)
//   fence          the last fencing token; kept by release, so tokens keep rising
//
// Acquire: one UpdateItem, conditional on attribute_not_exists(owner) (free, or never used),
//   that sets the holder and does fence = if_not_exists(fence, wall-clock µs) + 1, returning
//   the new fence: tokens rise across releases through the counter, and across a deleted
//   item through the clock. Refused (ConditionalCheckFailedException), the waiter reads the
//   item (from the error's ALL_OLD item, or a ConsistentRead GetItem) and remembers when it
//   first saw that recordVersion, on its monotonic clock. Once the same recordVersion has
//   stood for a whole lease, the holder stopped heartbeating: the waiter takes over with the
//   same UpdateItem conditional on "recordVersion = the one it saw". With trust_local_time=1,
//   renewedAtMs + leaseMs past the waiter's wall clock is enough.
// Renew/extend: UpdateItem conditional on owner = ours: new recordVersion, lease, renewedAtMs.
// Release: UpdateItem conditional on owner = ours that removes owner, recordVersion, leaseMs,
//   renewedAtMs and keeps the item and its fence.
// A refused condition means not acquired / not held. A failure after which the write may
// have been applied (timeout, 5xx) is settled by reading the item before deciding.
#ifndef DLOCK_DYNAMODB_LOCK_PROTOCOL_H_
#define DLOCK_DYNAMODB_LOCK_PROTOCOL_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/backend.h"
#include "dynamodb/dynamodb_api.h"

namespace dlock::dynamodb {

// What a waiter has seen of a held lock: the takeover clock.
struct Observation {
  std::string record_version;
  TimePoint first_seen;      // monotonic: when this record version was first seen
  uint64_t lease_ms = 0;
  int64_t renewed_at_ms = 0;  // the holder's wall clock (trust_local_time only)
};

class LockProtocol {
 public:
  explicit LockProtocol(Api* api) : api_(api) {}

  // One acquire attempt (may take up to three round trips: write, read, takeover write).
  void Acquire(Transport* transport, const LockRequest& request,
               std::function<void(Status, AcquireAttempt)> done);
  // Renews (heartbeat) or changes (extend) the lease of a held lock. Ok, NotHeld, or an error.
  // deadline bounds the whole call, an ambiguous answer's read included (the lock's local
  // deadline for heartbeats, the caller's bound for extend); each request also ends by
  // timeout_ms.
  void Renew(Transport* transport, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
             TimePoint deadline, std::function<void(Status)> done);
  // Ok, NotHeld, or an error.
  void Release(Transport* transport, std::shared_ptr<const LockState> lock,
               std::function<void(Status)> done);
  // Who holds name (one ConsistentRead). The remaining lease is estimated from the holder's
  // wall clock at its last write (renewedAtMs + leaseMs), within 0..leaseMs.
  void Inspect(Transport* transport, const std::string& name,
               std::function<void(Status, LockInfo)> done);
  // A ConsistentRead of the item: Ok with *item null when there is none.
  void Read(Transport* transport, const Json& key, TimePoint deadline,
            std::function<void(Status, Json item)> done);

  // How the protocol sends a write in the background, its answer ignored: giving back what an
  // ambiguous acquire may have won, or retrying a release that could not be confirmed, without
  // making the caller wait another timeout. The backend sends it on the loop's transport.
  using BackgroundSend = std::function<void(const std::string& operation, Json body)>;
  void SetBackground(BackgroundSend send) { background_ = std::move(send); }

  // The item key for a lock name (or EINVAL).
  Status KeyFor(const std::string& name, Json* key) const;
  // The body of a GetItem of key (also what Check sends).
  Json GetItemBody(const Json& key) const;

 private:
  struct AcquireOp;
  // The conditional write that removes owner_value's hold on key (release, give-back).
  Json ReleaseBody(const Json& key, const std::string& owner_value) const;
  void InBackground(const std::string& operation, Json body) const {
    if (background_) background_(operation, std::move(body));
  }
  void AcquireRound(Transport* transport, std::shared_ptr<AcquireOp> op);
  void AcquireJudge(Transport* transport, std::shared_ptr<AcquireOp> op, Json item, TimePoint seen_at);
  // Remembers the holder's record version for key_text; returns the ms until a takeover is
  // allowed (<= 0: now).
  int64_t ObserveHolder(const std::string& key_text, const std::string& record_version,
                        uint64_t lease_ms, int64_t renewed_at_ms, TimePoint seen_at);
  // The ms until a takeover of what was observed is allowed (<= 0: now), with the shortcut of
  // trust_local_time. mu held.
  int64_t TakeoverIn(const Observation& observation) const;
  // The record version that has stood for a whole lease, if any (the takeover condition).
  std::string ExpiredRecordVersion(const std::string& key_text);
  void ForgetObservation(const std::string& key_text);
  TimePoint CallDeadline() const;

  Api* api_;
  BackgroundSend background_;
  std::mutex observed_mu_;
  std::unordered_map<std::string, Observation> observed_;
};

// Reads an "N" attribute as uint64 (false when absent or not a number).
bool NumberAttribute(const Json& item, const char* name, uint64_t* out);
// Reads an "S" attribute ("" when absent).
std::string StringAttribute(const Json& item, const char* name);

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_LOCK_PROTOCOL_H_
