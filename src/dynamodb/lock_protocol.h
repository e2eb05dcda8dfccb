// The lock protocol on one DynamoDB item per lock name, written once for both transports.
//
// Item: the key attribute(s), then (dynamodb_config.h, attr::)
//   owner          the exclusive holder's secret owner token [+ "|label"]; absent when none
//   recordVersion  random, rewritten by every acquire and heartbeat of the exclusive holder
//   leaseMs        the exclusive holder's lease; 0 = no expiry (fail-closed)
//   renewedAtMs    its wall clock at its last write (used only by trust_local_time=1)
//   fence          the last fencing token of the name, of every kind of hold; never removed
//   data           the value stored with the exclusive hold (binary); absent when none
//   minHoldMs      the exclusive hold's job rules (LockRequest::min_hold_ms, lock_delay_ms):
//   lockDelayMs    what was left of its min hold when its record version was written, and its
//                  lock-delay; absent when none (a hold in `holds` carries them in its entry)
//   holds          shared holds or semaphore permits: a map from each holder's owner value to
//                  {recordVersion, leaseMs, renewedAtMs, token[, data, minHoldMs, lockDelayMs,
//                  take]}; may be left empty ({}). take: the permits a semaphore hold took
//                  (LockRequest::take), written only when more than 1; absent = 1
//   permits        the semaphore's size n while `holds` holds permits; absent while it holds
//                  shared holds. Meaningless (may be stale) while `holds` is empty.
//   writer         a waiting exclusive acquire's announcement {owner, recordVersion, queueMs}
//   closed         an owner-less marker left by a break (by "broken") or an early release
//                  (by "min_hold"), {recordVersion, leaseMs, renewedAtMs, by}: the name stays
//                  closed to every acquire until it lapses
//   broken         break records, newest first: [{reason, atMs, tokens: [N…]}]; never removed
//                  by an acquire (a broken holder's refused renewal finds its token there)
//   releaseRequest the last release request {id, reason, token}: token is the fence when it
//                  was written, so it is meant for the holds with tokens up to it; overwritten
//                  by the next request, never removed (a later holder's token is greater)
//
// A name is free of any sort while it has no exclusive owner and no hold in `holds`; it is a
// lock while it has an exclusive owner or shared holds, a semaphore of `permits` while it has
// permits. A hold is "live" to a waiter until the waiter saw its recordVersion stand unchanged
// for that hold's lease on its own monotonic clock (remembered across its attempts, as for
// exclusive locks since the start); holds with lease 0 never expire. There is no server clock.
//
// Exclusive acquire: one UpdateItem, conditional on no owner (or the owner's recordVersion the
//   waiter saw expire) and an absent or empty `holds` (or, taking over, `fence` unchanged and
//   every hold's recordVersion the one the waiter saw expire), that sets the holder, empties
//   `holds` (never removed once there: SET holds.<owner> needs it), removes `permits`, and
//   does fence = if_not_exists(fence, wall-clock µs) + 1: tokens rise
//   across releases through the counter, and across a deleted item through the clock. Refused
//   (ConditionalCheckFailedException), the waiter reads the item (ALL_OLD, or a ConsistentRead
//   GetItem), judges it and takes over in a second write when every blocker expired. A refused
//   acquire that will wait (LockRequest::queue_ms > 0) then writes its announcement with a new
//   recordVersion (each attempt does: a live writer's announcement keeps changing). Acquired,
//   a writer removes its own announcement (a conditional write in the background).
// Shared and semaphore acquire: one UpdateItem built from the item as last read (the first try
//   guesses a free item and the fence last seen), conditional on `fence` being what was read:
//   every acquisition of every kind changes `fence`, so no hold was added meanwhile (holds
//   only go away between two acquisitions), and a semaphore never has more than n permits
//   taken: a semaphore acquire is judged admitted when the live holds' takes (each entry's
//   `take`, absent = 1) plus its own make at most n, and that sum, on the read item, can only
//   have fallen when the write lands (a hold's take is written once, by its acquire, which
//   changes `fence`; renewals never touch it). It
//   sets fence = read + 1 and the hold with that token, removes the holds (and an exclusive
//   holder) the waiter saw expire, each conditional on its recordVersion, and sets or removes
//   `permits`. A shared acquire is also conditional on no `writer` (or the one the waiter saw
//   stand for its queueMs, removed by the write): a standing announcement refuses new readers,
//   so a waiting writer is not starved. A write refused because the item changed is judged again
//   from the new item, a bounded number of rounds per attempt. One write removes at most 100
//   expired holds (DynamoDB's expressions are at most 4 KB); more are removed by writes that
//   do only that, first. A name changes sort (lock <-> semaphore, or another n) only once every
//   old hold is gone.
// Renew/extend: UpdateItem conditional on the hold still being ours (owner = ours, or
//   holds.<ours> exists): new recordVersion, lease, renewedAtMs.
// Release: UpdateItem conditional on the same that removes the exclusive holder's attributes
//   (data too), or holds.<ours>, keeping the item and its fence.
// A hold's value: UpdateItem conditional on the same that sets (or removes) data, or
//   holds.<ours>.data; the record version is left alone (a value is no heartbeat).
// Break: a ConsistentRead, then one UpdateItem conditional on the item being as read (fence
//   unchanged, so no hold was added; the exclusive holder's and every broken hold's record
//   version unchanged, so none renewed or extended meanwhile; the marker as read) that removes
//   the exclusive holder and every hold (holds = {}), never `fence`, prepends a break record
//   with their tokens, and sets or removes the marker. The marker lapses by the rule of an
//   expiring lease: its leaseMs is the longest of the broken holds' remaining leases as this
//   client judges them (Judge: a lease counts from when this client first saw its record
//   version, or by the holder's wall clock with trust_local_time; a hold with lease 0 adds
//   nothing) and, unless now, of what is left of an earlier break's marker standing in the
//   item, judged by the same rule (the holders that break broke may not have heard yet), and
//   a waiter takes it as lapsed once it saw its recordVersion stand for that long on its own
//   monotonic clock. A new marker always has a new recordVersion (every waiter counts its
//   whole time afresh). A break that finds no hold and an earlier break's marker this client
//   does not judge lapsed writes nothing: the marker stands as it is (waiters keep counting)
//   and the break reports what is left of it. With now, any marker is removed and the name is
//   free at once; without it, a marker judged lapsed, or one that is not a break's or not
//   readable, is removed unless a broken hold needs a new one. Every acquire is conditional on
//   no marker (or the one its waiter saw lapse, removed by the write). A refused break reads
//   and tries again; more than kMaxRemovalsPerWrite holds are broken a share per write, each
//   share's write keeping the name closed (a marker of at least timeout_ms, and of what is
//   left of an earlier break's, carried to the last write) so that no hold is acquired
//   meanwhile. Break records: at most kMaxBrokenRecords tokens and kMaxBrokenRecordBytes, the
//   newest; a record older than kBrokenRecordMs by the wall clocks is dropped (it only words a
//   loss report).
// Job rules (kCapMinHold, kCapLockDelay). There is no server clock: "acquire + min hold on the
//   server's clock" and "lease + lock-delay" are judged by the rule for leases, on each waiter's
//   own monotonic clock from when it first saw a record version (or by the writer's wall clock
//   with trust_local_time). A hold stores minHoldMs (what is left of its min hold when that
//   record version was written: the whole of it at the acquire; at each renewal or extend what
//   is left of it on the holder's monotonic clock since its acquire's answer came, removed once
//   over) and lockDelayMs (set at the acquire, untouched by renewals; none with lease 0: such a
//   hold never ends uncleanly). A waiter takes a hold as live for its lease and then free only
//   once it saw that record version stand for max(leaseMs + lockDelayMs, minHoldMs): in between,
//   the hold is no holder but closes the name (closed_by "lock_delay", or "min_hold" when the
//   min hold ends later), refused acquires hear the time left, and inspect lists no such hold
//   but reports closed_ms/closed_by by the writer's wall clock. Since each waiter counts from no
//   earlier than the write, the name is free no earlier than acquire + min hold, or the last
//   renewal's send + lease + delay, however the hold ends. Renewals and extends carry the
//   lock-delay past each new lease (a new record version: counted afresh). Shared holds and
//   permits each carry their own rules: the name is closed while any of them stands, so the
//   largest applies; while some hold's lease stands the name is held, not closed (a hold in its
//   rules' time still counts against a semaphore's permits). A release is a clean end: it
//   removes the hold with its rules (no lock-delay); before the min hold is over it also sets
//   the `closed` marker (by "min_hold", leaseMs = what is left of the min hold), in the same
//   write, conditional on the hold being ours and on no marker; refused with the hold still
//   ours (another shared holder's early release left one), it keeps a marker this client judges
//   to outlast its min hold, else replaces it (conditional on its record version). That marker
//   closes the name to every acquire, shared ones included, as a break's does; it has no holder,
//   so nothing is handed over. A takeover (exclusive or shared acquire) removes the old holder's
//   rules with it; a give-back of an ambiguous acquire removes the hold with its rules (the
//   acquire did not happen); a break removes every hold with its rules, and any min-hold marker,
//   and its own marker counts only the broken holds' leases: a break clears the job rules.
// Release requests (kCapReleaseRequest; no notifications: heard at the heartbeat). A request is
//   one UpdateItem that sets releaseRequest = {id, reason, token = fence}, conditional on
//   `fence` being the one it puts in token and on the name having a hold (an exclusive owner or
//   a non-empty `holds`); ALL_NEW counts the holds asked. The first write takes the fence this
//   client last saw (else a ConsistentRead comes first); a refusal is judged from the item (the
//   refusal's ALL_OLD, or a read): no hold, nothing written (asked 0); else written again with
//   its fence, a bounded number of rounds. A holder that listens (LockState::request_listener)
//   asks its renewals and extends for ALL_NEW and tells the listener of a request whose token
//   is at least its own fencing token (a later holder's token is greater than any fence an
//   earlier request recorded); the listener drops a request it heard already. A holder that
//   does not listen renews as before (ReturnValues NONE). A hold without heartbeats hears
//   nothing.
// A refused condition means not acquired / not held. A failure after which the write may
// have been applied (timeout, 5xx) is settled by reading the item before deciding.
//
// Holder limit: an item is at most 400 KB (409,600 bytes, DynamoDB's sizes: a string is its
// bytes, a number at most 21, a map 3 plus 1 per entry plus its names and values). One hold
// takes at most 428 bytes: its map key, the owner value (32 hex + '|' + a label of at most 256
// bytes = 289), 1 + 3 for the entry and its value's map, the field names recordVersion,
// leaseMs, renewedAtMs, token (36) with 1 each (4), the 32-byte record version, three numbers
// (63). A hold with job rules adds minHoldMs and lockDelayMs (20 bytes of names, 2 of entries,
// and two numbers of at most 7 bytes: at most 12 digits each): it still fits 428, since the
// three numbers above take at most 26 bytes at their true sizes (DynamoDB stores 1 byte plus 1
// per two digits: a lease of at most 12 digits, a wall-clock ms of 13, a token of 20). A
// semaphore hold that took k > 1 permits adds take (4 bytes of name, 1 of entry, a number of at
// most 3 bytes: 8), perhaps past 428, but it counts for k >= 2 of the at most 900 permits: the
// item has k - 1 holds fewer, and 900 x 428 still bounds them. The rest of the item (keys of up
// to 1,280 bytes, exclusive holder, writer, fence, permits, the closed marker, a release request
// of at most about 1.2 KB) takes at most about 5 KB, break records at most
// kMaxBrokenRecordBytes (12 KB). kMaxHoldsPerName = 900 holds (385 KB) leaves a margin: the
// 901st concurrent shared hold, or a semaphore of more than 900 permits, is refused with EINVAL
// naming the limit.
#ifndef DLOCK_DYNAMODB_LOCK_PROTOCOL_H_
#define DLOCK_DYNAMODB_LOCK_PROTOCOL_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "dynamodb/dynamodb_api.h"

