#include "redis/wire/reply.h"

#include <algorithm>
#include <charconv>
#include <strings.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>

#include "core/options.h"
#include "core/server_text.h"

namespace dlock::redis {
namespace {

// A reply's text for a message: capped, control bytes escaped.
std::string Shown(const redisReply* r) { return ServerText(std::string_view(r->str, r->len)); }

Status Garbage(const std::string& server, const std::string& what) {
  return Status::BackendError(server + " sent an unexpected reply to " + what);
}

const redisReplyObjectFunctions* hiredis_functions = nullptr;
redisReplyObjectFunctions guarded_functions;
std::once_flag guard_once;

// Which limit the last refusal on this thread hit: hiredis reports any refusal as out of
// memory, and ReaderError, called right after on the same thread, names the limit instead.
thread_local const char* refused_by = nullptr;

void* CreateBoundedArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kMaxReplyElements) {  // the reader reports OOM
    refused_by = "array";
    return nullptr;
  }
  return hiredis_functions->createArray(task, elements);
}

void* CreateBoundedString(const redisReadTask* task, char* str, size_t len) {
  if (len > kMaxReplyStringBytes) {
    refused_by = "string";
    return nullptr;
  }
  return hiredis_functions->createString(task, str, len);
}

}  // namespace

void GuardReader(redisReader* reader) {
  if (reader == nullptr || reader->fn == nullptr) return;
  std::call_once(guard_once, [reader] {
    hiredis_functions = reader->fn;  // hiredis's own defaults, the same for every reader
    guarded_functions = *reader->fn;
    guarded_functions.createArray = CreateBoundedArray;
    guarded_functions.createString = CreateBoundedString;
  });
  if (reader->fn == hiredis_functions) reader->fn = &guarded_functions;
}

namespace {

// The bytes fed since the last whole reply, kept in privdata: hiredis only copies that pointer
// into its read tasks, and neither its object functions nor dlock's read it there.
size_t ReplyBytes(const redisReader* reader) { return reinterpret_cast<uintptr_t>(reader->privdata); }
void SetReplyBytes(redisReader* reader, size_t n) {
  reader->privdata = reinterpret_cast<void*>(static_cast<uintptr_t>(n));
}

}  // namespace

int FeedReader(redisReader* reader, const char* buf, size_t len) {
  if (reader->err == 0 && ReplyBytes(reader) + len > kMaxReplyBytes) {
    // A reader error like hiredis's own, so that every caller reports it the same way.
    reader->err = REDIS_ERR_OTHER;
    std::snprintf(reader->errstr, sizeof reader->errstr,
                  "a reply over %zu MiB (dlock's limit on one reply)", kMaxReplyBytes >> 20);
    return REDIS_ERR;
  }
  const int rc = redisReaderFeed(reader, buf, len);
  if (rc == REDIS_OK) SetReplyBytes(reader, ReplyBytes(reader) + len);
  return rc;
}

int TakeReply(redisReader* reader, void** reply) {
  const int rc = redisReaderGetReply(reader, reply);
  // A whole reply: what is left in the buffer belongs to the next ones.
  if (rc == REDIS_OK && *reply != nullptr && reader->pos <= reader->len) {
    SetReplyBytes(reader, reader->len - reader->pos);
  }
  return rc;
}

std::string ReaderError(const redisReader* reader) {
  std::string what = ServerText(reader->errstr);  // hiredis quotes the offending byte
  // A refused array or string shows up as hiredis's out-of-memory error.
  if (reader->err == REDIS_ERR_OOM) {
    const char* refused = refused_by;
    refused_by = nullptr;
    if (refused != nullptr && std::strcmp(refused, "string") == 0) {
      what = "a reply with a string over " + std::to_string(kMaxReplyStringBytes >> 20) +
             " MiB (dlock's limit)";
    } else if (refused != nullptr) {
      what = "a reply claiming more than " + std::to_string(kMaxReplyElements) +
             " elements (dlock's limit)";
    } else {
      what = "memory ran out (" + what + ")";
    }
  }
  return what;
}

Status NotRedisProtocol(const std::string& server, const redisReader* reader,
                        bool plain_first_reply) {
  // Over one of dlock's limits: RESP, but more than any reply of dlock's can be.
  if (reader->err == REDIS_ERR_OTHER || (reader->err == REDIS_ERR_OOM && refused_by != nullptr)) {
    return Status::BackendError(server + " sent " + ReaderError(reader));
  }
  const bool tls_bytes = plain_first_reply && reader->buf != nullptr &&
                         (reader->buf[0] == 0x15 || reader->buf[0] == 0x16);
  return Status::BackendError(server + " does not speak the Redis protocol: " + ReaderError(reader) +
                              (tls_bytes ? " (it answered in TLS: use rediss:// or tls=1)" : ""));
}

