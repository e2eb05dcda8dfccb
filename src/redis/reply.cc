#include "redis/reply.h"

#include <charconv>
#include <cstring>
#include <mutex>

namespace dlock::redis {
namespace {

std::string Text(const redisReply* r) { return std::string(r->str, r->len); }

Status Garbage(const std::string& server, const std::string& what) {
  return Status::BackendError(server + " sent an unexpected reply to " + what);
}

const redisReplyObjectFunctions* hiredis_functions = nullptr;
redisReplyObjectFunctions guarded_functions;
std::once_flag guard_once;

void* CreateBoundedArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kMaxReplyElements) return nullptr;  // the reader reports OOM
  return hiredis_functions->createArray(task, elements);
}

}  // namespace

void GuardReader(redisReader* reader) {
  if (reader == nullptr || reader->fn == nullptr) return;
  std::call_once(guard_once, [reader] {
    hiredis_functions = reader->fn;  // hiredis's own defaults, the same for every reader
    guarded_functions = *reader->fn;
    guarded_functions.createArray = CreateBoundedArray;
  });
  if (reader->fn == hiredis_functions) reader->fn = &guarded_functions;
}

std::string ReaderError(const redisReader* reader) {
  std::string what = reader->errstr;
  // A refused array shows up as hiredis's out-of-memory error.
  if (reader->err == REDIS_ERR_OOM) {
    what = "a reply claimed more than " + std::to_string(kMaxReplyElements) +
           " elements, or memory ran out (" + what + ")";
  }
  return what;
}

bool IsNoScript(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         std::strncmp(r->str, "NOSCRIPT", 8) == 0;
}

Status ErrorReplyStatus(const redisReply* r, const std::string& server) {
  std::string msg = Text(r);
  if (msg.rfind("NOAUTH", 0) == 0 || msg.rfind("WRONGPASS", 0) == 0 ||
      msg.find("invalid password") != std::string::npos || msg.rfind("NOPERM", 0) == 0) {
    // NOAUTH means no credentials were sent at all: say where they go.
    std::string hint = msg.rfind("NOAUTH", 0) == 0
                           ? " (put the password in the URL: redis://:PASSWORD@host:port, or "
                             "redis://USER:PASSWORD@host:port with an ACL user)"
                           : "";
    return Status::AuthError(server + " refused: " + msg + hint);
  }
  return Status::BackendError(server + " answered an error: " + msg);
}

Status ParseAcquireReply(const redisReply* r, const std::string& server, AcquireAttempt* out) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    return Garbage(server, "the acquire script");
  }
  const redisReply* value = r->element[1];
  if (r->element[0]->integer == 1) {
    if (value->type != REDIS_REPLY_STRING) return Garbage(server, "the acquire script (token)");
    uint64_t token = 0;
    auto [ptr, ec] = std::from_chars(value->str, value->str + value->len, token);
    if (ec != std::errc() || ptr != value->str + value->len || token == 0) {
      return Garbage(server, "the acquire script (token '" + Text(value) + "')");
    }
    out->acquired = true;
    out->fencing_token = token;
    return Status::Ok();
  }
  if (r->element[0]->integer != 0 || value->type != REDIS_REPLY_INTEGER) {
    return Garbage(server, "the acquire script");
  }
  out->acquired = false;
  out->holder_ttl_ms = value->integer;
  return Status::Ok();
}

Status ParseOwnedReply(const redisReply* r, const std::string& server, const std::string& name) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1)) {
    return Garbage(server, "a release/extend script");
  }
  if (r->integer == 0) {
    return Status::NotHeld("lock '" + name + "' is no longer held by this owner on " + server);
  }
  return Status::Ok();
}

}  // namespace dlock::redis
