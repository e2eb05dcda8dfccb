// Backend URLs: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
// Generic parsing here; each backend interprets the parts it understands.
#ifndef DLOCK_CORE_URL_H_
#define DLOCK_CORE_URL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/text.h"

namespace dlock {

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;      // 0 when absent
};

struct Url {
  std::string scheme;                   // lowercase
  std::optional<std::string> user;      // percent-decoded; set when userinfo was present
  std::optional<std::string> password;  // percent-decoded; set when "user:password@"
  std::vector<HostPort> hosts;          // empty for "scheme:///path"
  std::string path;                     // percent-decoded, with its leading '/'
  std::vector<std::pair<std::string, std::string>> query;  // percent-decoded, in order
};

// Parses text into out. Errors name the bad part and never echo a password.
Status ParseUrl(const std::string& text, Url* out);

// Parameters every backend accepts.
struct CommonParams {
  std::string prefix = "dlock:";
  int connect_timeout_ms = 2000;
  int timeout_ms = 3000;
};

// Reads the common parameters from url.query into out; a parameter that is neither common nor
// in backend_params is an error naming it. Backend parameters are returned in backend_values.
Status ParseCommonParams(const Url& url, const std::vector<std::string>& backend_params,
                         CommonParams* out,
                         std::vector<std::pair<std::string, std::string>>* backend_values);

// TLS settings from a URL, the same on every scheme that has TLS: tls=1, ca= (PEM file of
// trusted CAs; the system's store when absent), cert= and key= (a client certificate and its
// key, both or neither), sni= (the name sent in the handshake and checked in the certificate
// instead of the host), tls_verify=0 (no check of the server's certificate at all).
struct TlsParams {
  bool enabled = false;
  std::string ca;
  std::string cert;
  std::string key;
  std::string sni;
  bool verify = true;
};

// The TLS parameter names, for ParseCommonParams' backend_params.
const std::vector<std::string>& TlsParamNames();

// Reads the TLS parameters among values (others are ignored) into out. on_by_scheme: the
// scheme itself means TLS (rediss://), so tls=0 contradicts it. A TLS setting without TLS is
// an error whose message ends with how_to_enable ("use rediss:// or tls=1").
Status ParseTlsParams(const Url& url, const std::vector<std::pair<std::string, std::string>>& values,
                      bool on_by_scheme, const std::string& how_to_enable, TlsParams* out);

// EINVAL naming URL parameter param=path when the file cannot be opened for reading.
Status CheckReadableFile(const std::string& param, const std::string& path);

// Parses a decimal integer in [lo, hi]; what names the value in the error.
Status ParseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what,
                int64_t* out);

}  // namespace dlock

#endif  // DLOCK_CORE_URL_H_
