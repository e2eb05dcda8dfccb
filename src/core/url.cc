#include "core/url.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <charconv>

#include "core/text.h"

namespace dlock {
namespace {

Status DecodeUrlPart(const std::string& in, const std::string& what, std::string* out) {
  if (!dlock::PercentDecode(in, /*strict=*/true, out)) {
    return Status::InvalidArgument("bad percent-escape in URL " + what);
  }
  return Status::Ok();
}

Status ParseHostPort(const std::string& text, HostPort* out) {
  std::string host = text;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) {
      return Status::InvalidArgument("unclosed '[' in URL host '" + text + "'");
    }
    host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return Status::InvalidArgument("junk after ']' in URL host '" + text + "'");
      port = rest.substr(1);
      if (port.empty()) return Status::InvalidArgument("empty port in URL host '" + text + "'");
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      if (port.empty()) return Status::InvalidArgument("empty port in URL host '" + text + "'");
    }
  }
  if (host.empty()) return Status::InvalidArgument("empty host in URL");
  if (text[0] != '[' && host.find(':') != std::string::npos) {
    return Status::InvalidArgument("URL host '" + text + "' has more than one ':' (IPv6 addresses go in brackets: [::1]:6379)");
  }
  for (char c : host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':')) {
      return Status::InvalidArgument("bad character in URL host '" + host + "'");
    }
  }
  out->host = host;
  out->port = 0;
  if (!port.empty()) {
    int64_t p;
    Status s = ParseInt(port, 1, 65535, "URL port", &p);
    if (!s.ok()) return s;
    out->port = static_cast<int>(p);
  }
  return Status::Ok();
}

}  // namespace

Status ParseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what,
                int64_t* out) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < lo || v > hi) {
    return Status::InvalidArgument(what + " '" + text + "' is not an integer in " +
                                   std::to_string(lo) + ".." + std::to_string(hi));
  }
  *out = v;
  return Status::Ok();
}

const char kUnclearUrlMessage[] =
    "bad URL, not shown as it may hold a password: check the URL; percent-encode '/', '?', '#' "
    "and '@' in a password (as %2F, %3F, %23 and %40), and '&' in sentinel_password= (%26); "
    "parameters are separated by '&'";

namespace {

// Whether an '@' of text may end a userinfo that a parser cannot find: one past where the
// authority ends, or any '@' when text does not start with "scheme://".
bool UnclearUserinfo(const std::string& text) {
  const size_t at = text.rfind('@');
  if (at == std::string::npos) return false;
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos || text.find(':') != scheme_end ||
      UrlAuthorityStart(text) == 0) {
    return true;
  }
  const size_t auth_end = text.find_first_of("/?#", scheme_end + 3);
  return auth_end != std::string::npos && at > auth_end;
}

// After a secret query parameter, a raw '&' in its value would make the rest look like more
// parameters: messages about those name none of them.
std::string AfterSecretHint(const std::string& secret_name) {
  return "after " + secret_name + "= (percent-encode '&' in a password as %26)";
}

