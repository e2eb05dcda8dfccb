#include "redis/lock_ops.h"

#include <cstring>

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

Status ReadBreak(const redisReply* r, const std::string& server, const std::string&,
                 BreakResult* out) {
  Status s = ParseBreakReply(r, server, out);
  for (HolderInfo& h : out->holders) {
    if (h.fencing_token > kMaxFencingToken) h.fencing_token = 0;  // not a token dlock issued
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
  keys.reserve(3);
  if (hold.exclusive) {
    keys.emplace_back();  // the holder, moved in last
  } else {
    keys.push_back(holder + LockKeys::kHolds);
    keys.push_back(holder + LockKeys::kHoldData);
  }
  if (hold.has_value) keys.push_back(holder + LockKeys::kValue);
  if (hold.exclusive) keys[0] = std::move(holder);
  return keys;
}

// acquire.lua's keys, holder first; a single exclusive try names the first three only, and the
// value key when it stores a value. Every other call names the value key (last): it may find
// expired holds whose values are to go.
std::vector<std::string> AcquireKeys(std::string holder, bool in_line, bool single_exclusive_try,
                                     bool with_value) {
  std::vector<std::string> keys;
  keys.reserve(8);
  keys.emplace_back();  // the holder, moved in last
  keys.push_back(holder + LockKeys::kFence);
  keys.push_back(holder + LockKeys::kHolds);
  if (!single_exclusive_try) {
    keys.push_back(holder + LockKeys::kHoldData);
    keys.push_back(holder + LockKeys::kWriter);
  }
  if (in_line) {
    keys.push_back(holder + LockKeys::kLine);
    keys.push_back(holder + LockKeys::kLineData);
  }
  if (!single_exclusive_try || with_value) keys.push_back(holder + LockKeys::kValue);
  keys[0] = std::move(holder);
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
ScriptCall WidenAcquire(ScriptCall call) {
  // A single exclusive try names the holder, the counter and the holds (AcquireKeys): the rest
  // follow, the value key last.
  call.keys.resize(3);
  const std::string holder = call.keys[0];
  call.keys.push_back(holder + LockKeys::kHoldData);
  call.keys.push_back(holder + LockKeys::kWriter);
  call.keys.push_back(holder + LockKeys::kValue);
  if (call.args.size() < 7) NameValueKey(&call.args, "", "");
  return call;
}

// release.lua's keys for an exclusive hold: the holder and the line, and to hand the lock over,
// the counter, the line's data and the writer announcement; then the value key (the hold has a
// value) and the holds and hold data (job rules' markers, shared waiters served): `count` of
// these eight. The script asks for all eight ({3}) when it needs more than it was given.
std::vector<std::string> ReleaseKeys(std::string holder, size_t count) {
  std::vector<std::string> keys;
  keys.reserve(count);
  keys.emplace_back();  // the holder, moved in last
  for (const char* suffix : {LockKeys::kLine, LockKeys::kFence, LockKeys::kLineData, LockKeys::kWriter,
                             LockKeys::kValue, LockKeys::kHolds, LockKeys::kHoldData}) {
    if (keys.size() == count) break;
    keys.push_back(holder + suffix);
  }
  keys[0] = std::move(holder);
  return keys;
}
constexpr size_t kReleaseKeysBare = 5, kReleaseKeysWithValue = 6, kReleaseKeysAll = 8;
// release.lua's keys for a semaphore's hold: holds, hold data, value, line, fence, line data;
// a shared hold's add the holder and the writer announcement (its line is the lock's).
std::vector<std::string> HoldReleaseKeys(const std::string& holder, bool shared) {
  std::vector<std::string> keys{holder + LockKeys::kHolds, holder + LockKeys::kHoldData,
                                holder + LockKeys::kValue, holder + LockKeys::kLine,
                                holder + LockKeys::kFence, holder + LockKeys::kLineData};
  if (shared) {
    keys.push_back(holder);
    keys.push_back(holder + LockKeys::kWriter);
  }
  return keys;
}
ScriptCall WidenRelease(ScriptCall call) {
  call.keys = ReleaseKeys(call.keys[0], kReleaseKeysAll);
  return call;
}
// A shared hold's release names holds, hold data, value and line first: the script asks for
// the rest ({3}) when someone waits in line. (Eight keys every time cost the uncontended shared
// cycle 4 %.)
constexpr size_t kSharedReleaseKeysFirst = 4;
ScriptCall WidenSharedRelease(ScriptCall call) {
  const std::string holds = call.keys[0];
  const std::string holder = holds.substr(0, holds.size() - std::strlen(LockKeys::kHolds));
  call.keys = HoldReleaseKeys(holder, /*shared=*/true);
  return call;
}

}  // namespace

Op<AcquireAttempt> AcquireOp(const std::string& prefix, const LockRequest& request,
                             int wait_replicas) {
  // A waiter in the fair line whose wait has run out also sends queue_ms 0, but its id needs the
  // line's keys (without them the script fails half-way, its SET already made).
  // Job rules write markers into the holds key: such a call names every key at once.
  const bool ruled = request.min_hold_ms != 0 || request.lock_delay_ms != 0;
  const bool single_exclusive_try = request.kind == LockKind::kExclusive && request.permits == 0 &&
                                    request.queue_ms == 0 && request.waiter_id.empty() && !ruled;
  const bool names_value = !single_exclusive_try || !request.value.empty();
  // A single try at the exclusive hold needs the holder, the counter, and the holds only to
  // see that there are none.
  // A semaphore's acquire names the line always: no acquire goes ahead of a waiter in it.
  std::vector<std::string> keys = AcquireKeys(LockKeys::Holder(prefix, request.name),
                                              !request.waiter_id.empty() || request.permits != 0,
                                              single_exclusive_try,
                                              !request.value.empty());
  std::vector<std::string> args;
  args.reserve(names_value ? 9 : 5);
  args.push_back(request.owner_value);
  args.push_back(std::to_string(request.lease_ms));
  args.push_back(ScriptSort(request.kind, request.permits));
  args.push_back(std::to_string(request.queue_ms));
  if (names_value) {
    NameValueKey(&args, request.waiter_id, request.value);
  } else if (!request.waiter_id.empty()) {
    args.push_back(request.waiter_id);
  }
  if (ruled || request.take > 1) {
    args.push_back(std::to_string(request.min_hold_ms));
    args.push_back(std::to_string(request.lock_delay_ms));
  }
  if (request.take > 1) args.push_back(std::to_string(request.take));  // a semaphore's: names_value
  return {{ScriptId::kAcquire, std::move(keys), std::move(args), wait_replicas},
          request.name,
          ReadAcquire,
          single_exclusive_try ? WidenAcquire : nullptr};
}

ScriptCall AcquireManyCall(const std::string& prefix, const std::vector<LockRequest>& requests,
                           int wait_replicas) {
  ScriptCall call{ScriptId::kAcquireMany, {}, {std::to_string(requests.size())}, wait_replicas};
  call.keys.reserve(8 * requests.size());
  call.args.reserve(1 + 11 * requests.size());
  for (const LockRequest& request : requests) {
    // Each name as acquire.lua's widest call: every key, its ten arguments.
    const std::string holder = LockKeys::Holder(prefix, request.name);
    std::vector<std::string> keys = AcquireKeys(holder, /*in_line=*/true,
                                                /*single_exclusive_try=*/false, /*with_value=*/true);
    for (std::string& key : keys) call.keys.push_back(std::move(key));
    call.args.push_back(request.owner_value);
    call.args.push_back(std::to_string(request.lease_ms));
    call.args.push_back(ScriptSort(request.kind, request.permits));
    call.args.push_back(std::to_string(request.queue_ms));
    call.args.push_back(request.waiter_id);
    call.args.push_back(request.value);
    call.args.push_back("1");
    call.args.push_back(std::to_string(request.min_hold_ms));
    call.args.push_back(std::to_string(request.lock_delay_ms));
    call.args.push_back(std::to_string(request.take));
    call.args.push_back(holder + LockKeys::kChannel);
  }
  return call;
}

Status ReadAcquireMany(const redisReply* r, const std::string& server,
                       const std::vector<LockRequest>& requests, ManyAttempt* out) {
  out->attempts.assign(requests.size(), AcquireAttempt());
  out->refused = 0;
  // acquire.lua's error (a counter past 2^53 - 1), the names before it given back.
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  const auto garbage = [&] {
    return Status::BackendError(server + " sent an unexpected reply to the acquire_many script");
  };
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
    return garbage();
  }
  if (r->element[0]->integer == 1) {
    if (r->elements != requests.size() + 1) return garbage();
    for (size_t k = 0; k < requests.size(); ++k) {
      Status s = ReadAcquire(r->element[k + 1], server, requests[k].name, &out->attempts[k]);
      if (!s.ok()) return s;
      if (!out->attempts[k].acquired) return garbage();
    }
    return Status::Ok();
  }
  // {0, k, refusal}: k counts from 1, within the names sent.
  if (r->element[0]->integer != 0 || r->elements != 3 || r->element[1]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->integer < 1 || static_cast<unsigned long long>(r->element[1]->integer) > requests.size()) {
    return garbage();
  }
  out->refused = static_cast<size_t>(r->element[1]->integer - 1);
  AcquireAttempt& refusal = out->attempts[out->refused];
  Status s = ReadAcquire(r->element[2], server, requests[out->refused].name, &refusal);
  if (s.ok() && refusal.acquired) return garbage();
  return s;
}

