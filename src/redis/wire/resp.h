// Commands in RESP, formatted straight into a caller's buffer: one array of bulk strings per
// command, as hiredis's redisFormatCommandArgv writes them, without its per-command allocations
// (the argument vectors, the result) or its sprintf per argument. A script call's EVALSHA is
// written from its script, keys and arguments as they are: no argv is built for it.
#ifndef DLOCK_REDIS_WIRE_RESP_H_
#define DLOCK_REDIS_WIRE_RESP_H_

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "redis/wire/scripts.h"

namespace dlock::redis::resp {

// Decimal digits of n.
inline size_t Digits(size_t n) {
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

// The bytes "<prefix><n>\r\n" take.
inline size_t HeaderSize(size_t n) { return 1 + Digits(n) + 2; }
inline size_t BulkSize(size_t len) { return HeaderSize(len) + len + 2; }

// Room for `more` bytes, growing geometrically: reserve(size + n) alone may grow to exactly that
// (libc++ does), and a pipeline of many commands would then copy the buffer once per command.
inline void Reserve(std::string* out, size_t more) {
  const size_t need = out->size() + more;
  if (need > out->capacity()) out->reserve(std::max(need, 2 * out->capacity()));
}

inline void AppendHeader(std::string* out, char prefix, size_t n) {
  char buf[24];
  buf[0] = prefix;
  char* end = std::to_chars(buf + 1, buf + sizeof buf - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out->append(buf, static_cast<size_t>(end - buf));
}

inline void AppendBulk(std::string* out, std::string_view s) {
  AppendHeader(out, '$', s.size());
  out->append(s.data(), s.size());
  out->append("\r\n", 2);
}

// One command from its arguments.
inline void AppendCommand(std::string* out, const std::vector<std::string>& argv) {
  size_t size = HeaderSize(argv.size());
  for (const auto& a : argv) size += BulkSize(a.size());
  Reserve(out, size);
  AppendHeader(out, '*', argv.size());
  for (const auto& a : argv) AppendBulk(out, a);
}

// EVALSHA sha numkeys keys... args... (or, with body, EVAL body numkeys ...: where no NOSCRIPT
// round trip may come between the command and the one before it).
inline void AppendScriptCall(std::string* out, const Script& script, bool body,
                             const std::vector<std::string>& keys,
                             const std::vector<std::string>& args) {
  const std::string_view verb = body ? "EVAL" : "EVALSHA";
  const std::string& first = body ? script.body : script.sha1;
  char numkeys[24];
  const size_t numkeys_len =
      static_cast<size_t>(std::to_chars(numkeys, numkeys + sizeof numkeys, keys.size()).ptr - numkeys);
  const size_t argc = 3 + keys.size() + args.size();
  size_t size = HeaderSize(argc) + BulkSize(verb.size()) + BulkSize(first.size()) + BulkSize(numkeys_len);
  for (const auto& k : keys) size += BulkSize(k.size());
  for (const auto& a : args) size += BulkSize(a.size());
  Reserve(out, size);
  AppendHeader(out, '*', argc);
  AppendBulk(out, verb);
  AppendBulk(out, first);
  AppendBulk(out, std::string_view(numkeys, numkeys_len));
  for (const auto& k : keys) AppendBulk(out, k);
  for (const auto& a : args) AppendBulk(out, a);
}

}  // namespace dlock::redis::resp

#endif  // DLOCK_REDIS_WIRE_RESP_H_
