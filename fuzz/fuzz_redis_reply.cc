// Bytes from a Redis server, as the connections read them: hiredis's reader, then every reply
// shape dlock reads (acquire.lua, release/extend.lua, inspect.lua, errors, NOSCRIPT, a cluster's
// CLUSTER SLOTS and its MOVED/ASK/TRYAGAIN/CLUSTERDOWN redirections). The first byte picks
// how the input is cut into reads, so partial replies are exercised too.
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redis/cluster_map.h"
#include "redis/reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 16;
  redisReader* reader = redisReaderCreate();
  dlock::redis::GuardReader(reader);  // as every connection's reader is
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  bool failed = false;
  while (!failed && left > 0) {
    size_t n = left < chunk ? left : chunk;
    if (redisReaderFeed(reader, bytes, n) != REDIS_OK) break;
    bytes += n;
    left -= n;
    while (true) {
      void* r = nullptr;
      if (redisReaderGetReply(reader, &r) != REDIS_OK) {
        failed = true;  // not RESP: the connection would be dropped here
        break;
      }
      if (r == nullptr) break;
      auto* reply = static_cast<redisReply*>(r);
      dlock::AcquireAttempt attempt;
      (void)dlock::redis::ParseAcquireReply(reply, "fuzz", "lock", &attempt);
      (void)dlock::redis::ParseOwnedReply(reply, "fuzz", "name");
      dlock::LockInfo info;
      (void)dlock::redis::ParseInspectReply(reply, "fuzz", &info);
      (void)dlock::redis::IsNoScript(reply);
      if (reply->type == REDIS_REPLY_STRING) {
        std::string_view waiter;
        uint64_t token = 0;
        (void)dlock::redis::ParseHandOver(std::string_view(reply->str, reply->len), &waiter, &token);
      }
      const dlock::redis::NodeAddress asked{"127.0.0.1", 7000};
      std::vector<dlock::redis::SlotRange> ranges;
      (void)dlock::redis::ParseClusterSlots(reply, asked, "fuzz", &ranges);
      (void)dlock::redis::ParseRedirect(reply, asked);
      if (reply->type == REDIS_REPLY_ERROR) (void)dlock::redis::ErrorReplyStatus(reply, "fuzz");
      freeReplyObject(reply);
    }
  }
  redisReaderFree(reader);
  return 0;
}