namespace dlock::dynamodb {

// The most shared holds or semaphore permits one name can have at once (see above).
inline constexpr size_t kMaxHoldsPerName = 900;
// The most bytes of break records one item keeps (reasons, tokens, fields; see above): the
// newest record always stays, older ones while they fit.
inline constexpr size_t kMaxBrokenRecordBytes = 12 * 1024;

// One shared hold or permit, as stored in `holds`.
struct HoldRecord {
  std::string owner;           // the holder's owner value (the map key)
  std::string record_version;  // "" when missing (a foreign entry: it never expires)
  uint64_t lease_ms = 0;       // clamped to kMaxLeaseMs; 0 = no expiry
  int64_t renewed_at_ms = 0;   // clamped
  uint64_t token = 0;
  std::string value;           // the value stored with it ("" = none)
  uint64_t min_hold_ms = 0;    // what was left of its min hold at its last write (clamped); 0 = none
  uint64_t lock_delay_ms = 0;  // its lock-delay (clamped); 0 = none
  uint32_t take = 1;           // the semaphore permits it counts for (absent, 0 or unreadable: 1)
};

// A writer's announcement, as stored in `writer`.
struct WriterRecord {
  std::string owner;
  std::string record_version;  // "" when missing
  uint64_t queue_ms = 0;       // clamped to kMaxLeaseMs
};

// The owner-less marker that keeps a name closed, as stored in `closed`.
struct ClosedMarker {
  std::string record_version;  // never "" (else the marker is malformed)
  uint64_t lease_ms = 0;       // how long it stands; clamped to kMaxLeaseMs, never 0
  int64_t renewed_at_ms = 0;   // the breaker's wall clock when it wrote it (trust_local_time only)
  std::string by;              // what left it: "broken", or "min_hold" (an early release)
};

// One break's record, as stored in `broken`.
struct BreakRecord {
  std::string reason;           // "" = none given
  int64_t at_ms = 0;            // the breaker's wall clock, clamped
  std::vector<uint64_t> tokens;  // the fencing tokens of the holds it broke
};

// The last release request, as stored in `releaseRequest`.
struct ReleaseRequestRecord {
  std::string id;      // 1 to kMaxRequestIdBytes bytes
  std::string reason;  // cut at kMaxReasonBytes
  uint64_t token = 0;  // the fence when it was written
};
inline constexpr size_t kMaxRequestIdBytes = 64;
// Reads `releaseRequest` of an item (or of an UpdateItem's Attributes): false when it has none,
// or one dlock did not write.
bool ParseReleaseRequest(const Json& item, ReleaseRequestRecord* out);

// A lock item as read, every field checked and clamped (no arithmetic on raw server numbers).
struct LockItem {
  // Another lock client's item (foreign::kMarkers): which client ("AWS Java lock client",
  // "dynamodb-lock-client"), and its owner label ("" = none). Nothing else is read from it.
  const char* foreign = nullptr;
  std::string foreign_owner;
  std::string owner;           // the exclusive holder; "" = none
  std::string record_version;
  uint64_t lease_ms = 0;
  int64_t renewed_at_ms = 0;
  std::string value;           // the exclusive holder's value ("" = none)
  uint64_t min_hold_ms = 0;    // the exclusive holder's job rules (as in HoldRecord)
  uint64_t lock_delay_ms = 0;
  bool has_fence = false;
  uint64_t fence = 0;
  bool has_holds = false;      // the `holds` attribute exists (maybe empty)
  bool holds_malformed = false;  // `holds` exists but is no map: the item is not ours to change
  std::vector<HoldRecord> holds;  // sorted by token
  uint32_t permits = 0;        // the `permits` attribute (0 = absent or unusable)
  bool has_permits = false;
  bool has_writer = false;
  WriterRecord writer;
  bool has_closed = false;
  bool closed_malformed = false;  // `closed` exists but is not a marker dlock wrote
  ClosedMarker closed;
  bool has_broken = false;
  bool broken_malformed = false;  // `broken` exists but is not a list of break records
  std::vector<BreakRecord> broken;  // newest first
};
// Reads an item (a GetItem "Item", an "Attributes" of ALL_NEW, or null for none). Never throws.
void ParseLockItem(const Json& item, LockItem* out);

// What a waiter has seen of one holder (the exclusive one, a hold, or a writer's
// announcement): the takeover clock.
struct Observation {
  std::string record_version;
  TimePoint first_seen;       // monotonic: when this record version was first seen
  uint64_t lease_ms = 0;
  int64_t renewed_at_ms = 0;  // the holder's wall clock (trust_local_time only)
  // How long it must stand unchanged before the name is free of it: the lease, or longer by
  // the hold's job rules (max(lease + lock-delay, min hold left)); 0 with lease 0.
  uint64_t free_ms = 0;
};

class LockProtocol {
 public:
  explicit LockProtocol(Api* api) : api_(api) {}