ScriptCall ReleaseManyCall(const std::string& prefix, const std::vector<HoldRef>& holds) {
  ScriptCall call{ScriptId::kReleaseMany, {}, {std::to_string(holds.size())}};
  call.keys.reserve(8 * holds.size());
  call.args.reserve(1 + 8 * holds.size());
  for (const HoldRef& hold : holds) {
    // Each hold with release.lua's widest keys and all seven arguments: no {3} can follow.
    const std::string holder = LockKeys::Holder(prefix, hold.name);
    std::vector<std::string> keys;
    keys = hold.exclusive ? ReleaseKeys(holder, kReleaseKeysAll) : HoldReleaseKeys(holder, !hold.semaphore);
    call.args.push_back(std::to_string(keys.size()));
    for (std::string& key : keys) call.keys.push_back(std::move(key));
    call.args.push_back(hold.owner_value);
    call.args.push_back(holder + LockKeys::kChannel);
    call.args.push_back("0");  // PUBLISH: one server
    call.args.push_back(HoldSort(hold));
    call.args.push_back("");  // no waiter leaves the line
    call.args.push_back(hold.has_value ? "1" : "0");
    call.args.push_back(hold.rules == HoldRef::Rules::kNone   ? ""
                        : hold.rules == HoldRef::Rules::kKept ? "1"
                                                               : "2");
  }
  return call;
}

