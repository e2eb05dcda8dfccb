// The lock protocol on etcd, written once for both transports (transport.h).
//
// Lock NAME is the key prefix + NAME (K below); its value is the holder's owner value (secret
// token [+ "|label"]).
// Acquire: one transaction: if the key's create_revision is 0 (absent), put it attached to a
//   lease; else read it. The fencing token is the key's create_revision: etcd's revision counter,
//   strictly increasing across the whole cluster through leader changes, with no clock in it.
//   A refused acquire reports the holder's lease's time to live (or -1: no lease).
// The key's value is the holder's owner value, then NUL and the value stored with the hold when
//   it has one (dlock_options_set_value; an owner value holds no NUL).
// Owner checks: a write to a held key is conditional on its create_revision being the hold's
//   own (its token): the key was made by that acquire and never deleted since, for a key
//   deleted and made again gets a new revision. (Not on the value: the value stored with the
//   hold may change under a renewal's feet.)
// Extend: if the key is still ours, put it again on a lease of the new length, keeping its value
//   (ignore_value; the create revision, and so the token, stays). A hold's value: put the key's
//   new value, keeping its lease (ignore_lease). Release: the same condition, then delete. A
//   refused condition means not held.
// A call that may have been applied (a timeout, a dropped connection, an Unavailable answer)
//   is settled by reading the key: it is ours (our value, our revision) or it is not.
//
// Leases are shared, as etcd's own sessions share one: all locks of a client with leases that
// round up to the same whole seconds hang on one etcd lease, so that a heartbeat is one
// keepalive per lease length in use, not one per lock (10,000 locks: one request per tick).
// Its TTL is the lease rounded up to whole seconds, plus one (or etcd's minimum, if more;
// read back from the grant): a key attached to it lives at least lease_ms after the attach as
// long as the lease was kept alive within that spare second; otherwise the acquire keeps it
// alive first. So the server may hold a lock up to about 2 s longer than asked after its
// holder died; the holder's local validity keeps to lease_ms (the safe direction).
// A renewal keeps the lease alive and asks which keys hang on it: a lease etcd no longer
// knows, or a key no longer on it (deleted behind the holder's back), is a lost lock.
//
// An acquire whose outcome stays unknown (etcd may apply it later: a proposal queued on a node
// cut off from the leader commits once the partition heals), or a release that failed, must not
// leave a lock held by nobody for longer than a lease. Its lease is no longer used for new
// locks, so that only the heartbeats of locks already on it keep it alive; each of those
// renewals deletes the keys on the lease that no lock of the client holds (a transaction
// conditional on the key's lease). So such a key lives at most until the lease's other locks
// are gone, or a heartbeat later. A failed release is also sent again in the background; an
// unknown acquire without a lease is given back there (deleted if it holds our owner value).
//
// Kinds (shared holds, semaphores). The exclusive key K stays as it was; every other hold is a
// key of its own, under K + NUL (a name is a C string, so no other name's key starts so, and
// the range [K, K + "\x01") is exactly NAME's keys):
//   K \0 "hs" \0 ID              a shared hold
//   K \0 "hp" \0 n \0 ID         a permit of a semaphore of n (n in decimal)
//   K \0 "hp" \0 n \0 ID \0 k    the permit of a hold that took k > 1 of the n at once
//                                (LockRequest::take, k in decimal; a hold of one has no suffix)
//   K \0 "w"  \0 ID              a waiting writer's announcement
// ID = the first 16 bytes of SHA-256(owner value), in hex: one key per hold, unguessable. Each
// hold key carries its owner value and hangs on its holder's (shared) lease like K; its token
// is its create_revision, so tokens rise across every kind of a name (one revision counter).
// Extend, release and renew work on a hold's key exactly as on K. A hold's take lives in its
// key's name, fixed for the hold's life, so that every write of the key (renew, extend, value,
// release, break) is the same for any k and the value stays owner [+ NUL + value].
//   Exclusive: the transaction also asks that no hold key exist (a range compare: every
//     version in [K\0h, K\0i) is 0), and deletes this writer's own announcement.
//   Shared: one transaction: K absent, no permit key, no announcement key (range compares),
//     our hold key absent; then put the hold key. Refused: the transaction reads [K, K\x01).
//   Semaphore of n: a read of [K, K\x01) at revision R decides (K or a shared hold: EINVAL,
//     a permit of another size: EINVAL naming both; the permit keys' takes summed (1 for a key
//     without one) plus our take more than n: refused), then a transaction puts our permit
//     (its key ending in our take when that is > 1) if K is absent, no shared hold exists and
//     no permit key was created or changed after R (a range compare: every mod_revision in
//     [K\0hp, K\0hq) <= R).
//     etcd compares cannot count, but they can tell that nothing in a range moved since the
//     count was made: two acquires that both counted room for their take cannot both pass.
//     (A dlock built before takes counts a weighted key as one permit.) A lost race reads
//     again (up to 16 rounds per attempt).
//   Writer announcement: a refused exclusive acquire with queue_ms > 0 puts K\0w\0ID (its
//     owner value) on a lease of its own, ceil(queue_ms / 1000) s (or etcd's minimum), kept
//     alive by the writer's later attempts (a shorter queue_ms, near the end of its wait, moves
//     it to a new, shorter lease) and revoked once it acquires (its acquire transaction deletes
//     the key). A writer that gave up or died: the lease runs out. While any announcement
//     stands, shared acquires fail their compare.
//   Refused: holder_ttl_ms is the earliest time-to-live among the blocking keys' leases
//     (exclusive: K and every hold; shared: K and announcements; semaphore: the permits), -1
//     when none of them has a lease.
//   Waiting: the watch covers [K, K\x01): a hold's or an announcement's deletion wakes waiters.
//   Mixing with a dlock built before kinds: its exclusive acquires do not look at hold keys.
//
// Several names (Backend::TryAcquireMany): exclusive holds without job rules, all or none, in one
//   transaction: for every name LockTxn's exclusive compare (K absent, no marker, no hold key),
//   then a put of every K on the shared lease, and the deletion of every announcement of ours.
//   Every key is created at the transaction's revision: the holds share one token (tokens are
//   per name; each name's still rises). At most 32 names (three compares each, under etcd's
//   --max-txn-ops of 128 by default). A refusal reads nothing: the caller takes the names one
//   at a time, in bytewise order, which says who is in the way. An unknown outcome is given back
//   as a single acquire's is (its lease no longer used for new locks).
//
// Break (an operator's takeover; Backend::Break). Two more kinds of key:
//   K \0 "c"                    the closed marker: no owner, value = what left it ("broken"),
//                               on a lease of its own whose TTL is the closed time
//   P \0 "broken" \0 NAME \0 T   a break record (P = the prefix): T = the broken hold's token,
//                               20 decimal digits (so the keys sort by token), value = the
//                               operator's reason; on a lease of about a day (kBrokenRecordMs)
// A record's key starts with P + NUL, which no name's key does (a name is a non-empty C
// string), so records lie outside every range read for holders and waiters and every watch.
//   A break reads [K, K\x01) and the name's records in one read-only transaction (revision R),
//   asks the TTL of every broken hold's lease and (unless now) of an earlier break's marker,
//   grants a new marker's lease when one is needed (see "Closed time"), then one transaction,
//   if K, the hold keys [K\0h, K\0i), the marker and the records were not created or changed
//   after R: deletes K and every hold key; deletes the old marker, puts the new one over it,
//   or leaves it as it stands; puts a record per broken hold and deletes the records beyond
//   the kMaxBrokenRecords newest. Lost races read again (a few rounds). The deletions wake
//   waiters (DELETE events in the watch's range); the next token is the create revision of a
//   later put, greater than the break's revision, so greater than every broken holder's. A
//   broken holder's next renewal finds its key gone from its lease's keys (or, with no lease,
//   not its own), its extend, release or value change fails its create-revision compare:
//   NotHeld, and the core's Inspect finds its token among the records.
//   Closed time: the longest any broken holder may still think it holds. A holder's local
//   validity ends at most lease_ms after its last renewal was sent, and lease_ms is at most the
//   lease's granted TTL less its spare second; a renewal sent before the break may still land
//   after the TTL was read, so per lease the time is max(remaining TTL + 1 s (etcd rounds it
//   down), granted TTL - 1 s). An earlier break's marker (value "broken", on a lease) still
//   standing keeps what is left of its time too, since the holders that break broke may not
//   have heard yet: the closed time is the max of both. When the earlier marker's remaining
//   TTL (whole seconds, rounded down: a lower bound) already covers the broken holds, it is
//   left as it stands and the break reports what is left of it; else a new marker replaces it,
//   its time at least the earlier one's TTL + 1 s. The new marker's lease asks the closed
//   time, rounded up to whole seconds, plus a spare second for the time until the transaction
//   commits (kept alive once after it when that took longer); etcd may grant more (its
//   minimum TTL): the break reports what the server holds. With now, any marker goes and the
//   name is free at once (closed_ms 0); without it, so does a marker that is no break's
//   (another value, or no lease: not dlock's) when no broken hold needs one. While the marker
//   stands, every acquire's transaction fails its compare (the marker's create_revision must
//   be 0), and the refusal says closed_by and the marker lease's TTL as holder_ttl_ms; the
//   marker's deletion when its lease ends wakes waiters.
//   A break also deletes every job rule's marker (below): the name is then closed by its own
//   marker alone, or free.
//
// Job rules (LockRequest::min_hold_ms, lock_delay_ms; kCapMinHold, kCapLockDelay). One marker
// per hold and rule, with no owner, beside the break's marker (so [K\0c, K\0d) is every marker):
//   K \0 "c" \0 "m" \0 ID      min hold: value "min_hold", on a lease of its own, never kept alive
//   K \0 "c" \0 "d" \0 ID      lock-delay: value "lock_delay", on a lease of its own, kept alive
//                              with the hold's by its renewals, that outlives the hold's
// (ID: the hold's, as in "Kinds".) A won acquire with rules grants their leases and puts the
//   markers in a transaction conditional on its hold key still being its own, before it
//   returns: a holder whose acquire returned has its markers standing. When that transaction
//   fails or its answer is lost, the hold is given back (deleted with the markers, in the
//   background, the markers' leases revoked) and the attempt fails: a give-back leaves no marker.
// Every acquire's transaction asks that no marker stand (a range compare over [K\0c, K\0d)),
//   so no acquire gets past one; only a shared hold or a permit that joins holds of its sort
//   standing beside their markers asks instead that the break's marker be absent and that one
//   of those holds still stand (its create_revision). A refusal where no hold stands in the
//   way says closed_by (the rule of the marker that lasts longest) and that marker lease's TTL
//   as holder_ttl_ms; the markers' deletions wake waiters (DELETE events in the watch's range).
// Min hold: the marker's lease is granted after the acquire's commit, for ceil((min_hold +
//   kRuleSpareMs) / 1000) s; if the marker's transaction committed later than that lease's
//   spare allows (grant to answer longer than TTL - min_hold), it is kept alive once after it,
//   which restarts its whole TTL. So the name is not free before acquire + min_hold on the
//   server however the hold ends (a release, a lease shorter than the min hold that ran out, a
//   crash); a release deletes the hold key and leaves the marker: nothing is handed over.
// Lock-delay: the marker's lease TTL is the hold lease's (as granted, which etcd may have
//   raised) + ceil(delay / 1000) + 1 s; it is kept alive with the hold's lease by every renewal
//   (a failed keepalive of it fails the renewal, a lease etcd no longer knows is a lost lock),
//   and granted anew when an extend changes the lease's length (an extend to no expiry deletes
//   it: such a hold never ends uncleanly). Once the holder stops renewing (a crash, a lost
//   lock), both leases run out, the marker's at least the delay after the hold's. A release
//   deletes the marker with the hold key in one transaction, and revokes its lease: a clean end
//   leaves no delay. Shared holders each keep their own marker: the longest delay stands last.
// Rounding: etcd TTLs are whole seconds (and etcd may raise a small one), so the name may stay
//   closed up to about 1 s (min hold) or 2 s (lock-delay) longer than the rule asks, never less,
//   plus etcd's expiry pass (up to 500 ms); Inspect and refusals report the marker lease's TTL
//   (whole seconds, rounded down). Inspect shows the markers as closed_ms / closed_by only while
//   no hold stands (a hold's key outlives its holder's lease_ms by its own rounding).
//
// Release requests (Backend::RequestRelease, kCapReleaseRequest). One more key per name:
//   P \0 "request" \0 NAME      the last request: value = ID "\n" REASON (ID: a fresh
//                               NewOwnerToken, 32 hex; REASON: at most kMaxReasonBytes), on a
//                               shared lease of its own (kRequestLease*: it lives 60 to 120 s)
// Like a break record it starts with P + NUL, so it lies outside [K, K\x01): putting it, and
//   its deletion when its lease ends, wakes no waiter and changes no compare of the name.
//   A request is one transaction: if K exists, put the request key; else, in a nested
//   transaction (etcd 3.3+: compares are ANDed, so the "or" is a nested branch), put it if
//   some key lies in [K\0h, K\0i) (a shared hold or a permit: markers and announcements are
//   no holds). Both branches read [K, K\x01) at the same revision: the holds counted are the
//   holds asked (0: nothing was put). The put's revision is above every asked hold's token.
// A holder whose options listen watches that one key for PUT events (watches.h), from when its
//   watch is created: a request key left for an earlier holder is not delivered (it was put
//   before). The holders of one client share the watch of a key; one that joins it while it
//   is live hears what arrives from then on (a put still on its way as it joined included, as
//   a pub/sub message on Redis may). A watch whose stream failed resumes after the last
//   revision it saw, so that a request put meanwhile still arrives, unless a new holder joined
//   the watch meanwhile (it must not hear an older request: that watch starts from now).
//
// layout=mutex (mutex_layout.cc): etcd's own lock recipe, the keys of `etcdctl lock`, the v3lock
// service and Go's concurrency.Mutex, so that dlock and those tools exclude each other. Lock
// NAME's keys lie under L = prefix + NAME + "/" (prefix "" by default there). A hold's key is
// L + ID (ID as above: unguessable, 32 hex digits; etcdctl's are its lease id, 16 at most), its
// value the owner value [+ NUL + the hold's value], on the client's shared lease. The key with
// the lowest create revision under L holds the lock, whoever wrote it (so NAME also waits for
// the holders of NAME/x, as etcd's recipe does).
//   A single try (or an unfair waiter): one transaction, if no key lies under L: put ours, else
//     read the first. Nothing is left behind when refused.
//   A fair waiter (LockRequest::waiter_id) keeps its key, and so its place in line (Go's
//     tryAcquire): one transaction, if our key is absent: read the last key before, put ours,
//     read the first; else read ours, the last key created before ours, and the first. Ours
//     first: acquired. Otherwise it waits, counted in line_ on its key's lease, until the key
//     right before its own is deleted (the watch of L's deletions tells that one waiter only:
//     WakeOf), or its retry (within a third of its lease) keeps its lease alive. A waiter whose
//     hold has no lease waits on a 10 s one, moved off it when it wins. LeaveLine deletes it.
//   The token is the header revision of the transaction that found our key first (what
//     `etcdctl lock` exports as ETCD_LOCK_REV, and Go's Mutex.Header().Revision): above every
//     earlier holder's, whose key was deleted before. Not the key's create revision, which
//     does not rise across holders of either tool. The create revision is the owner check
//     (EtcdLockData::owned_revision), as in dlock's layout. Inspect cannot know a holder's
//     token: it shows 0 (unknown), the first key's owner label, or "etcd lock key K" for
//     another tool's key, and the key's ID as its hold id (observers tell leaders apart by it).
//   Exclusive only: no shared holds, semaphores, job rules, breaks or release requests
//     (Capabilities); several names are taken one at a time, each in its own line.
#ifndef DLOCK_ETCD_LOCK_PROTOCOL_H_
#define DLOCK_ETCD_LOCK_PROTOCOL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/backend.h"
#include "etcd/transport.h"