  // One acquire attempt (a few round trips at most: write, read, write again).
  void Acquire(Transport* transport, const LockRequest& request,
               std::function<void(Status, AcquireAttempt)> done);
  // Renews (heartbeat) or changes (extend) the lease of a held lock. Ok, NotHeld, or an error.
  // deadline bounds the whole call, an ambiguous answer's read included (the lock's local
  // deadline for heartbeats, the caller's bound for extend); each request also ends by
  // timeout_ms.
  void Renew(Transport* transport, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
             TimePoint deadline, std::function<void(Status)> done);
  // Replaces the value stored with a held lock ("" removes it). Ok, NotHeld, or an error.
  void SetValue(Transport* transport, std::shared_ptr<const LockState> lock, const std::string& value,
                std::function<void(Status)> done);
  // Ok, NotHeld, or an error. A hold whose min hold is not over leaves a marker for the rest of
  // it (closed by "min_hold").
  void Release(Transport* transport, std::shared_ptr<const LockState> lock,
               std::function<void(Status)> done);
  // Who holds name (one ConsistentRead). Remaining leases are estimated from each holder's
  // wall clock at its last write (renewedAtMs + leaseMs), within 0..leaseMs.
  void Inspect(Transport* transport, const std::string& name,
               std::function<void(Status, LockInfo)> done);
  // Breaks name (see above): Ok with what it broke, or an error. Bounded by timeout_ms.
  void Break(Transport* transport, const std::string& name, const std::string& reason, bool now,
             std::function<void(Status, BreakResult)> done);
  // Backend::RequestRelease (see "Release requests" above): *asked holds were asked (0: none,
  // nothing written). Bounded by timeout_ms.
  void RequestRelease(Transport* transport, const std::string& name, const std::string& reason,
                      std::function<void(Status, uint32_t asked)> done);
  // A ConsistentRead of the item: Ok with *item null when there is none.
  void Read(Transport* transport, const Json& key, TimePoint deadline,
            std::function<void(Status, Json item)> done);