Status ReadReleaseMany(const redisReply* r, const std::string& server,
                       const std::vector<HoldRef>& holds, std::vector<Status>* each) {
  each->assign(holds.size(), Status::Ok());
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != holds.size()) {
    return Status::BackendError(server + " sent an unexpected reply to the release_many script");
  }
  for (size_t k = 0; k < holds.size(); ++k) {
    (*each)[k] = ParseOwnedReply(r->element[k], server, holds[k].name);
  }
  return Status::Ok();
}

Op<NoResult> ReleaseOp(const std::string& prefix, const HoldRef& hold, bool sharded) {
  std::string holder = LockKeys::Holder(prefix, hold.name);
  std::vector<std::string> args;
  args.reserve(6);
  args.push_back(hold.owner_value);
  args.push_back(holder + LockKeys::kChannel);
  args.push_back(sharded ? "1" : "0");
  args.push_back(HoldSort(hold));
  const bool ruled = hold.rules != HoldRef::Rules::kNone;
  if (hold.has_value || ruled) {
    args.push_back("");  // ARGV[5]: no waiter leaves the line (LeaveLineOp sets it)
    args.push_back(hold.has_value ? "1" : "0");
  }
  if (ruled) args.push_back(hold.rules == HoldRef::Rules::kKept ? "1" : "2");
  if (hold.semaphore) {
    // Every key a hand-over of permits needs (release.lua): the value key third, always.
    args.resize(7);
    args[5] = hold.has_value ? "1" : "0";
    return {{ScriptId::kRelease, HoldReleaseKeys(holder, false), std::move(args)}, hold.name, ReadOwned};
  }
  if (!hold.exclusive) {
    std::vector<std::string> keys = HoldReleaseKeys(holder, true);
    keys.resize(kSharedReleaseKeysFirst);
    return {{ScriptId::kRelease, std::move(keys), std::move(args)}, hold.name, ReadOwned, WidenSharedRelease};
  }
  if (ruled) {
    // Every key at once: the holds key keeps the markers.
    return {{ScriptId::kRelease, ReleaseKeys(std::move(holder), kReleaseKeysAll), std::move(args)},
            hold.name, ReadOwned};
  }
  // Every key a hand-over needs at once: a contended fair release then costs one round trip,
  // not two (the script answering {3} for the rest). Measured: hand-overs +12 % with 4 waiters
  // and +4 % with 32, uncontended cycles -1 % (bench/README.md). The value key only when the
  // hold has a value: a hand-over to a waiter that stored one, or to shared waiters, asks for
  // the rest ({3}, WidenRelease).
  return {{ScriptId::kRelease,
           ReleaseKeys(std::move(holder), hold.has_value ? kReleaseKeysWithValue : kReleaseKeysBare),
           std::move(args)},
          hold.name,
          ReadOwned,
          WidenRelease};
}

