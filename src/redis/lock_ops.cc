#include "redis/lock_ops.h"

namespace dlock::redis {
namespace {

Status ReadAcquire(const redisReply* r, const std::string& server, const std::string&,
                   AcquireAttempt* out) {
  return ParseAcquireReply(r, server, out);
}

Status ReadOwned(const redisReply* r, const std::string& server, const std::string& name,
                 NoResult*) {
  return ParseOwnedReply(r, server, name);
}

Status ReadInspect(const redisReply* r, const std::string& server, const std::string&,
                   LockInfo* out) {
  return ParseInspectReply(r, server, out);
}

}  // namespace

Op<AcquireAttempt> AcquireOp(const std::string& prefix, const LockRequest& request,
                             int wait_replicas) {
  LockKeys keys(prefix, request.name);
  return {{ScriptId::kAcquire,
           {std::move(keys.holder), std::move(keys.fence)},
           {request.owner_value, std::to_string(request.lease_ms)},
           wait_replicas},
          request.name,
          ReadAcquire};
}

Op<NoResult> ReleaseOp(const std::string& prefix, const std::string& name,
                       const std::string& owner_value, bool sharded) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kRelease,
           {std::move(keys.holder)},
           {owner_value, std::move(keys.channel), sharded ? "1" : "0"}},
          name,
          ReadOwned};
}

Op<NoResult> ExtendOp(const std::string& prefix, const std::string& name,
                      const std::string& owner_value, uint64_t lease_ms) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kExtend, {std::move(keys.holder)}, {owner_value, std::to_string(lease_ms)}},
          name,
          ReadOwned};
}

Op<LockInfo> InspectOp(const std::string& prefix, const std::string& name) {
  LockKeys keys(prefix, name);
  return {{ScriptId::kInspect, {std::move(keys.holder), std::move(keys.fence)}, {}},
          name,
          ReadInspect};
}

}  // namespace dlock::redis