  // How the protocol sends a write in the background, its answer ignored: giving back what an
  // ambiguous acquire may have won, retrying a release that could not be confirmed, or removing
  // a writer's announcement, without making the caller wait another timeout. The backend sends
  // it on the loop's transport.
  using BackgroundSend = std::function<void(const std::string& operation, Json body)>;
  void SetBackground(BackgroundSend send) { background_ = std::move(send); }

  // The item key for a lock name (or EINVAL).
  Status KeyFor(const std::string& name, Json* key) const;
  // The body of a GetItem of key (also what Check sends).
  Json GetItemBody(const Json& key) const;

 private:
  struct AcquireOp;
  struct BreakOp;
  struct RequestOp;
  struct Judgement;
  // What one waiter remembers of one name.
  struct NameObservations {
    Observation owner;  // the exclusive holder
    std::unordered_map<std::string, Observation> holds;  // by owner value
    Observation writer;  // lease_ms = the announcement's queueMs
    Observation closed;  // the closed marker: lease_ms = how long it stands
    bool fence_known = false;
    uint64_t fence = 0;  // the last fence seen: the first guess of a shared acquire
  };

  // The conditional write that removes owner_value's hold on key (release, give-back).
  Json ReleaseBody(const Json& key, const std::string& owner_value, bool is_hold) const;
  // A release that leaves a min-hold marker: a write conditional on the marker as last seen
  // (marker_version; "" = none), merged after a refusal that found the hold still ours.
  struct ReleaseOp;
  void ReleaseWithMarker(Transport* transport, std::shared_ptr<ReleaseOp> op);
  void ReleaseMarkerRefused(Transport* transport, std::shared_ptr<ReleaseOp> op, Json old_item);
  void InBackground(const std::string& operation, Json body) const {
    if (background_) background_(operation, std::move(body));
  }
  // Sends the acquire write built from the item and what the judge made of it (both null: the
  // first write, which guesses a free item); cleanup: only removes expired holds.
  void AcquireRound(Transport* transport, std::shared_ptr<AcquireOp> op, const LockItem* item,
                    const Judgement* judged, bool cleanup = false);
  // A write was refused: judges the old item it returned, or reads it first.
  void AcquireRefused(Transport* transport, std::shared_ptr<AcquireOp> op, Json old_item);
  void AcquireJudge(Transport* transport, std::shared_ptr<AcquireOp> op, Json item, TimePoint seen_at);
  // A write that may have landed: the item says whether it did.
  void AcquireAmbiguous(Transport* transport, std::shared_ptr<AcquireOp> op, Status failure);
  // When item shows op's own hold (an earlier write landed though its answer was lost): settles
  // op as acquired with that token and returns true.
  bool AlreadyOurs(AcquireOp& op, const LockItem& item);
  // A refused exclusive acquire that will wait: writes its announcement, then reports the refusal.
  void Announce(Transport* transport, std::shared_ptr<AcquireOp> op, int64_t holder_ttl_ms);
  void AcquiredExclusive(const std::shared_ptr<AcquireOp>& op, const Json& answer);
  // The writes: built from the item as read and judged (null: the first write's guess).
  Json ExclusiveBody(const AcquireOp& op, const LockItem* item);
  Status HoldBody(const AcquireOp& op, const LockItem* item, const Judgement* judged, Json* body,
                  uint64_t* token);
  Json CleanupBody(const AcquireOp& op, const LockItem& item, const Judgement& judged);
  // Remembers what the item shows and says what has expired, on this waiter's clock.
  Judgement Judge(const std::string& key_text, const LockItem& item, TimePoint seen_at);
  // The ms until a takeover of what was observed is allowed (<= 0: now), with the shortcut of
  // trust_local_time; until_free: until the name is free of it (free_ms), not its lease. mu held.
  int64_t TakeoverIn(const Observation& observation, bool trust_wall_clock, bool until_free = false) const;
  // The exclusive holder's record version that has stood for a whole lease, if any.
  std::string ExpiredRecordVersion(const std::string& key_text);
  // The closed marker's record version that has stood for its whole time, if any.
  std::string LapsedMarkerVersion(const std::string& key_text);
  // Break: reads the item, then writes (again after a refusal, or for the next share of holds).
  void BreakRound(Transport* transport, std::shared_ptr<BreakOp> op);
  void BreakWrite(Transport* transport, std::shared_ptr<BreakOp> op, const LockItem& item, TimePoint seen_at);
  // The break's write just sent landed: what it broke joins the result; done when it was the last.
  void BreakWritten(Transport* transport, std::shared_ptr<BreakOp> op);
  // Release requests: the write with the fence it records; the item that refused it (null: read
  // it first) judged.
  void RequestWrite(Transport* transport, std::shared_ptr<RequestOp> op, uint64_t fence);
  void RequestJudge(Transport* transport, std::shared_ptr<RequestOp> op, Json item);
  void RequestRead(Transport* transport, std::shared_ptr<RequestOp> op);
  // After an acquisition: remember the fence; an exclusive one also forgets the holders seen.
  void Acquired(const std::string& key_text, uint64_t fence, bool exclusive);
  bool KnownFence(const std::string& key_text, uint64_t* fence);
  NameObservations& ObservationsOf(const std::string& key_text);  // mu held
  TimePoint CallDeadline() const;

  Api* api_;
  BackgroundSend background_;
  std::mutex observed_mu_;
  std::unordered_map<std::string, NameObservations> observed_;
};

// Reads an "N" attribute as uint64 (false when absent or not a number).
bool NumberAttribute(const Json& item, const char* name, uint64_t* out);
// Reads an "S" attribute ("" when absent).
std::string StringAttribute(const Json& item, const char* name);

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_LOCK_PROTOCOL_H_