Status ParseUrlText(const std::string& text, Url* out) {
  *out = Url();
  const std::string shown = "'" + RedactUrl(text) + "'";
  size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos || scheme_end == 0) {
    return Status::InvalidArgument("URL " + shown + " has no scheme (it must start with the backend's scheme and ://)");
  }
  for (size_t i = 0; i < scheme_end; ++i) {
    char c = text[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) {
      return Status::InvalidArgument("URL " + shown + " has a bad scheme");
    }
    out->scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (text.find('#') != std::string::npos) {
    return Status::InvalidArgument("URL " + shown + " has a fragment ('#'), which means nothing here");
  }
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument("URL " + shown + " contains a space or control character");
    }
  }
  size_t auth_start = scheme_end + 3;
  size_t auth_end = text.find_first_of("/?", auth_start);
  if (auth_end == std::string::npos) auth_end = text.size();
  Secret authority = text.substr(auth_start, auth_end - auth_start);

  size_t at = authority.rfind('@');
  if (at != std::string::npos) {
    Secret userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t colon = userinfo.find(':');
    std::string user = userinfo.substr(0, colon);
    Secret decoded;
    Status s = DecodeUrlPart(user, "user name", &decoded);
    if (!s.ok()) return s;
    out->user = decoded;
    if (colon != std::string::npos) {
      s = DecodeUrlPart(Secret(userinfo.substr(colon + 1)), "password", &decoded);
      if (!s.ok()) return s;
      out->password = std::move(decoded);
    }
  }
  if (!authority.empty()) {
    size_t start = 0;
    while (true) {
      size_t comma = authority.find(',', start);
      std::string part = authority.substr(start, comma == std::string::npos ? std::string::npos
                                                                            : comma - start);
      HostPort hp;
      Status s = ParseHostPort(part, &hp);
      if (!s.ok()) return Status::InvalidArgument(s.message() + " " + shown);
      out->hosts.push_back(hp);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }

  size_t query_start = text.find('?', auth_end);
  std::string raw_path = text.substr(auth_end, (query_start == std::string::npos ? text.size()
                                                                                  : query_start) -
                                                   auth_end);
  Status s = DecodeUrlPart(raw_path, "path", &out->path);
  if (!s.ok()) return s;
  if (query_start != std::string::npos) {
    const Secret query = text.substr(query_start + 1);  // may hold a secret parameter
    std::string after_secret;  // the secret parameter seen last, if any
    size_t start = 0;
    while (start <= query.size()) {
      size_t amp = query.find('&', start);
      const Secret item = query.substr(start, amp == std::string::npos ? std::string::npos
                                                                       : amp - start);
      if (!item.empty()) {
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
          if (!after_secret.empty()) {
            return Status::InvalidArgument("a URL query item " + AfterSecretHint(after_secret) +
                                           " is not name=value");
          }
          return Status::InvalidArgument("URL query item '" + item + "' is not name=value");
        }
        std::string key;
        Secret value;
        Status ks = DecodeUrlPart(item.substr(0, eq), "query name", &key);
        if (!ks.ok()) return ks;
        ks = DecodeUrlPart(Secret(item.substr(eq + 1)), "query value", &value);
        if (!ks.ok()) return ks;
        for (const auto& kv : out->query) {
          if (kv.first != key) continue;
          if (!after_secret.empty() && !IsSecretUrlParam(key)) {
            return Status::InvalidArgument("a URL parameter " + AfterSecretHint(after_secret) +
                                           " is given twice");
          }
          return Status::InvalidArgument("URL parameter '" + key + "' is given twice");
        }
        out->query.emplace_back(key, value);
        if (IsSecretUrlParam(key)) after_secret = key;
      }
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  return Status::Ok();
}

}  // namespace

Url::~Url() { CleanseSecretParams(&query); }

Status ParseUrl(const std::string& text, Url* out) {
  Status s = ParseUrlText(text, out);
  out->unclear_userinfo = UnclearUserinfo(text);
  for (const auto& [begin, end] : UrlSecretRanges(text)) {
    if (begin == end) continue;
    Secret raw = text.substr(begin, end - begin);
    Secret decoded;
    PercentDecode(raw, /*strict=*/false, &decoded);
    if (decoded != raw) out->secrets.push_back(std::move(decoded));
    out->secrets.push_back(std::move(raw));
  }
  return UrlError(*out, std::move(s));
}

Status UrlError(const Url& url, Status s) {
  if (s.ok()) return s;
  bool shows_secret = url.unclear_userinfo && s.code() == Code::kInvalidArgument;
  for (const Secret& secret : url.secrets) {
    shows_secret = shows_secret || s.message().find(secret) != std::string::npos;
  }
  return shows_secret ? Status(s.code(), kUnclearUrlMessage) : s;
}

Status ParseMetricsGroups(const Url& url, uint32_t* out) {
  *out = 0;
  for (const auto& [key, value] : url.query) {
    if (key != "metrics_groups") continue;
    int64_t v = 0;
    Status s = ParseInt(value, 0, 1000, "URL parameter metrics_groups", &v);
    if (!s.ok()) return s;
    *out = static_cast<uint32_t>(v);
  }
  return Status::Ok();
}

Status ParseCommonParams(const Url& url, const std::vector<std::string>& backend_params,
                         CommonParams* out,
                         std::vector<std::pair<std::string, std::string>>* backend_values) {
  *out = CommonParams();
  backend_values->clear();
  std::string after_secret;  // the secret parameter seen last, if any
  for (const auto& [key, value] : url.query) {
    if (IsSecretUrlParam(key)) after_secret = key;
    int64_t v;
    if (key == "prefix") {
      if (value.find_first_of("{}") != std::string::npos) {
        return Status::InvalidArgument("URL parameter prefix='" + value +
                                       "' must not contain '{' or '}' (they choose the hash slot)");
      }
      if (value.size() > 256) {
        return Status::InvalidArgument("URL parameter prefix is longer than 256 bytes");
      }
      out->prefix = value;
    } else if (key == "connect_timeout_ms") {
      Status s = ParseInt(value, 1, 3600000, "URL parameter connect_timeout_ms", &v);
      if (!s.ok()) return s;
      out->connect_timeout_ms = static_cast<int>(v);
    } else if (key == "timeout_ms") {
      Status s = ParseInt(value, 1, 3600000, "URL parameter timeout_ms", &v);
      if (!s.ok()) return s;
      out->timeout_ms = static_cast<int>(v);
    } else if (key == "metrics_groups") {
      Status s = ParseInt(value, 0, 1000, "URL parameter metrics_groups", &v);  // the client reads it
      if (!s.ok()) return s;
    } else if (std::find(backend_params.begin(), backend_params.end(), key) !=
               backend_params.end()) {
      backend_values->emplace_back(key, value);
    } else {
      std::string known = "prefix, connect_timeout_ms, timeout_ms, metrics_groups";
      for (const auto& p : backend_params) known += ", " + p;
      const std::string which = after_secret.empty() || IsSecretUrlParam(key)
                                    ? "'" + key + "'"
                                    : AfterSecretHint(after_secret);
      return Status::InvalidArgument("unknown URL parameter " + which + " for " + url.scheme +
                                     ":// (known: " + known + ")");
    }
  }
  return Status::Ok();
}