Op<NoResult> LeaveLineOp(const std::string& prefix, const LockRequest& request, bool sharded) {
  // Every key: it may release what was handed to it, and serve the line behind it.
  const HoldRef hold = HoldRef::Of(request);
  std::string holder = LockKeys::Holder(prefix, hold.name);
  std::vector<std::string> args{hold.owner_value, holder + LockKeys::kChannel, sharded ? "1" : "0",
                                HoldSort(hold), request.waiter_id, request.value.empty() ? "0" : "1"};
  std::vector<std::string> keys = hold.exclusive ? ReleaseKeys(std::move(holder), kReleaseKeysAll)
                                                 : HoldReleaseKeys(holder, !hold.semaphore);
  return {{ScriptId::kRelease, std::move(keys), std::move(args)}, hold.name, ReadOwned};
}

bool AsksForAllKeys(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
         r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 3;
}

Op<NoResult> ExtendOp(const std::string& prefix, const HoldRef& hold, uint64_t lease_ms) {
  // A hold with a value names the value key last (HoldKeys): its expiry follows the hold's. A
  // lock-delay moves its marker: an exclusive hold then names the holds key after it.
  std::vector<std::string> keys = HoldKeys(prefix, hold);
  std::vector<std::string> args{hold.owner_value, std::to_string(lease_ms), HoldSort(hold)};
  if (hold.lock_delay_ms != 0) {
    if (hold.exclusive) keys.push_back(LockKeys::Holder(prefix, hold.name) + LockKeys::kHolds);
    args.push_back(std::to_string(hold.lock_delay_ms));
  }
  return {{ScriptId::kExtend, std::move(keys), std::move(args)}, hold.name, ReadOwned};
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
            std::move(keys.hold_data), std::move(keys.value), std::move(keys.broken)},
           {}},
          name,
          ReadInspect};
}

Op<BreakResult> BreakOp(const std::string& prefix, const std::string& name,
                        const std::string& reason, bool now, bool sharded) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kBreak,
           {std::move(keys.holder), std::move(keys.fence), std::move(keys.holds),
            std::move(keys.hold_data), std::move(keys.value), std::move(keys.broken)},
           {reason, now ? "1" : "0", std::move(keys.channel), sharded ? "1" : "0",
            std::to_string(kBrokenRecordMs), std::to_string(kMaxBrokenRecords)}},
          name,
          ReadBreak};
}

Op<Asked> RequestReleaseOp(const std::string& prefix, const std::string& name,
                           const std::string& request_id, const std::string& reason, bool sharded) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kRequestRelease,
           {std::move(keys.holder), std::move(keys.holds)},
           {std::move(keys.channel), sharded ? "1" : "0", "request\n" + request_id + "\n" + reason}},
          name,
          [](const redisReply* r, const std::string& server, const std::string&, Asked* out) {
            return ParseAskedReply(r, server, &out->holds);
          }};
}

}  // namespace dlock::redis
