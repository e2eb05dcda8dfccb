// Reading hiredis replies: error classification and the scripts' reply shapes, shared by the
// blocking and the async paths so that both read the server the same way.
#ifndef DLOCK_REDIS_WIRE_REPLY_H_
#define DLOCK_REDIS_WIRE_REPLY_H_

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/backend.h"
#include "core/status.h"
#include "redis/wire/keys.h"

namespace dlock::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// The sort of hold a request asks for, as the scripts name it: "exclusive", "shared" or
// "permits:N".
std::string ScriptSort(LockKind kind, uint32_t permits);

// The most elements a reply array may claim. hiredis allocates what an array header claims
// before the elements arrive: "*2000000000" would reserve 16 GB. dlock's replies hold a few.
constexpr int kMaxReplyElements = 1 << 16;
// The longest string (bulk, status or error) a reply may hold. dlock's longest are values of
// 4096 bytes and labels; 16 MiB leaves room for anything a lock's reply can legitimately be.
constexpr size_t kMaxReplyStringBytes = size_t{16} << 20;
// The most bytes one reply may take on the wire: "$99999999999\r\n" followed by data, or an
// array of arrays of small elements, would otherwise be read (and kept, by hiredis's reader and
// the reply objects it builds) for as long as the server sends. Far above every legitimate
// reply: inspect's of thousands of holders with 4096-byte values is a few MiB. The reply objects
// of a reply this long take at most about 12 times its bytes (":1\r\n" elements).
constexpr size_t kMaxReplyBytes = size_t{64} << 20;
// Makes reader refuse arrays claiming more than kMaxReplyElements (or fewer than 0) and strings
// longer than kMaxReplyStringBytes: a reader error, as for any other bytes that are not RESP.
// Every reader dlock creates goes through it.
void GuardReader(redisReader* reader);
// redisReaderFeed, refusing (a reader error naming the limit) bytes that would take the reply
// being read past kMaxReplyBytes. Callers then read the reader's error as for bytes that are not
// RESP (NotRedisProtocol). The count lives in the reader's privdata, which no dlock reader uses
// otherwise; read replies with TakeReply, which restarts it with each whole reply.
int FeedReader(redisReader* reader, const char* buf, size_t len);
// redisReaderGetReply for a reader fed by FeedReader.
int TakeReply(redisReader* reader, void** reply);
// A copy of r that outlives the callback r was lent to (replies are freed after their callback).
ReplyPtr CloneReply(const redisReply* r);
// The reader's error as words for a Status.
std::string ReaderError(const redisReader* reader);
// A server that is not RESP, in words: ReaderError, plus a hint when a plain connection got TLS
// bytes before any reply (a TLS record starts 0x15, an alert, or 0x16, a handshake).
Status NotRedisProtocol(const std::string& server, const redisReader* reader, bool plain_first_reply);

// A release channel's message "grant:ID:TOKEN" (lua/release.lua): the lock was handed to the
// fair waiter ID with that fencing token (never 0). False for anything else ("released"), which
// wakes every waiter. *waiter points into message.
bool ParseHandOver(std::string_view message, std::string_view* waiter, uint64_t* token);
// A release request's message, as request_release.lua publishes it ('request\n' ID '\n'
// REASON): true, with its id and reason.
bool ParseReleaseRequest(std::string_view message, std::string* id, std::string* reason);
bool IsNoScript(const redisReply* r);
// An error reply as a Status (EAUTH for authentication errors, EBACKEND otherwise). The
// server's words are capped and their control bytes escaped (core/server_text.h).
Status ErrorReplyStatus(const redisReply* r, const std::string& server);
// acquire.lua: {1, token}, {0, pttl}, {4, pttl, closed by}, or {2, sort held, sort asked}
// (InvalidArgument naming lock `name`).
Status ParseAcquireReply(const redisReply* r, const std::string& server, const std::string& name,
                         AcquireAttempt* out);
// inspect.lua: {0}, {1, label, pttl, token, value} or {2, sort, label, pttl, token, value, ...},
// or one of those wrapped with a marker and break records: {-1, reply, closed ms, closed by,
// {token, reason, ...}}.
Status ParseInspectReply(const redisReply* r, const std::string& server, LockInfo* out);
// break.lua: {sort, closed ms, label, pttl, token, id, ...}.
Status ParseBreakReply(const redisReply* r, const std::string& server, BreakResult* out);
// request_release.lua: how many holds were asked (0..2^32-1; more is garbage).
Status ParseAskedReply(const redisReply* r, const std::string& server, uint32_t* asked);
// release.lua / extend.lua: 1 -> Ok, 0 -> NotHeld.
Status ParseOwnedReply(const redisReply* r, const std::string& server, const std::string& name);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_REPLY_H_