void CleanseSecretParams(std::vector<std::pair<std::string, std::string>>* values) {
  for (auto& [key, value] : *values) {
    if (IsSecretUrlParam(key)) Cleanse(&value);
  }
}

Status CheckReadableFile(const std::string& param, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    return Status::InvalidArgument("URL parameter " + param + "=" + path + ": cannot read it: " +
                                   std::strerror(errno));
  }
  std::fclose(f);
  return Status::Ok();
}

Status CheckTlsFiles(const TlsParams& tls) {
  for (const auto& [param, path] : {std::pair<const char*, const std::string*>{"ca", &tls.ca},
                                    {"cert", &tls.cert},
                                    {"key", &tls.key}}) {
    if (path->empty()) continue;
    Status s = CheckReadableFile(param, *path);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

const std::vector<std::string>& TlsParamNames() {
  static const std::vector<std::string> names = {"tls", "ca", "cert", "key", "sni", "tls_verify"};
  return names;
}

namespace {

Status ParseFlag(const std::string& key, const std::string& value, bool* out) {
  if (value != "0" && value != "1") {
    return Status::InvalidArgument("URL parameter " + key + "='" + value + "' must be 0 or 1");
  }
  *out = value == "1";
  return Status::Ok();
}

}  // namespace

std::string TlsVerifyNote(bool tls_enabled, bool verify) {
  return tls_enabled && !verify ? " (certificate not verified: tls_verify=0)" : "";
}

Status CheckSniName(const std::string& name) {
  unsigned char address[sizeof(in6_addr)];
  if (inet_pton(AF_INET, name.c_str(), address) == 1 ||
      inet_pton(AF_INET6, name.c_str(), address) == 1) {
    return Status::Ok();
  }
  bool ok = !name.empty() && name.size() <= 253 && name.front() != '.' && name.front() != '-' &&
            name.find("..") == std::string::npos;
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_');
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument(
      "URL parameter sni= must be a host name (letters, digits, '-', '_' and '.') or an IP "
      "address: it is the name sent in the TLS handshake and checked in the certificate");
}

Status ParseTlsParams(const Url& url, const std::vector<std::pair<std::string, std::string>>& values,
                      bool on_by_scheme, const std::string& how_to_enable, TlsParams* out) {
  out->enabled = on_by_scheme;
  std::string companion;  // a TLS setting given, which means nothing without TLS
  const auto& names = TlsParamNames();
  for (const auto& [key, value] : values) {
    if (std::find(names.begin(), names.end(), key) == names.end()) continue;
    Status s;
    if (key == "tls") {
      bool on = false;
      s = ParseFlag(key, value, &on);
      if (s.ok() && !on && on_by_scheme) {
        s = Status::InvalidArgument("URL parameter tls=0 contradicts " + url.scheme + "://");
      }
      if (s.ok()) out->enabled = out->enabled || on;
    } else if (key == "tls_verify") {
      s = ParseFlag(key, value, &out->verify);
    } else if (value.empty()) {
      s = Status::InvalidArgument("URL parameter " + key + "= is empty");
    } else if (key == "sni") {
      s = CheckSniName(value);
      if (s.ok()) out->sni = value;
    } else {
      (key == "ca" ? out->ca : key == "cert" ? out->cert : out->key) = value;
    }
    if (!s.ok()) return s;
    if (key != "tls" && companion.empty()) companion = key;
  }
  if (!companion.empty() && !out->enabled) {
    return Status::InvalidArgument("URL parameter " + companion +
                                   "= is a TLS setting, but TLS is off (" + how_to_enable + ")");
  }
  if (out->cert.empty() != out->key.empty()) {
    return Status::InvalidArgument(
        "URL parameters cert= and key= go together (a client certificate and its key)");
  }
  return Status::Ok();
}

}  // namespace dlock