namespace dlock::etcd {

// What the backend keeps of a held lock.
struct EtcdLockData : BackendLockData {
  EtcdLockData(int64_t l, std::string k) : key(std::move(k)), lease(l) {}
  const std::string key;               // the hold's key: K, or a shared hold's or permit's
  std::atomic<int64_t> lease;          // the etcd lease the key hangs on; 0: none
  std::atomic<bool> counted{true};     // in LockProtocol::attached_ (until released or lost)
  // The key's create revision, which owner checks compare, when it is not the token (layout=
  // mutex: the token is a read's revision); 0: the token is.
  int64_t owned_revision = 0;
  // Lock-delay ("Job rules"): the marker's key and its own lease (0: none), and the TTL that
  // lease was asked for (an extend to another length grants a new one). Set before the acquire
  // returns; the lease changes on the heartbeat's turn only (extends and renewals never overlap).
  std::string delay_key;
  // The min hold's marker key ("" = none): a release leaves it, unless the hold is given back
  // (LockState::given_back: an acquire nobody took leaves no rules behind).
  std::string min_key;
  std::atomic<int64_t> delay_lease{0};
  std::atomic<int64_t> delay_ttl_s{0};
  // A move of the marker to delay_lease whose outcome stayed unknown: the marker may still hang
  // on an earlier lease (left to run out, never revoked). The next renewal puts it over on
  // delay_lease again (the put is idempotent); an extend moves it afresh.
  std::atomic<bool> delay_unsettled{false};
};

// A hold's ID: the first 16 bytes of SHA-256(owner value), in hex.
std::string HoldId(const std::string& owner_value);
// A hold key's value: the owner value, then NUL and the value stored with the hold when it has
// one (an owner value is a C string: it holds no NUL); and its two parts.
std::string Stored(const std::string& owner_value, const std::string& value);
std::string_view OwnerPart(std::string_view stored);
std::string_view ValuePart(std::string_view stored);

// The lease length in whole seconds a lock of lease_ms gets (before etcd's own minimum).
int64_t LeaseTtlSeconds(uint64_t lease_ms);

// A release request key's value ("Release requests"), and what a watch reads back from one:
// false for a value dlock did not write (no id, or an id over kMaxRequestIdBytes); a reason
// over kMaxReasonBytes is cut there.
inline constexpr size_t kMaxRequestIdBytes = 64;
std::string EncodeReleaseRequest(const std::string& id, const std::string& reason);
bool DecodeReleaseRequest(std::string_view value, std::string* id, std::string* reason);

enum class LineWake { kNone, kHandOver, kRelease };

class LockProtocol {
 public:
  explicit LockProtocol(const EtcdConfig* config) : config_(config) {}

