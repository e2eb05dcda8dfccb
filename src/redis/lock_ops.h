// The lock operations on Redis, each written once: which script it calls with which keys and
// arguments, and how its reply reads. Run and RunAsync send any of them over any Channel (one
// node today; a cluster router or a quorum later), so the blocking and async paths of every
// topology share both halves.
#ifndef DLOCK_REDIS_LOCK_OPS_H_
#define DLOCK_REDIS_LOCK_OPS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "redis/topology/channel.h"

namespace dlock::redis {

// The result of an operation that has nothing to say beyond its status.
struct NoResult {};

// The greatest fencing token dlock accepts, 2^53 - 1: the scripts compare tokens as Lua numbers
// (doubles), exact only that far. The scripts issue none above it; a reply with one (a broken
// or hostile server, a Redlock master whose counter was set past it) is refused, so that it is
// never handed out nor written back to other masters. Today's tokens (µs since 1970) are about
// 2^50.8: the limit is 2^53 µs, in the year 2255.
constexpr uint64_t kMaxFencingToken = (uint64_t{1} << 53) - 1;

// One operation on one lock: the script call, and how its reply reads into an R.
template <typename R>
struct Op {
  using ReadFn = Status (*)(const redisReply* reply, const std::string& server,
                            const std::string& name, R* out);
  ScriptCall call;
  std::string name;  // the lock's, for messages
  ReadFn read;
  // Each key a script names costs the client a string, and the server a little on every call
  // (about 0.05 µs, measured on Redis 7.0); in Redis Cluster a key named but missing makes the
  // script refuse while its slot migrates. The common case names only the keys it needs, and a
  // script that finds the uncommon one (holds to look at, a value to hand over) answers
  // AsksForAllKeys before it writes anything; the call is then made again, as widen makes it
  // from the first (null: never).
  using WidenFn = ScriptCall (*)(ScriptCall call);
  WidenFn widen = nullptr;
  // The call with every key it may need, at once (answers ignored: no {3} can be followed).
  ScriptCall TakeAllKeys() && { return widen != nullptr ? widen(std::move(call)) : std::move(call); }
};

// A script's {3}: "call me again with all the keys".
bool AsksForAllKeys(const redisReply* reply);

// One hold, as release and extend find it.
struct HoldRef {
  // Job rules (a min hold, a lock-delay: markers in the holds key, acquire.lua): none, kept by
  // the hold (a release is a clean end), or given back (an acquire that did not happen, from the
  // request: its markers go with it).
  enum class Rules { kNone, kKept, kGivenBack };
  std::string name;
  std::string owner_value;
  bool exclusive = true;  // the exclusive hold, or a shared or semaphore one
  bool has_value = false; // the server may keep a value with it
  Rules rules = Rules::kNone;
  uint64_t lock_delay_ms = 0;  // renewals move its marker
  // A semaphore's: its release names the line, to hand the permits it frees to waiters in it.
  bool semaphore = false;
  static HoldRef Of(const LockState& lock) {
    return {lock.name, lock.owner_value, lock.kind == LockKind::kExclusive && lock.permits == 0,
            lock.has_value.load(),
            RulesOf(lock.min_hold_ms, lock.lock_delay_ms, lock.given_back.load() ? Rules::kGivenBack : Rules::kKept),
            lock.lock_delay_ms, lock.permits != 0};
  }
  static HoldRef Of(const LockRequest& request) {
    return {request.name, request.owner_value,
            request.kind == LockKind::kExclusive && request.permits == 0, !request.value.empty(),
            RulesOf(request.min_hold_ms, request.lock_delay_ms, Rules::kGivenBack),
            request.lock_delay_ms, request.permits != 0};
  }
  static Rules RulesOf(uint64_t min_hold_ms, uint64_t lock_delay_ms, Rules some) {
    return min_hold_ms != 0 || lock_delay_ms != 0 ? some : Rules::kNone;
  }
};

// acquire.lua: acquired with a token, or the holder's remaining lease. wait_replicas: see
// ScriptCall.
Op<AcquireAttempt> AcquireOp(const std::string& prefix, const LockRequest& request,
                             int wait_replicas = 0);
// release.lua: Ok, or NotHeld when the owner no longer holds it. Hands an exclusive hold to the
// first fair waiter in line, or wakes the waiters (with SPUBLISH when sharded).
Op<NoResult> ReleaseOp(const std::string& prefix, const HoldRef& hold, bool sharded = false);
// release.lua for a fair waiter that stops waiting: leaves the line, and releases (hands on)
// what a release handed it meanwhile. NotHeld when nothing was.
Op<NoResult> LeaveLineOp(const std::string& prefix, const LockRequest& request, bool sharded = false);
// extend.lua: sets the lease (0 = no expiry); Ok or NotHeld.
Op<NoResult> ExtendOp(const std::string& prefix, const HoldRef& hold, uint64_t lease_ms);
// fence.lua: raises the fence counter to at least token, and sets a shared hold's token
// (Redlock's write-back); Ok.
Op<NoResult> FenceOp(const std::string& prefix, const HoldRef& hold, uint64_t token);
// set_value.lua: replaces the value stored with the hold ("" removes it); Ok or NotHeld.
Op<NoResult> SetValueOp(const std::string& prefix, const HoldRef& hold, const std::string& value,
                        bool sharded = false);
// inspect.lua: who holds it, and any marker and break records.
Op<LockInfo> InspectOp(const std::string& prefix, const std::string& name);
// break.lua: deletes every hold and marker, records the broken tokens with reason, and (unless
// now) closes the name until their leases would have ended; wakes the waiters (SPUBLISH when
// sharded).
Op<BreakResult> BreakOp(const std::string& prefix, const std::string& name,
                        const std::string& reason, bool now, bool sharded = false);

// request_release.lua: publishes 'request\n' + id + '\n' + reason on the release channel
// (SPUBLISH when sharded) when the name has holders; the result is how many.
struct Asked {
  uint32_t holds = 0;
};
Op<Asked> RequestReleaseOp(const std::string& prefix, const std::string& name,
                           const std::string& request_id, const std::string& reason,
                           bool sharded = false);

// acquire_many.lua: one try at every request at once, all or none, where one server keeps every
// name. Read, either every attempts[k] is acquired, or none is held and attempts[refused] says
// why the first one refused was not (the names before it were given back).
struct ManyAttempt {
  std::vector<AcquireAttempt> attempts;
  size_t refused = 0;
};
ScriptCall AcquireManyCall(const std::string& prefix, const std::vector<LockRequest>& requests,
                           int wait_replicas = 0);
Status ReadAcquireMany(const redisReply* reply, const std::string& server,
                       const std::vector<LockRequest>& requests, ManyAttempt* out);

// release_many.lua: every hold released in one call, where one server keeps every name; each
// hold's answer (Ok, or NotHeld) in (*each)[k].
ScriptCall ReleaseManyCall(const std::string& prefix, const std::vector<HoldRef>& holds);
Status ReadReleaseMany(const redisReply* reply, const std::string& server,
                       const std::vector<HoldRef>& holds, std::vector<Status>* each);

// Blocking, any thread.
template <typename R>
Status Run(Channel* channel, const Op<R>& op, R* out) {
  ReplyPtr reply;
  Status s = channel->Eval(op.call, &reply);
  if (s.ok() && op.widen != nullptr && AsksForAllKeys(reply.get())) {
    s = channel->Eval(op.widen(op.call), &reply);
  }
  return s.ok() ? op.read(reply.get(), channel->server(), op.name, out) : s;
}

// Loop thread; done(const Status&, R) runs once, on the loop thread. A template rather than a
// std::function: a heartbeat round makes one of these per held lock.
template <typename R, typename Done>
void RunAsync(Channel* channel, Op<R> op, Done&& done) {
  auto finish = [channel, read = op.read, name = std::move(op.name),
                 done = std::forward<Done>(done)](redisReply* reply, const Status& error) mutable {
    R out{};
    Status s = error.ok() ? read(reply, channel->server(), name, &out) : error;
    done(s, std::move(out));
  };
  if (op.widen == nullptr) {
    channel->EvalAsync(op.call, std::move(finish));
    return;
  }
  // Kept for the widened call, shared rather than copied (its keys and arguments).
  auto call = std::make_shared<const ScriptCall>(std::move(op.call));
  channel->EvalAsync(*call, [channel, call, widen = op.widen,
                             finish = std::move(finish)](redisReply* reply,
                                                         const Status& error) mutable {
    if (!error.ok() || !AsksForAllKeys(reply)) return finish(reply, error);
    channel->EvalAsync(widen(*call), std::move(finish));
  });
}

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_LOCK_OPS_H_
