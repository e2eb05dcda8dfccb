#include "redis/lock_ops.h"

namespace dlock::redis {
namespace {

Status ReadAcquire(const redisReply* r, const std::string& server, const std::string& name,
                   AcquireAttempt* out) {
  Status s = ParseAcquireReply(r, server, name, out);
  if (s.ok() && out->acquired && out->fencing_token > kMaxFencingToken) {
    const uint64_t token = out->fencing_token;
    *out = AcquireAttempt();
    return Status::BackendError(server + " issued fencing token " + std::to_string(token) +
                                " for lock '" + name +
                                "', past 2^53 - 1 (9007199254740991), the greatest dlock accepts: "
                                "refused (check the name's :fence counter there)");
  }
  return s;
}

Status ReadOwned(const redisReply* r, const std::string& server, const std::string& name,
                 NoResult*) {
  return ParseOwnedReply(r, server, name);
}

Status ReadInspect(const redisReply* r, const std::string& server, const std::string&,
                   LockInfo* out) {
  Status s = ParseInspectReply(r, server, out);
  for (HolderInfo& h : out->holders) {
    if (h.fencing_token > kMaxFencingToken) h.fencing_token = 0;  // not a token dlock issued: unknown
  }
  return s;
}

// release.lua and extend.lua: the exclusive holder's key, or an entry among the holds.
const char* HoldSort(const HoldRef& hold) { return hold.exclusive ? "exclusive" : "hold"; }
// Only the keys the call names are built: a heartbeat renews thousands of holds at once. A hold
// with a value names the value key last.
std::vector<std::string> HoldKeys(const std::string& prefix, const HoldRef& hold) {
  std::string holder = LockKeys::Holder(prefix, hold.name);
  std::vector<std::string> keys;
  if (hold.exclusive) {
    keys.push_back(holder);
  } else {
    keys.push_back(holder + LockKeys::kHolds);
    keys.push_back(holder + LockKeys::kHoldData);
  }
  if (hold.has_value) keys.push_back(holder + LockKeys::kValue);
  return keys;
}

// acquire.lua's keys, holder first; a single exclusive try names the first three only, and the
// value key when it stores a value. Every other call names the value key (last): it may find
// expired holds whose values are to go.
std::vector<std::string> AcquireKeys(const std::string& holder, bool in_line,
                                     bool single_exclusive_try, bool with_value) {
  std::vector<std::string> keys{holder, holder + LockKeys::kFence, holder + LockKeys::kHolds};
  if (!single_exclusive_try) {
    keys.push_back(holder + LockKeys::kHoldData);
    keys.push_back(holder + LockKeys::kWriter);
  }
  if (in_line) {
    keys.push_back(holder + LockKeys::kLine);
    keys.push_back(holder + LockKeys::kLineData);
  }
  if (!single_exclusive_try || with_value) keys.push_back(holder + LockKeys::kValue);
  return keys;
}
// acquire.lua's ARGV[5..7] when the value key is named: the waiter's id, the value, "1".
void NameValueKey(std::vector<std::string>* args, const std::string& waiter_id,
                  const std::string& value) {
  args->resize(4);
  args->push_back(waiter_id);
  args->push_back(value);
  args->push_back("1");
}
ScriptCall WidenAcquire(const ScriptCall& call) {
  ScriptCall all = call;
  all.keys = AcquireKeys(call.keys[0], false, false, true);
  if (all.args.size() < 7) NameValueKey(&all.args, "", "");
  return all;
}

// release.lua's keys for an exclusive hold: the holder and the line, and to hand the lock
// over, the counter, the line's data, the writer announcement and the value key.
std::vector<std::string> ReleaseKeys(const std::string& holder) {
  return {holder, holder + LockKeys::kLine, holder + LockKeys::kFence,
          holder + LockKeys::kLineData, holder + LockKeys::kWriter, holder + LockKeys::kValue};
}

}  // namespace

Op<AcquireAttempt> AcquireOp(const std::string& prefix, const LockRequest& request,
                             int wait_replicas) {
  const std::string holder = LockKeys::Holder(prefix, request.name);
  // A waiter in the fair line whose wait has run out also sends queue_ms 0, but its id needs the
  // line's keys (without them the script fails half-way, its SET already made).
  const bool single_exclusive_try = request.kind == LockKind::kExclusive && request.permits == 0 &&
                                    request.queue_ms == 0 && request.waiter_id.empty();
  // A single try at the exclusive hold needs the holder, the counter, and the holds only to
  // see that there are none.
  std::vector<std::string> keys = AcquireKeys(holder, !request.waiter_id.empty(),
                                              single_exclusive_try, !request.value.empty());
  std::vector<std::string> args{request.owner_value, std::to_string(request.lease_ms),
                                ScriptSort(request.kind, request.permits),
                                std::to_string(request.queue_ms)};
  if (keys.back() == holder + LockKeys::kValue) {
    NameValueKey(&args, request.waiter_id, request.value);
  } else if (!request.waiter_id.empty()) {
    args.push_back(request.waiter_id);
  }
  return {{ScriptId::kAcquire, std::move(keys), std::move(args), wait_replicas},
          request.name,
          ReadAcquire,
          single_exclusive_try ? WidenAcquire : nullptr};
}

Op<NoResult> ReleaseOp(const std::string& prefix, const HoldRef& hold, bool sharded) {
  const std::string holder = LockKeys::Holder(prefix, hold.name);
  std::vector<std::string> args{hold.owner_value, holder + LockKeys::kChannel,
                                sharded ? "1" : "0", HoldSort(hold)};
  if (hold.has_value) {
    args.push_back("");  // ARGV[5]: no waiter leaves the line (LeaveLineOp sets it)
    args.push_back("1");
  }
  if (!hold.exclusive) {
    return {{ScriptId::kRelease, HoldKeys(prefix, hold), std::move(args)}, hold.name, ReadOwned};
  }
  // Every key at once, the hand-over's too: a contended fair release then costs one round trip,
  // not two (the script answering {3} for the rest). Measured: hand-overs +12 % with 4 waiters
  // and +4 % with 32, uncontended cycles -1 % (bench/README.md).
  return {{ScriptId::kRelease, ReleaseKeys(holder), std::move(args)},
          hold.name,
          ReadOwned};
}

Op<NoResult> LeaveLineOp(const std::string& prefix, const LockRequest& request, bool sharded) {
  Op<NoResult> op = ReleaseOp(prefix, HoldRef::Of(request), sharded);  // every key: it may hand over
  op.call.args.resize(4);
  op.call.args.push_back(request.waiter_id);
  op.call.args.push_back(request.value.empty() ? "0" : "1");
  return op;
}

bool AsksForAllKeys(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
         r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 3;
}

Op<NoResult> ExtendOp(const std::string& prefix, const HoldRef& hold, uint64_t lease_ms) {
  // A hold with a value names the value key last (HoldKeys): its expiry follows the hold's.
  return {{ScriptId::kExtend,
           HoldKeys(prefix, hold),
           {hold.owner_value, std::to_string(lease_ms), HoldSort(hold)}},
          hold.name,
          ReadOwned};
}

Op<NoResult> FenceOp(const std::string& prefix, const HoldRef& hold, uint64_t token) {
  const std::string holder = LockKeys::Holder(prefix, hold.name);
  return {{ScriptId::kFence,
           {holder + LockKeys::kFence, holder + LockKeys::kHoldData},
           {std::to_string(token), hold.exclusive ? std::string() : hold.owner_value}},
          hold.name,
          ReadOwned};
}

Op<NoResult> SetValueOp(const std::string& prefix, const HoldRef& hold, const std::string& value,
                        bool sharded) {
  HoldRef named = hold;
  named.has_value = true;  // the script names the value key last, always
  return {{ScriptId::kSetValue,
           HoldKeys(prefix, named),
           {hold.owner_value, value, HoldSort(hold), LockKeys::Channel(prefix, hold.name), sharded ? "1" : "0"}},
          hold.name,
          ReadOwned};
}

Op<LockInfo> InspectOp(const std::string& prefix, const std::string& name) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kInspect,
           {std::move(keys.holder), std::move(keys.fence), std::move(keys.holds),
            std::move(keys.hold_data), std::move(keys.value)},
           {}},
          name,
          ReadInspect};
}

}  // namespace dlock::redis
