#include "core/text.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <utility>
#include <vector>

#include "core/secret.h"

namespace dlock {

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

bool Base64Decode(std::string_view text, std::string* out) {
  out->clear();
  if (text.size() % 4 != 0 || text.size() > (size_t{1} << 30)) return false;
  if (text.empty()) return true;
  out->resize(text.size() / 4 * 3);
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out->data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return false;
  // EVP_DecodeBlock counts the padding's bytes too.
  size_t pad = text.back() == '=' ? (text[text.size() - 2] == '=' ? 2 : 1) : 0;
  out->resize(static_cast<size_t>(n) - pad);
  return true;
}

std::string HexBytes(const unsigned char* data, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 15];
  }
  return out;
}

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool PercentDecode(std::string_view in, bool strict, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      int hi = i + 1 < in.size() ? HexDigitValue(in[i + 1]) : -1;
      int lo = i + 2 < in.size() ? HexDigitValue(in[i + 2]) : -1;
      if (hi >= 0 && lo >= 0) {
        out->push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
      if (strict) return false;
    }
    out->push_back(in[i]);
  }
  return true;
}

// ----- secrets ------------------------------------------------------------------------------

namespace {

std::atomic<void (*)(const char*, size_t)> cleanse_hook{nullptr};

// URL query parameters whose values are secrets. A new one joins here: RedactUrl, and the
// parser's messages, then hide it.
constexpr std::string_view kSecretUrlParams[] = {"sentinel_password"};

}  // namespace

void Cleanse(std::string* s) {
  // resize() to the capacity writes within the string's own buffer (no reallocation), so the
  // whole buffer is wiped, not only the characters in use, with no access past the string.
  s->resize(s->capacity());
  OPENSSL_cleanse(s->data(), s->size());
  if (auto hook = cleanse_hook.load(std::memory_order_relaxed)) hook(s->data(), s->size());
  s->clear();
}

void SetCleanseHookForTesting(void (*fn)(const char*, size_t)) { cleanse_hook.store(fn); }

bool IsSecretUrlParam(std::string_view name) {
  for (std::string_view secret : kSecretUrlParams) {
    if (name == secret) return true;
  }
  return false;
}

size_t UrlAuthorityStart(std::string_view text) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) return 0;
  for (size_t i = 0; i < colon; ++i) {
    const char c = text[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) return 0;
  }
  size_t start = colon + 1;
  while (start < text.size() && text[start] == '/') ++start;
  return start;
}

namespace {

// Where the values of secret query parameters lie in text[from...]. A value ends at the next
// '&' that starts a name=value item: the pieces before it, which are no name=value, are a raw
// '&' in the secret (the parser refuses them) and are hidden with it.
void FindSecretParams(const std::string& text, size_t from,
                      std::vector<std::pair<size_t, size_t>>* hidden) {
  size_t i = from;
  while ((i = text.find_first_of("?&", i)) != std::string::npos) {
    const size_t name_start = i + 1;
    const size_t eq = text.find_first_of("=&?", name_start);
    if (eq == std::string::npos || text[eq] != '=') {
      i = name_start;
      continue;
    }
    std::string name;
    PercentDecode(std::string_view(text).substr(name_start, eq - name_start), /*strict=*/false,
                  &name);
    if (!IsSecretUrlParam(name)) {
      i = eq;
      continue;
    }
    size_t end = text.find('&', eq);
    while (end != std::string::npos) {
      const size_t next = text.find('&', end + 1);
      const std::string_view piece = std::string_view(text).substr(
          end + 1, (next == std::string::npos ? text.size() : next) - end - 1);
      if (piece.find('=') != std::string_view::npos) break;
      end = next;
    }
    if (end == std::string::npos) end = text.size();
    hidden->emplace_back(eq + 1, end);
    i = end;
  }
}

}  // namespace

std::vector<std::pair<size_t, size_t>> UrlSecretRanges(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> hidden;
  // The userinfo ends at the last '@'. Where a password holds an unencoded '/', '?' or '#', no
  // parser can tell that '@' from one in a path or query: the last is taken, which may hide
  // more than the password, never less. The password starts after the first ':' of the
  // userinfo (a user name holds no ':'). Without "://" (a mistyped URL, "user:pw@host") the
  // first ':' taken for a scheme's may be the password's own: then it is that one.
  const size_t auth_start = UrlAuthorityStart(text);
  const size_t at = text.rfind('@');
  size_t colon = text.find(':', auth_start);
  if (text.find("://") == std::string::npos && (colon == std::string::npos || colon > at)) {
    colon = text.find(':');
  }
  if (at != std::string::npos && at >= auth_start && colon != std::string::npos && colon < at) {
    hidden.emplace_back(colon + 1, at);
  }
  FindSecretParams(text, auth_start, &hidden);
  return hidden;
}

std::string RedactUrl(const std::string& text) {
  // Each range to hide becomes "***" (overlapping ones one "***").
  std::vector<std::pair<size_t, size_t>> hidden = UrlSecretRanges(text);
  std::sort(hidden.begin(), hidden.end());
  std::string out;
  size_t copied = 0;
  size_t k = 0;
  while (k < hidden.size()) {
    const size_t begin = hidden[k].first;
    size_t end = hidden[k].second;
    while (++k < hidden.size() && hidden[k].first <= end) end = std::max(end, hidden[k].second);
    out.append(text, copied, begin - copied);
    out += "***";
    copied = end;
  }
  out.append(text, copied, std::string::npos);
  return out;
}

}  // namespace dlock