bool IsNoScript(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         std::strncmp(r->str, "NOSCRIPT", 8) == 0;
}

namespace {

// r as RESP, to be read back by a reader: a copy made with hiredis's own allocations.
void Serialize(const redisReply* r, std::string* out) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
      *out += "$" + std::to_string(r->len) + "\r\n";
      out->append(r->str, r->len);
      *out += "\r\n";
      break;
    case REDIS_REPLY_STATUS:
      *out += "+" + std::string(r->str, r->len) + "\r\n";
      break;
    case REDIS_REPLY_ERROR:
      *out += "-" + std::string(r->str, r->len) + "\r\n";
      break;
    case REDIS_REPLY_INTEGER:
      *out += ":" + std::to_string(r->integer) + "\r\n";
      break;
    case REDIS_REPLY_ARRAY:
      *out += "*" + std::to_string(r->elements) + "\r\n";
      for (size_t i = 0; i < r->elements; ++i) Serialize(r->element[i], out);
      break;
    default:  // nil
      *out += "$-1\r\n";
      break;
  }
}

}  // namespace

ReplyPtr CloneReply(const redisReply* r) {
  std::string resp;
  Serialize(r, &resp);
  redisReader* reader = redisReaderCreate();
  GuardReader(reader);
  void* copy = nullptr;
  if (redisReaderFeed(reader, resp.data(), resp.size()) != REDIS_OK ||
      redisReaderGetReply(reader, &copy) != REDIS_OK) {
    copy = nullptr;
  }
  redisReaderFree(reader);
  return ReplyPtr(static_cast<redisReply*>(copy));
}

Status ErrorReplyStatus(const redisReply* r, const std::string& server) {
  std::string msg = Shown(r);
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

std::string ScriptSort(LockKind kind, uint32_t permits) {
  if (permits != 0) return "permits:" + std::to_string(permits);
  return kind == LockKind::kShared ? "shared" : "exclusive";
}

namespace {

// A script's sort ('lock', 'shared', 'exclusive' or 'permits:N') as a semaphore size, 0 for a
// lock; false for anything else.
bool SortPermits(const redisReply* r, uint32_t* permits) {
  if (r->type != REDIS_REPLY_STRING) return false;
  std::string_view text(r->str, r->len);
  *permits = 0;
  if (text == "lock" || text == "shared" || text == "exclusive") return true;
  if (text.substr(0, 8) != "permits:") return false;
  auto [ptr, ec] = std::from_chars(text.data() + 8, text.data() + text.size(), *permits);
  return ec == std::errc() && ptr == text.data() + text.size() && *permits > 0;
}

// What left a marker ('broken'): a short lowercase word, as the scripts write it.
bool ClosedBy(const redisReply* r, std::string* out) {
  if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 32) return false;
  for (size_t i = 0; i < r->len; ++i) {
    if ((r->str[i] < 'a' || r->str[i] > 'z') && r->str[i] != '_') return false;
  }
  out->assign(r->str, r->len);
  return true;
}

// A pttl the server gave: -1 (no expiry) stays; anything else is clamped to 0..the longest lease.
int64_t ServerTtl(long long pttl) {
  return pttl == -1 ? -1 : std::clamp<long long>(pttl, 0, static_cast<long long>(kMaxLeaseMs));
}

uint64_t TokenOrZero(const redisReply* r) {
  uint64_t token = 0;
  auto [ptr, ec] = std::from_chars(r->str, r->str + r->len, token);
  return ec == std::errc() && ptr == r->str + r->len ? token : 0;  // 0: unknown
}

// inspect.lua's reply without the wrapper.
Status ParseHolders(const redisReply* r, const std::string& server, LockInfo* out) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    return Garbage(server, "the inspect script");
  }
  const long long shape = r->element[0]->integer;
  if (shape == 0 && r->elements == 1) return Status::Ok();  // free
  // {1, label, pttl, token, value}, or {2, sort} followed by (label, pttl, token, value) per
  // holder, or {3, sort} followed by (label, pttl, token, value, take): a semaphore's holds,
  // some of which took more than one permit.
  const size_t first = shape == 1 ? 1 : 2;
  const size_t each = shape == 3 ? 5 : 4;
  if ((shape != 1 && shape != 2 && shape != 3) || (shape == 1 && r->elements != 5) ||
      (shape != 1 && (r->elements < 2 + each || (r->elements - 2) % each != 0 ||
                      !SortPermits(r->element[1], &out->permits))) ||
      (shape == 3 && out->permits == 0)) {
    return Garbage(server, "the inspect script");
  }
  out->kind = shape != 1 && out->permits == 0 ? LockKind::kShared : LockKind::kExclusive;
  for (size_t k = first; k + each - 1 < r->elements; k += each) {
    const redisReply* label = r->element[k];
    const redisReply* ttl = r->element[k + 1];
    const redisReply* token = r->element[k + 2];
    const redisReply* value = r->element[k + 3];
    // A value longer than any dlock stores was not written by dlock: refused, not cut.
    if (label->type != REDIS_REPLY_STRING || ttl->type != REDIS_REPLY_INTEGER ||
        token->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING ||
        value->len > kMaxValueBytes) {
      return Garbage(server, "the inspect script");
    }
    HolderInfo holder;
    holder.owner.assign(label->str, label->len);
    holder.value.assign(value->str, value->len);
    // -1 no expiry; anything else below 0 (gone meanwhile) reads as expiring now.
    holder.remaining_ms = ServerTtl(ttl->integer);
    holder.fencing_token = TokenOrZero(token);
    if (shape == 3) {
      const redisReply* take = r->element[k + 4];
      if (take->type != REDIS_REPLY_INTEGER) return Garbage(server, "the inspect script (take)");
      holder.take = static_cast<uint32_t>(std::clamp<long long>(take->integer, 1, out->permits));
    }
    out->holders.push_back(std::move(holder));
  }
  return Status::Ok();
}

