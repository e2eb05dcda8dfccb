#include "core/text.h"

#include <cctype>

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

std::string RedactUrl(const std::string& text) {
  size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return text;
  size_t auth_start = scheme_end + 3;
  size_t auth_end = text.find_first_of("/?#", auth_start);
  if (auth_end == std::string::npos) auth_end = text.size();
  size_t at = text.rfind('@', auth_end - (auth_end > auth_start ? 1 : 0));
  if (at == std::string::npos || at < auth_start || at >= auth_end) return text;
  size_t colon = text.find(':', auth_start);
  if (colon == std::string::npos || colon > at) return text;
  return text.substr(0, colon + 1) + "***" + text.substr(at);
}

}  // namespace dlock
