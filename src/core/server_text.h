// Text a server sent, made safe to keep and to show: header-only, shared by every backend
// (Redis error replies, DynamoDB and etcd error bodies, the JSON they answer).
//   - Control bytes (below 0x20, and 0x7f) are escaped as \xNN, so that a message printed to a
//     terminal cannot carry escape sequences (dlock_last_error() never holds one raw).
//   - Error texts are capped (kMaxServerTextBytes), so that a server cannot make a message, and
//     every copy of it, as large as its answer.
//   - JSON nesting is bounded (kMaxJsonDepth) before a document is parsed: nlohmann/json builds
//     a container for each '[' or '{', about one per byte of "[[[[...".
#ifndef DLOCK_CORE_SERVER_TEXT_H_
#define DLOCK_CORE_SERVER_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace dlock {

// The most bytes of a server's own words (an error message) kept in a message; more is cut
// and "…" appended.
inline constexpr size_t kMaxServerTextBytes = 512;
// The deepest nesting of arrays and objects accepted in a JSON answer. dlock's own documents
// nest 5 deep at most (a DynamoDB item's map of maps inside "Item").
inline constexpr size_t kMaxJsonDepth = 64;

// text with bytes below 0x20 and 0x7f as \xNN. For people, not to be parsed back: a literal
// "\x1b" in the text is left as it is.
inline std::string EscapeControlBytes(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A server's words for a message: at most max_bytes of text (cut on a UTF-8 character's
// boundary, "…" appended when cut), control bytes escaped.
inline std::string ServerText(std::string_view text, size_t max_bytes = kMaxServerTextBytes) {
  if (text.size() <= max_bytes) return EscapeControlBytes(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return EscapeControlBytes(text.substr(0, cut)) + "\xe2\x80\xa6";  // "…"
}

// True when no array or object in text (JSON) nests deeper than max_depth. A scan of the bytes
// (strings skipped), not a parse: run it before parsing, so that a hostile document costs no
// more than its length.
inline bool JsonDepthWithin(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

}  // namespace dlock

#endif  // DLOCK_CORE_SERVER_TEXT_H_
