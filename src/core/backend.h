// What a backend does for the generic client. The client owns the
// waiting policy, lock states and heartbeat scheduling; a backend owns its wire protocol.
#ifndef DLOCK_CORE_BACKEND_H_
#define DLOCK_CORE_BACKEND_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/lock_state.h"
#include "core/status.h"

namespace dlock {

// Capability bits (dlock.h's DLOCK_CAP_*, same values).
constexpr uint32_t kCapFencingStrict = 0x1;  // tokens strictly increasing under every listed fault
constexpr uint32_t kCapNotifies = 0x2;       // waiters are woken by releases, not only retries
constexpr uint32_t kCapShared = 0x4;
constexpr uint32_t kCapPermits = 0x8;
constexpr uint32_t kCapFair = 0x10;          // waiting exclusive acquires are served in arrival order
constexpr uint32_t kCapObservePush = 0x20;   // observers hear releases, hand-overs and new values
constexpr uint32_t kCapBreak = 0x40;         // Break: holds deleted, holders told, the name kept closed
constexpr uint32_t kCapMinHold = 0x80;       // LockRequest::min_hold_ms
constexpr uint32_t kCapLockDelay = 0x100;    // LockRequest::lock_delay_ms
constexpr uint32_t kCapReleaseRequest = 0x200;  // RequestRelease reaches holders that listen

// How long a break's record stays on the server, so that a broken holder's next renewal, extend
// or release can say why it was refused (the cause "broken" and the operator's reason). A holder
// that has heard nothing for a day is told "deleted" instead.
constexpr int64_t kBrokenRecordMs = 24 * 3600 * 1000;
// The most break records kept per name (the newest): a name broken in a loop stays small.
constexpr size_t kMaxBrokenRecords = 64;

// One hold asked of a backend. The core validates it, including the kind against the
// backend's capabilities, before the backend sees it.
struct LockRequest {
  std::string name;
  LockKind kind = LockKind::kExclusive;
  uint32_t permits = 0;     // semaphore of n permits; 0 = not a semaphore
  uint32_t take = 1;        // permits this hold counts for, 1..permits (dlock_options_set_take)
  std::string owner_label;  // for people and tools ("" = none)
  std::string owner_value;  // what the server stores and checks: secret token [+ "|" + label]
  std::string value;        // stored with the hold (any bytes, at most kMaxValueBytes); "" = none
  uint64_t lease_ms = 0;    // 0 = no expiry
  // Job rules (kCapMinHold, kCapLockDelay; 0 = none). min_hold_ms: however the hold ends (an
  // early release, an expiry), the name is not free before the acquire + min_hold_ms on the
  // server's clock; an early release leaves a marker with no owner (LockInfo::closed_by
  // "min_hold"). lock_delay_ms: after the hold ends uncleanly (its lease ran out), the name
  // stays closed this long more ("lock_delay"); a release ends it cleanly, with no delay.
  // Renewals and extends keep the delay past the new lease, so the backend's release, renew
  // and extend of the hold see them too (LockState::min_hold_ms, lock_delay_ms).
  uint64_t min_hold_ms = 0;
  uint64_t lock_delay_ms = 0;
  // Writer preference: an exclusive acquire that will wait if refused announces itself for this
  // long, and while the announcement stands no new shared hold is granted. 0 = it gives up
  // when refused (announces nothing). The core sets it before each attempt (WriterQueueMs) and
  // retries within half of it, so a waiting writer's announcement never lapses while it waits
  // and a crashed one's ends on its own.
  uint64_t queue_ms = 0;
  // Fair waiting (backends with kCapFair): an exclusive acquire that will wait takes its place
  // in a line kept on the server under this public id (WaiterId of the owner value: the id may
  // be published, the owner value never is), and a release hands the lock to the first in
  // line. "" = not in line (a single try, a shared or semaphore hold, or fair off).
  std::string waiter_id;
};

// A snapshot of who holds a name (dlock_inspect).
struct HolderInfo {
  std::string owner;          // label, "" if none
  int64_t remaining_ms = -1;  // -1 = no expiry
  uint64_t fencing_token = 0; // 0 = unknown
  std::string value;          // stored with the hold; "" = none
  std::string hold_id;        // the hold's public id, alike on every server ("" = not given)
  uint32_t take = 1;          // the permits a semaphore's hold took (dlock_options_set_take)
};
// A hold that Break removed, remembered for its owner (see kBrokenRecordMs).
struct BrokenRecord {
  uint64_t fencing_token = 0;
  std::string reason;  // the operator's words; "" = none given
};
struct LockInfo {
  LockKind kind = LockKind::kExclusive;
  uint32_t permits = 0;  // the semaphore's size while it is one; 0 = a lock (or free)
  std::vector<HolderInfo> holders;  // empty = free
  // An owner-less marker that keeps the name closed with no holder: for this many ms more (0 =
  // none), left by closed_by ("broken": a break that waits for the broken holders' leases).
  int64_t closed_ms = 0;
  std::string closed_by;
  // Holds broken lately (at most kMaxBrokenRecords; any order): ClassifyRefusal tells a broken
  // holder why the server refused it. Not part of dlock_inspect's answer.
  std::vector<BrokenRecord> broken;
};

// What Break did: the holds it removed (owner label, token, what was left of its lease; empty
// when nobody held the name), and how long the name now stays closed (closed_ms; 0 = free now,
// closed_by "broken" otherwise).
using BreakResult = LockInfo;

// What a name is while held, in words: "a lock (exclusive or shared holds)" for permits 0, "a
// semaphore of N permits" otherwise.
inline std::string SortWords(uint32_t permits) {
  return permits == 0 ? std::string("a lock (exclusive or shared holds)")
                      : "a semaphore of " + std::to_string(permits) + " permit" +
                            (permits == 1 ? "" : "s");
}
// The refusal of an acquire of the other sort (or another n) than the name's holders: every
// backend says it the same way.
inline Status SortMismatch(const std::string& name, uint32_t held_permits, uint32_t asked_permits) {
  return Status::InvalidArgument("lock '" + name + "' is " + SortWords(held_permits) +
                                 " while held; this acquire asked for " + SortWords(asked_permits));
}

// The label part of an owner value (token "|" label), "" when it has none.
inline std::string OwnerLabel(const std::string& owner_value) {
  size_t bar = owner_value.find('|');
  return bar == std::string::npos ? std::string() : owner_value.substr(bar + 1);
}

struct AcquireAttempt {
  bool acquired = false;
  uint64_t fencing_token = 0;  // when acquired
  // When acquired: what the server says is left of the lease, when it may be less than the
  // lease asked for (the lock was handed over or won before this attempt); -2 = the full lease.
  int64_t remaining_ms = -2;
  int64_t holder_ttl_ms = -2;  // when not: how long until it may be free, -1 never, -2 unknown
  // When not, and not for a holder: why (Redlock: a quorum granted it after its lease's
  // validity ran out); a refusal's message says this instead of naming a holder.
  std::string why_not;
  // When not, because an owner-less marker closes the name (LockInfo::closed_by; holder_ttl_ms
  // is then how long it stays closed): what left it, e.g. "broken".
  std::string closed_by;
  // Backend-specific state of the acquired lock, kept in LockState::backend_data for the
  // backend's later release/extend/renew calls.
  std::shared_ptr<BackendLockData> backend_data;
};

// Told by the backend when a watched lock is released. Called on the loop thread, possibly
// under the backend's own locks: implementations only record and signal, never call back in.
class ReleaseWatcher {
 public:
  virtual ~ReleaseWatcher() = default;
  // The subscription became live (true) or was lost (false).
  virtual void OnWatchReady(bool live) = 0;
  // The lock was released (or a release may have been missed: try again).
  virtual void OnReleased() = 0;
  // Fair waiting: the id this watcher waits under in the server's line ("" = none), and the
  // release that handed it the lock, with the lock's fencing token.
  virtual const std::string& waiter_id() const {
    static const std::string none;
    return none;
  }
  virtual void OnHandedOver(uint64_t /*fencing_token*/) {}
  // An observer (not a waiter): a hand-over to another is a change it hears of, as a release.
  virtual bool hears_every_change() const { return false; }
  // A holder's listener (WatchReleaseRequests): someone asked the holders to let go. id tells
  // one request from another (a request may arrive twice: Redlock's masters each publish it).
  virtual void OnReleaseRequested(const std::string& /*id*/, const std::string& /*reason*/) {}
};

// A blocking waiter's ears: what the backend tells it on the loop thread, kept for the waiting
// thread, which feeds it to its Acquisition.
class WakeSignal : public ReleaseWatcher {
 public:
  struct Heard {
    uint64_t releases = 0;     // releases heard so far (a watch that failed counts as one)
    bool live = false;         // the watch is live
    bool handed_over = false;  // a hand-over heard since the last Wait
  };
  explicit WakeSignal(std::string waiter_id = "") : waiter_id_(std::move(waiter_id)) {}
  const std::string& waiter_id() const override { return waiter_id_; }
  void OnWatchReady(bool live) override {
    std::lock_guard<std::mutex> lock(mu_);
    heard_.live = live;
    cv_.notify_all();
  }
  void OnReleased() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++heard_.releases;
    cv_.notify_all();
  }
  void OnHandedOver(uint64_t /*fencing_token: the confirming attempt gets its own*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    heard_.handed_over = true;
    cv_.notify_all();
  }
  // Waits until something was heard that `seen` does not have, or until `until` (at once when
  // that has passed); returns all that was heard, and forgets the hand-over it reports.
  Heard Wait(const Heard& seen, TimePoint until) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [&] {
      return heard_.handed_over || heard_.releases != seen.releases || heard_.live != seen.live;
    });
    Heard now = heard_;
    heard_.handed_over = false;
    return now;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const std::string waiter_id_;
  Heard heard_;
};

// A non-owning shared_ptr for a backend's blocking calls, which finish before the reference
// could dangle: lets them share code with the async calls, which keep the lock alive.
inline std::shared_ptr<const LockState> BorrowLock(const LockState& lock) {
  return std::shared_ptr<const LockState>(std::shared_ptr<const LockState>(), &lock);
}

struct RenewRequest {
  std::shared_ptr<LockState> lock;
  uint64_t lease_ms;
  TimePoint sent;
};

class RenewSink {
 public:
  virtual ~RenewSink() = default;
  // Called on the loop thread exactly once per renewal: OK, NotHeld, or a transient error.
  virtual void OnRenewed(const RenewRequest& request, const Status& status) = 0;
};

using StatusCallback = std::function<void(const Status&)>;
using AttemptCallback = std::function<void(const Status&, const AcquireAttempt&)>;
using InspectCallback = std::function<void(const Status&, LockInfo)>;

// Blocking calls run on the caller's thread and never need the loop to make progress. Async
// calls are made on the loop thread, and call done exactly once, on the loop thread, never
// before they return.
class Backend {
 public:
  virtual ~Backend() = default;
  // Connects (and authenticates) once, so that open fails early on a bad address.
  virtual Status Check() = 0;
  // One acquire attempt. Blocking; any thread.
  virtual Status TryAcquire(const LockRequest& request, AcquireAttempt* out) = 0;
  // Several names in one call, all or none, where one server keeps them all (one Redis): true
  // when TryAcquireMany does that. Elsewhere names are taken one at a time (Client::AcquireMany).
  virtual bool AcquiresManyAtOnce() const { return false; }
  // One try at every request at once. On Ok, either every (*out)[k] is acquired, or none is
  // held and (*out)[*refused] says why the first one refused was not (those before it were
  // given back, as given back: no job rule's marker stays); *refused == requests.size() when
  // it cannot say (the names one at a time will). An error may have taken some: the backend
  // gives them back. Blocking; any thread.
  virtual Status TryAcquireMany(const std::vector<LockRequest>& /*requests*/,
                                std::vector<AcquireAttempt>* /*out*/, size_t* /*refused*/) {
    return Status::InvalidArgument("this backend takes several names one at a time");
  }
  // Ok, NotHeld when the owner no longer holds it, or an error. Blocking; any thread.
  virtual Status Release(const LockState& lock) = 0;
  // Releases several, each answered in (*out)[k] as Release answers (dlock_release_many): in one
  // call where the backend takes several names at once (AcquiresManyAtOnce). Blocking; any
  // thread.
  virtual void ReleaseMany(const std::vector<const LockState*>& locks, std::vector<Status>* out) {
    out->clear();
    for (const LockState* l : locks) out->push_back(Release(*l));
  }
  // Releases several, best effort (client close). Blocking; any thread.
  virtual void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) {
    for (const auto& l : locks) (void)Release(*l);
  }
  // Acquire, release and extend, async (extend has no blocking form: dlock_extend goes
  // through the heartbeat scheduler, so that extends and renewals of a lock never overlap).
  virtual void TryAcquireAsync(const LockRequest& request, AttemptCallback done) = 0;
  virtual void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) = 0;
  virtual void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms,
                           StatusCallback done) = 0;
  // Loop thread: sends all renewals in one round trip where the protocol allows; reports each
  // to sink->OnRenewed exactly once.
  virtual void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) = 0;
  // Replaces the value stored with a held lock ("" removes it), checked against its owner on
  // the server: Ok, NotHeld (nothing written), or an error. Blocking; any thread.
  virtual Status SetValue(const LockState& lock, const std::string& value) = 0;
  // SetValue, async.
  virtual void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) = 0;
  // Who holds name now; a free name is Ok with no holders. Blocking; any thread.
  virtual Status Inspect(const std::string& name, LockInfo* out) = 0;
  // Inspect, async (observers read with it).
  virtual void InspectAsync(const std::string& name, InspectCallback done) = 0;
  // Break (kCapBreak): deletes every hold of name and any job rule's marker, never a counter, so
  // the next token is still greater than every earlier one; records each broken hold's token
  // with reason (kBrokenRecordMs); and, unless now, keeps the name closed until the broken
  // holds' leases would have ended (a hold with no lease adds nothing), or as long as an earlier
  // break's marker has left, so that a broken holder that has not heard yet never overlaps a
  // new one; now frees the name of every marker. Waiters are woken. Blocking; any thread.
  virtual Status Break(const std::string& name, const std::string& /*reason*/, bool /*now*/,
                       BreakResult* /*out*/) {
    return Status::InvalidArgument("this backend cannot break lock '" + name +
                                   "' (no DLOCK_CAP_BREAK in dlock_client_capabilities)" + CapabilityNote());
  }
  // Release request (kCapReleaseRequest): tells every current holder of name that someone asks
  // it to let go, with reason and a fresh request id; takes nothing. *asked: how many holds
  // there were to ask (0: nobody holds the name, and nothing was sent). Blocking; any thread.
  virtual Status RequestRelease(const std::string& name, const std::string& /*reason*/,
                                uint32_t* /*asked*/) {
    return Status::InvalidArgument("this backend cannot ask the holder of lock '" + name +
                                   "' to let go (no DLOCK_CAP_RELEASE_REQUEST in "
                                   "dlock_client_capabilities)" + CapabilityNote());
  }
  // Any thread: tell watcher (a holder's listener) about release requests for name, through
  // OnReleaseRequested, until UnwatchReleaseRequests returns. Backends that hear of requests
  // some other way (DynamoDB: with each renewal, through LockState::request_listener) do
  // nothing here.
  virtual void WatchReleaseRequests(const std::string& /*name*/, ReleaseWatcher* /*watcher*/) {}
  virtual void UnwatchReleaseRequests(const std::string& /*name*/, ReleaseWatcher* /*watcher*/) {}
  // What the backend promises: kCap* bits, the same as the ABI's DLOCK_CAP_* bits.
  virtual uint32_t Capabilities() const = 0;
  // Said after a refusal for a capability the backend lacks, when it lacks it for a reason the
  // user chose (" (etcd's lock recipe, layout=mutex, has exclusive locks only)"); "" otherwise.
  virtual std::string CapabilityNote() const { return ""; }
  // Whether Watch delivers release notifications (e.g. pub/sub). Without them, waiters rely on
  // holder_ttl_ms and the jittered retry alone, and do not wait for a subscription.
  bool NotifiesReleases() const { return (Capabilities() & kCapNotifies) != 0; }
  // Any thread: tell watcher about releases of name, until Unwatch returns. A backend without
  // release notifications calls nothing.
  virtual void Watch(const std::string& name, ReleaseWatcher* watcher) = 0;
  virtual void Unwatch(const std::string& name, ReleaseWatcher* watcher) = 0;
  // Any thread: a fair waiter that stops waiting (gave up, cancelled, failed) leaves the
  // server's line; if a release handed it the lock meanwhile, that hold is given back (and
  // handed on). Off the loop thread (a blocking waiter) it waits for the answer, so that a
  // release after the acquire returned hands nothing to it; on the loop thread, fire and
  // forget. Backends without kCapFair do nothing.
  virtual void LeaveLine(const LockRequest& /*request*/) {}
  // Loop thread: async requests sent and not answered yet (close waits for them, so that an
  // acquire in flight can be given back on the same connection).
  virtual size_t PendingAsync() const { return 0; }
  // Loop thread: drop connections and fail what is in flight; nothing reconnects afterwards.
  // Called once, at close.
  virtual void ShutdownOnLoop() = 0;
  // Any thread: connections to the backend's servers open now (the dlock_connections gauge;
  // core/connection_count.h); -1 when the backend does not count them (the gauge is left out).
  virtual int64_t OpenConnections() const { return -1; }
};

}  // namespace dlock

#endif  // DLOCK_CORE_BACKEND_H_