// The wrapper's break records: {token, reason, ...}, the newest kMaxBrokenRecords kept (a
// server that sends more is cut, not trusted).
Status ParseBrokenRecords(const redisReply* r, const std::string& server, LockInfo* out) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
    return Garbage(server, "the inspect script (break records)");
  }
  for (size_t k = 0; k + 1 < r->elements && out->broken.size() < kMaxBrokenRecords; k += 2) {
    const redisReply* token = r->element[k];
    const redisReply* reason = r->element[k + 1];
    if (token->type != REDIS_REPLY_STRING || reason->type != REDIS_REPLY_STRING ||
        reason->len > kMaxReasonBytes) {
      return Garbage(server, "the inspect script (break records)");
    }
    BrokenRecord b;
    b.fencing_token = TokenOrZero(token);
    b.reason.assign(reason->str, reason->len);
    if (b.fencing_token != 0) out->broken.push_back(std::move(b));
  }
  return Status::Ok();
}

}  // namespace

Status ParseAcquireReply(const redisReply* r, const std::string& server, const std::string& name,
                         AcquireAttempt* out) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 2) {
    uint32_t held = 0, asked = 0;
    if (!SortPermits(r->element[1], &held) || !SortPermits(r->element[2], &asked)) {
      return Garbage(server, "the acquire script (sort)");
    }
    return SortMismatch(name, held, asked);
  }
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 4) {
    // A marker closes the name, with no holder: refused for as long as it stands.
    if (r->element[1]->type != REDIS_REPLY_INTEGER || !ClosedBy(r->element[2], &out->closed_by)) {
      out->closed_by.clear();
      return Garbage(server, "the acquire script (closed)");
    }
    out->acquired = false;
    out->holder_ttl_ms = ServerTtl(r->element[1]->integer);
    return Status::Ok();
  }
  if (r->type != REDIS_REPLY_ARRAY || (r->elements != 2 && r->elements != 3) ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    return Garbage(server, "the acquire script");
  }
  const redisReply* value = r->element[1];
  if (r->element[0]->integer == 1 && r->elements == 3) {
    // Already this owner's: what is left of its lease (-1 none; -2 gone meanwhile reads as 0).
    const redisReply* left = r->element[2];
    if (left->type != REDIS_REPLY_INTEGER) return Garbage(server, "the acquire script (lease left)");
    if (left->integer != -1) {
      out->remaining_ms = std::clamp<long long>(left->integer, 0, static_cast<long long>(kMaxLeaseMs));
    }
  } else if (r->elements == 3) {
    return Garbage(server, "the acquire script");
  }
  if (r->element[0]->integer == 1) {
    if (value->type != REDIS_REPLY_STRING) return Garbage(server, "the acquire script (token)");
    uint64_t token = 0;
    auto [ptr, ec] = std::from_chars(value->str, value->str + value->len, token);
    if (ec != std::errc() || ptr != value->str + value->len || token == 0) {
      return Garbage(server, "the acquire script (token '" + Shown(value) + "')");
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

Status ParseInspectReply(const redisReply* r, const std::string& server, LockInfo* out) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  *out = LockInfo();
  Status s;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 5 &&
      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == -1) {
    // Wrapped: {-1, reply, closed ms, closed by, break records}.
    const redisReply* closed = r->element[2];
    const redisReply* by = r->element[3];
    s = ParseHolders(r->element[1], server, out);
    if (s.ok() && (closed->type != REDIS_REPLY_INTEGER || by->type != REDIS_REPLY_STRING ||
                   (by->len > 0 && !ClosedBy(by, &out->closed_by)))) {
      s = Garbage(server, "the inspect script (closed)");
    }
    if (s.ok()) s = ParseBrokenRecords(r->element[4], server, out);
    if (s.ok() && out->holders.empty() && !out->closed_by.empty()) {
      out->closed_ms = std::max<int64_t>(ServerTtl(closed->integer), 0);
      if (out->closed_ms == 0) out->closed_by.clear();  // it ended as it was read
    } else {
      out->closed_by.clear();
    }
  } else {
    s = ParseHolders(r, server, out);
  }
  if (!s.ok()) *out = LockInfo();
  return s;
}