  using Done = std::function<void(Status)>;
  void Acquire(Transport* t, const LockRequest& request, TimePoint deadline,
               std::function<void(Status, AcquireAttempt)> done);
  // Several exclusive holds without job rules, all or none, in one transaction (see "Several
  // names" above): done(Ok, one acquired attempt per request), or done(Ok, {}) when it was
  // refused (or etcd had forgotten the shared lease), nothing held: the caller takes the names
  // one at a time, which says who is in the way.
  void AcquireMany(Transport* t, std::vector<LockRequest> requests, TimePoint deadline,
                   std::function<void(Status, std::vector<AcquireAttempt>)> done);
  void Extend(Transport* t, std::shared_ptr<const LockState> lock, uint64_t lease_ms, TimePoint deadline,
              Done done);
  void Release(Transport* t, std::shared_ptr<const LockState> lock, TimePoint deadline, Done done);
  // Replaces the value stored with the hold (in its key, after the owner value).
  void SetValue(Transport* t, std::shared_ptr<const LockState> lock, const std::string& value, TimePoint deadline,
                Done done);
  // One round for several locks: per etcd lease, a keepalive and a look at the keys on it.
  // done(k, status) once per lock k.
  void Renew(Transport* t, const std::vector<std::shared_ptr<const LockState>>& locks, TimePoint deadline,
             std::function<void(size_t, Status)> done);
  void Inspect(Transport* t, const std::string& name, TimePoint deadline,
               std::function<void(Status, LockInfo)> done);
  // Backend::Break (see "Break" above).
  void Break(Transport* t, const std::string& name, const std::string& reason, bool now, TimePoint deadline,
             std::function<void(Status, BreakResult)> done);
  // Backend::RequestRelease (see "Release requests" above): *asked holds were asked.
  void RequestRelease(Transport* t, const std::string& name, const std::string& reason, TimePoint deadline,
                      std::function<void(Status, uint32_t asked)> done);
  // The key the requests for name are put at (what a listening holder watches).
  std::string RequestKey(const std::string& name) const;
  // Revokes the client's leases that locks hang on (and with them their keys), and releases
  // the locks that have none: a closing client's release of everything, in few requests.
  void ReleaseAll(Transport* t, const std::vector<std::shared_ptr<LockState>>& locks, TimePoint deadline);
  // A read that proves the cluster answers (and has a leader): Check at open.
  void Probe(Transport* t, TimePoint deadline, Done done);
  // layout=mutex: a fair waiter that stops waiting deletes its key (its place in line).
  void LeaveLine(Transport* t, const LockRequest& request, TimePoint deadline, Done done);
  bool mutex_layout() const { return config_->layout == Layout::kMutex; }
  // layout=mutex: what the deletion of these keys (under the waiter's name) means to a waiter:
  // nothing, a hand-over (the key right before its own went: it may be first now), or a
  // release (the client does not know what was before it: it looks again).
  LineWake WakeOf(const std::string& waiter_id, const std::vector<std::string>& deleted);
  // layout=mutex: the prefix under which lock name's keys lie (NAME + "/").
  std::string LinePrefix(const std::string& name) const { return KeyFor(name) + "/"; }

