// Bytes from a Redis server, as the connections read them: hiredis's reader (guarded, fed
// through FeedReader and TakeReply as every connection is), then every reply shape dlock reads
// (acquire.lua, release/extend.lua, inspect.lua, errors, NOSCRIPT, a cluster's CLUSTER SLOTS
// and its MOVED/ASK/TRYAGAIN/CLUSTERDOWN redirections). The first byte picks how the input is
// cut into reads, so partial replies are exercised too; 0xff also floods the reader with data
// after the input, to the buffered-bytes limit.
//
// Asserted (a crash otherwise): the reader never holds more than kMaxReplyBytes no reply was
// made of; no reply holds a string over kMaxReplyStringBytes; no message made of a
// reply carries a raw control byte; cluster hosts are never control bytes.
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redis/topology/cluster_map.h"
#include "redis/lock_ops.h"
#include "redis/wire/reply.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

bool NoControlBytes(std::string_view text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

void RequireStringsWithinCap(const redisReply* r) {
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    Require(r->len <= dlock::redis::kMaxReplyStringBytes);
  }
  if (r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) RequireStringsWithinCap(r->element[i]);
  }
}

void ReadEveryShape(const redisReply* reply) {
  RequireStringsWithinCap(reply);
  dlock::AcquireAttempt attempt;
  Require(NoControlBytes(dlock::redis::ParseAcquireReply(reply, "fuzz", "lock", &attempt).message()));
  Require(NoControlBytes(dlock::redis::ParseOwnedReply(reply, "fuzz", "name").message()));
  dlock::LockInfo info;
  Require(NoControlBytes(dlock::redis::ParseInspectReply(reply, "fuzz", &info).message()));
  Require(info.broken.size() <= dlock::kMaxBrokenRecords);
  dlock::BreakResult broke;
  Require(NoControlBytes(dlock::redis::ParseBreakReply(reply, "fuzz", &broke).message()));
  (void)dlock::redis::IsNoScript(reply);
  if (reply->type == REDIS_REPLY_STRING) {
    std::string_view waiter;
    uint64_t token = 0;
    (void)dlock::redis::ParseHandOver(std::string_view(reply->str, reply->len), &waiter, &token);
    std::string id, reason;
    if (dlock::redis::ParseReleaseRequest(std::string_view(reply->str, reply->len), &id, &reason)) {
      Require(id.size() <= 64 && reason.size() <= dlock::kMaxReasonBytes);
    }
  }
  uint32_t holds_asked = 0;
  Require(NoControlBytes(dlock::redis::ParseAskedReply(reply, "fuzz", &holds_asked).message()));
  std::vector<dlock::LockRequest> requests(2);
  requests[0].name = "a";
  requests[1].name = "b";
  dlock::redis::ManyAttempt many;
  Require(NoControlBytes(dlock::redis::ReadAcquireMany(reply, "fuzz", requests, &many).message()));
  Require(many.attempts.size() == requests.size() && many.refused < requests.size());
  std::vector<dlock::redis::HoldRef> holds(2);
  std::vector<dlock::Status> each;
  Require(NoControlBytes(dlock::redis::ReadReleaseMany(reply, "fuzz", holds, &each).message()));
  Require(each.size() == holds.size());
  for (const dlock::Status& s : each) Require(NoControlBytes(s.message()));
  const dlock::redis::NodeAddress asked{"127.0.0.1", 7000};
  std::vector<dlock::redis::SlotRange> ranges;
  Require(NoControlBytes(dlock::redis::ParseClusterSlots(reply, asked, "fuzz", &ranges).message()));
  for (const auto& range : ranges) Require(NoControlBytes(range.master.host));
  Require(NoControlBytes(dlock::redis::ParseRedirect(reply, asked).to.host));
  if (reply->type == REDIS_REPLY_ERROR) {
    Require(NoControlBytes(dlock::redis::ErrorReplyStatus(reply, "fuzz").message()));
  }
}

// Feeds n bytes; false once the reader failed (the connection would be dropped there).
bool FeedAndRead(redisReader* reader, const char* bytes, size_t n) {
  const int fed = dlock::redis::FeedReader(reader, bytes, n);
  Require(reader->len - reader->pos <= dlock::redis::kMaxReplyBytes);
  if (fed != REDIS_OK) {
    Require(NoControlBytes(dlock::redis::ReaderError(reader)));
    return false;
  }
  while (true) {
    void* r = nullptr;
    if (dlock::redis::TakeReply(reader, &r) != REDIS_OK) {
      Require(NoControlBytes(dlock::redis::ReaderError(reader)));
      return false;
    }
    if (r == nullptr) return true;
    auto* reply = static_cast<redisReply*>(r);
    ReadEveryShape(reply);
    freeReplyObject(reply);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 16;
  redisReader* reader = redisReaderCreate();
  dlock::redis::GuardReader(reader);  // as every connection's reader is
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  bool open = true;
  while (open && left > 0) {
    size_t n = left < chunk ? left : chunk;
    open = FeedAndRead(reader, bytes, n);
    bytes += n;
    left -= n;
  }
  if (data[0] == 0xff) {
    // A server that keeps sending: the reader must stop at its limit, whatever came before.
    static const std::string flood(1 << 20, 'x');
    for (size_t fed = 0; open && fed <= dlock::redis::kMaxReplyBytes + flood.size(); fed += flood.size()) {
      open = FeedAndRead(reader, flood.data(), flood.size());
    }
  }
  redisReaderFree(reader);
  return 0;
}