Status ParseBreakReply(const redisReply* r, const std::string& server, BreakResult* out) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  *out = BreakResult();
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || (r->elements - 2) % 4 != 0 ||
      r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_INTEGER ||
      (r->element[0]->len > 0 && !SortPermits(r->element[0], &out->permits))) {
    *out = BreakResult();
    return Garbage(server, "the break script");
  }
  out->kind = std::string_view(r->element[0]->str, r->element[0]->len) == "shared"
                  ? LockKind::kShared
                  : LockKind::kExclusive;
  out->closed_ms = std::max<int64_t>(ServerTtl(r->element[1]->integer), 0);
  if (out->closed_ms > 0) out->closed_by = "broken";
  for (size_t k = 2; k + 3 < r->elements; k += 4) {
    const redisReply* label = r->element[k];
    const redisReply* ttl = r->element[k + 1];
    const redisReply* token = r->element[k + 2];
    const redisReply* id = r->element[k + 3];
    if (label->type != REDIS_REPLY_STRING || ttl->type != REDIS_REPLY_INTEGER ||
        token->type != REDIS_REPLY_STRING || id->type != REDIS_REPLY_STRING || id->len > 64) {
      *out = BreakResult();
      return Garbage(server, "the break script");
    }
    HolderInfo holder;
    holder.owner.assign(label->str, label->len);
    holder.remaining_ms = ServerTtl(ttl->integer);
    holder.fencing_token = TokenOrZero(token);
    holder.hold_id.assign(id->str, id->len);
    out->holders.push_back(std::move(holder));
  }
  return Status::Ok();
}

bool ParseHandOver(std::string_view message, std::string_view* waiter, uint64_t* token) {
  constexpr std::string_view kPrefix = "grant:";
  if (message.substr(0, kPrefix.size()) != kPrefix) return false;
  message.remove_prefix(kPrefix.size());
  const size_t colon = message.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view digits = message.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *token);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || *token == 0) return false;
  *waiter = message.substr(0, colon);
  return true;
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

bool ParseReleaseRequest(std::string_view message, std::string* id, std::string* reason) {
  constexpr std::string_view kHead = "request\n";
  constexpr size_t kMaxIdBytes = 64;  // ours are 32 hex digits
  if (message.substr(0, kHead.size()) != kHead) return false;
  message.remove_prefix(kHead.size());
  const size_t end = message.find('\n');
  if (end == std::string_view::npos || end == 0 || end > kMaxIdBytes) return false;
  id->assign(message.substr(0, end));
  // Whoever published it, the holder is handed no more than a request may carry.
  reason->assign(message.substr(end + 1, kMaxReasonBytes));
  return true;
}

Status ParseAskedReply(const redisReply* r, const std::string& server, uint32_t* asked) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, server);
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > UINT32_MAX) {
    return Garbage(server, "the release request script");
  }
  *asked = static_cast<uint32_t>(r->integer);
  return Status::Ok();
}

}  // namespace dlock::redis