  std::string KeyFor(const std::string& name) const { return config_->params.prefix + name; }
  // The key a hold of request / of lock lives at (K for an exclusive lock).
  std::string HoldKey(const std::string& name, LockKind kind, uint32_t permits, uint32_t take,
                      const std::string& owner_value) const;
  std::string KeyOf(const LockState& lock) const;

  // How the protocol sends a write in the background, its answer ignored (a give-back, a
  // stray key's deletion): the backend sends it on the loop's transport.
  using BackgroundSend = std::function<void(const std::string& path, std::string body)>;
  void SetBackground(BackgroundSend send) { background_ = std::move(send); }
  // A lock is gone (released, lost): its key no longer counts as one of the client's.
  void Forgotten(const LockState& lock);

 private:
  struct SharedLease {
    int64_t id = 0;
    int64_t ttl_s = 0;
    TimePoint alive_until;  // etcd holds it at least until then: last keepalive's send + TTL
  };
  struct AcquireOp;
  struct BreakOp;
  struct BreakPlan;
  // What a lease lookup found: remaining ms (HolderTtl's meaning) and the TTL it was granted.
  struct LeaseTime {
    int64_t remaining_ms = -2;
    int64_t granted_s = 0;
  };
  using NameKvs = std::shared_ptr<const std::vector<KeyValue>>;
  struct Announcement {  // a waiting writer's own lease
    int64_t id = 0;
    int64_t asked_s = 0;  // the TTL it was granted for (etcd may have given more)
    TimePoint alive_until;
  };
  // A lease for a lock of lease_ms that will outlive an attach made now by lease_ms (0 for
  // lease_ms 0): the shared one, kept alive first when needed, or a new grant.
  void EnsureLease(Transport* t, uint64_t lease_ms, TimePoint deadline,
                   std::function<void(Status, int64_t lease)> done);
  void KeepAlive(Transport* t, int64_t lease, TimePoint deadline, std::function<void(Status, int64_t ttl_s)> done);
  // A keepalive sent at `sent` answered ttl_s: what is known of the lease now.
  void Refreshed(int64_t lease, int64_t ttl_s, TimePoint sent);
  void Forget(int64_t lease);
  void AcquireRound(Transport* t, std::shared_ptr<AcquireOp> op);
  // layout=mutex (mutex_layout.cc): one transaction per attempt; a waiter in line keeps its key.
  void MutexRound(Transport* t, std::shared_ptr<AcquireOp> op);
  void MutexTxn(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease);
  // Our key was found first at revision token: the hold, once the key hangs where the hold's
  // lease says (moved there when a waiter's key hangs elsewhere).
  void MutexWon(Transport* t, std::shared_ptr<AcquireOp> op, int64_t sent_lease, KeyValue mine, int64_t token);
  void InspectMutex(Transport* t, const std::string& name, TimePoint deadline,
                    std::function<void(Status, LockInfo)> done);
  // A waiter's key while it waits in line: counted on the lease it hangs on (once), so that
  // renewals spare it; InLine moves the attempt's count (on sent_lease) there, and notes the
  // key right before it (predecessor; "" unknown). Attempting: an attempt of the waiter leaves;
  // the keys deleted while it is out are kept, and InLine is true when its predecessor is among
  // them (gone before the waiter could listen for it: it reads again). Attempting returns its
  // key's create revision (0: unknown).
  bool InLine(const LockRequest& request, const std::string& key, int64_t sent_lease, const KeyValue& mine,
              std::string predecessor);
  // Returns the lease its key was counted on (-1: none).
  int64_t OutOfLine(const std::string& waiter_id);
  // A refused waiter's place, kept (InLine), and its answer: see mutex_layout.cc.
  void StandInLine(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, const KeyValue& mine,
                   const std::string& predecessor, int64_t holder_lease);
  int64_t Attempting(const std::string& waiter_id);
  // Exclusive and shared: one transaction.
  // join: a shared hold standing beside job rules' markers, which this shared acquire joins
  // ("Job rules"): the compare asks that it still stand instead of that no marker does.
  void LockTxn(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, const KeyValue* join = nullptr);
  // Semaphore: a read, then a transaction; round counts lost races.
  void SemaphoreRound(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, int round);
  // An acquire transaction that failed without an answer: settled by reading the hold key.
  void AcquireUnknown(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, CallResult r);
  // The common failures of an acquire transaction's answer: a lease etcd no longer knows is
  // replaced once (the round starts again), a failed call ends the attempt or settles its
  // unknown outcome. True when handled; otherwise *txn holds the transaction's result.
  bool SettledFailure(Transport* t, const std::shared_ptr<AcquireOp>& op, int64_t lease,
                      CallResult& r, TxnAnswer* txn);
  // Refused: holder_ttl_ms from the blocking keys' leases (0: a lease etcd had no more).
  void RefusedBy(Transport* t, std::shared_ptr<AcquireOp> op, std::vector<int64_t> leases);
  // A refused waiting writer's announcement, best effort; then() runs after it either way.
  void Announce(Transport* t, std::shared_ptr<AcquireOp> op, std::function<void()> then);
  // Puts the announcement on lease, then revokes the writer's replaced lease (0: none).
  void PutAnnouncement(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, int64_t replaced,
                       std::function<void()> then);
  // The writer acquired (or its client closes): its announcement lease goes.
  void WriterDone(const std::string& owner_value);
  // Time to live of each lease (ms; 0 gone, -2 unknown), asked in parallel; the first error.
  void LeaseTtls(Transport* t, const std::vector<int64_t>& leases, TimePoint deadline,
                 std::function<void(Status, std::map<int64_t, LeaseTime>)> done);
  // Refused because the closed marker stands: holder_ttl_ms is its lease's TTL.
  void ClosedRefusal(Transport* t, std::shared_ptr<AcquireOp> op, const KeyValue& marker);
  // The name's keys [K, K\x01) and its break records, in one read (at *revision).
  void ReadName(Transport* t, const std::string& name, TimePoint deadline,
                std::function<void(Status, NameKvs, int64_t revision)> done);
  // The name's break records: P \0 "broken" \0 NAME \0, and the end of their range.
  std::string RecordsBegin(const std::string& name) const;
  std::string RecordsEnd(const std::string& name) const;
  // The break records among kvs (an error for a record dlock did not write).
  Status ReadRecords(const std::string& name, const std::vector<KeyValue>& kvs, std::vector<BrokenRecord>* out) const;
  // What the marker says closed the name (an error for a value dlock did not write).
  Status ReadClosedBy(const std::string& name, const KeyValue& marker, std::string* by) const;
  void BreakRound(Transport* t, std::shared_ptr<BreakOp> op);
  // With the leases' times known: the marker's lease (unless none is needed), the records'.
  void BreakLeases(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan);
  void BreakTxn(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan);
  // An answer that may have been applied: read again; applied when the holds are gone (and
  // our marker stands).
  void BreakUnknown(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan, Status failed);
  void BreakDone(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan);
  // The plan's marker lease will not be used: revoked in the background.
  void DropMarkerLease(BreakPlan& plan);
  // The lease break records hang on: one shared lease, reused while it still has a whole
  // kBrokenRecordMs to live, so that a name broken in a loop costs few leases.
  void RecordLease(Transport* t, TimePoint deadline, std::function<void(Status, int64_t lease)> done);
  void ForgetRecordLease(int64_t lease);
  // The lease request keys hang on: one shared lease, reused while it has kRequestKeepMs left.
  void RequestLease(Transport* t, TimePoint deadline, std::function<void(Status, int64_t lease)> done);
  void ForgetRequestLease(int64_t lease);
  // The request's transaction on lease; retried: after a lease etcd no longer knew.
  void RequestTxn(Transport* t, const std::string& name, std::string value, int64_t lease, TimePoint deadline,
                  bool retried, std::function<void(Status, uint32_t)> done);
  // Reads the key: *ours when it holds owner_value at create_revision (0: any revision).
  void ReadOwner(Transport* t, const std::string& key, const std::string& owner_value, int64_t create_revision,
                 TimePoint deadline, std::function<void(Status, bool ours, KeyValue kv)> done);
  // The holder's remaining lease in ms: -1 none, 0 gone; and the TTL it was granted (s; 0: none).
  void HolderTtl(Transport* t, int64_t lease, TimePoint deadline,
                 std::function<void(Status, int64_t ttl_ms, int64_t granted_s)> done);
  void ChangeLease(Transport* t, std::shared_ptr<const LockState> lock, int64_t lease, TimePoint deadline,
                   bool retried, Done done);
  void ReleaseRound(Transport* t, std::shared_ptr<const LockState> lock, TimePoint deadline, Done done);
  // The acquire won: the key hangs on kv_lease (normally the lease it was sent with). A hold
  // with job rules gets its markers first (PutRules).
  void Won(Transport* t, std::shared_ptr<AcquireOp> op, int64_t sent_lease, int64_t kv_lease, int64_t token,
           int64_t owned_revision = 0);
  // "Job rules": grants the markers' leases and puts the markers if the hold is still ours.
  void PutRules(Transport* t, std::shared_ptr<AcquireOp> op, AcquireAttempt attempt, int64_t token);
  // Refused because job rules' markers close the name and no hold stands in the way.
  void RulesRefusal(Transport* t, std::shared_ptr<AcquireOp> op, std::vector<const KeyValue*> markers);
  // A lock-delay's TTL for a hold of lease_ms on hold_lease: see "Job rules".
  int64_t DelayTtlSeconds(uint64_t lease_ms, int64_t hold_lease, uint64_t delay_ms);
  // After an extend: the lock-delay marker kept alive, or moved to a lease for the new length.
  void ExtendDelay(Transport* t, std::shared_ptr<const LockState> lock, uint64_t lease_ms, TimePoint deadline,
                   Done done);
  // The release transaction of a hold (with its lock-delay marker, when it has one).
  std::string ReleaseTxn(const LockState& lock) const;
  // A lease granted for a marker that will not be used (or no longer): revoked in the background.
  void DropLease(int64_t lease);
  // The client's keys on each lease: held locks, and acquires in flight.
  void Count(int64_t lease, const std::string& key);
  void Uncount(int64_t lease, const std::string& key);
  // Deletes in the background the keys on lease that the client does not count.
  void SweepStrays(int64_t lease, const std::unordered_set<std::string>& keys);

  const EtcdConfig* config_;
  std::mutex mu_;
  std::map<int64_t, SharedLease> leases_;  // by the TTL asked for, in seconds
  std::map<int64_t, std::multiset<std::string>> counted_;  // lease -> the client's keys on it
  std::map<std::string, Announcement> announces_;          // by the waiting writer's owner value
  struct LineEntry {              // layout=mutex: a waiter's place
    std::string key;
    bool counted = false;         // its key counted on lease
    int64_t lease = 0;            // what its key hangs on
    int64_t create_revision = 0;  // its key's (0: unknown)
    std::string predecessor;      // the key right before it ("": unknown)
    bool asking = false;          // an attempt is out
    std::vector<std::string> gone;  // keys deleted meanwhile (at most kMaxGone)
    bool gone_overflow = false;     // more than that
  };
  std::map<std::string, LineEntry> line_;                  // by waiter id
  SharedLease record_lease_;                               // RecordLease's
  SharedLease request_lease_;                              // RequestLease's
  BackgroundSend background_;
};

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_LOCK_PROTOCOL_H_
