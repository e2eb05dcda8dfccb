#include "redis/lock_ops.h"

namespace dlock::redis {
namespace {

Status ReadAcquire(const redisReply* r, const std::string& server, const std::string& name,
                   AcquireAttempt* out) {
  return ParseAcquireReply(r, server, name, out);
}

Status ReadOwned(const redisReply* r, const std::string& server, const std::string& name,
                 NoResult*) {
  return ParseOwnedReply(r, server, name);
}

Status ReadInspect(const redisReply* r, const std::string& server, const std::string&,
                   LockInfo* out) {
  return ParseInspectReply(r, server, out);
}

// release.lua and extend.lua: the exclusive holder's key, or an entry among the holds.
const char* HoldSort(const HoldRef& hold) { return hold.exclusive ? "exclusive" : "hold"; }
std::vector<std::string> HoldKeys(LockKeys keys, const HoldRef& hold) {
  if (hold.exclusive) return {std::move(keys.holder)};
  return {std::move(keys.holds), std::move(keys.hold_data)};
}

}  // namespace

Op<AcquireAttempt> AcquireOp(const std::string& prefix, const LockRequest& request,
                             int wait_replicas) {
  LockKeys keys(prefix, request.name);
  return {{ScriptId::kAcquire,
           {std::move(keys.holder), std::move(keys.fence), std::move(keys.holds),
            std::move(keys.hold_data), std::move(keys.writer)},
           {request.owner_value, std::to_string(request.lease_ms),
            ScriptSort(request.kind, request.permits), std::to_string(request.queue_ms)},
           wait_replicas},
          request.name,
          ReadAcquire};
}

Op<NoResult> ReleaseOp(const std::string& prefix, const HoldRef& hold, bool sharded) {
  LockKeys keys(prefix, hold.name);
  std::string channel = keys.channel;
  return {{ScriptId::kRelease,
           HoldKeys(std::move(keys), hold),
           {hold.owner_value, std::move(channel), sharded ? "1" : "0", HoldSort(hold)}},
          hold.name,
          ReadOwned};
}

Op<NoResult> ExtendOp(const std::string& prefix, const HoldRef& hold, uint64_t lease_ms) {
  LockKeys keys(prefix, hold.name);
  return {{ScriptId::kExtend,
           HoldKeys(std::move(keys), hold),
           {hold.owner_value, std::to_string(lease_ms), HoldSort(hold)}},
          hold.name,
          ReadOwned};
}

Op<LockInfo> InspectOp(const std::string& prefix, const std::string& name) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kInspect,
           {std::move(keys.holder), std::move(keys.fence), std::move(keys.holds),
            std::move(keys.hold_data)},
           {}},
          name,
          ReadInspect};
}

}  // namespace dlock::redis
