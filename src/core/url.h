// Backend URLs: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
// Generic parsing here; each backend interprets the parts it understands.
#ifndef DLOCK_CORE_URL_H_
#define DLOCK_CORE_URL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/secret.h"
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
  std::optional<Secret> password;       // percent-decoded; set when "user:password@"
  std::vector<HostPort> hosts;          // empty for "scheme:///path"
  std::string path;                     // percent-decoded, with its leading '/'
  std::vector<std::pair<std::string, std::string>> query;  // percent-decoded, in order
  // An '@' lies past where the authority ends (in the path or query), so a password holding an
  // unencoded '/', '?' or '#' may have been misread as a host, port, path or query: errors
  // about this URL must echo none of it (UrlError).
  bool unclear_userinfo = false;
  // The secrets as RedactUrl finds them in the text (the password up to the last '@', the
  // values of secret parameters wherever they stand), raw and percent-decoded: no error about
  // this URL may hold one (UrlError).
  std::vector<Secret> secrets;

  Url() = default;
  Url(const Url&) = default;
  Url(Url&&) = default;
  Url& operator=(const Url&) = default;
  Url& operator=(Url&&) = default;
  ~Url();  // wipes the values of secret query parameters
};

// The message of an error about a URL that may show a secret (UrlError): it echoes nothing.
extern const char kUnclearUrlMessage[];

// Parses text into out. Errors name the bad part and never echo a password: a URL that fails
// and holds an '@' that does not plainly end the userinfo gets kUnclearUrlMessage.
Status ParseUrl(const std::string& text, Url* out);

// s, or for an error about a URL whose userinfo is unclear, or whose message holds one of
// url.secrets, kUnclearUrlMessage instead of s's message. Every backend's reading of a URL
// returns its errors through it.
Status UrlError(const Url& url, Status s);

// Parameters every backend accepts.
struct CommonParams {
  std::string prefix = "dlock:";
  int connect_timeout_ms = 2000;
  int timeout_ms = 3000;
};

// URL parameter metrics_groups=N (0..1000, default 0): how many groups of lock names get
// series of their own in the client's metrics (Metrics::EnableGroups). Common to every scheme.
Status ParseMetricsGroups(const Url& url, uint32_t* out);

// Reads the common parameters from url.query into out; a parameter that is neither common nor
// in backend_params is an error naming it (unless it follows a secret parameter, of whose
// value it may be a piece). Backend parameters are returned in backend_values.
Status ParseCommonParams(const Url& url, const std::vector<std::string>& backend_params,
                         CommonParams* out,
                         std::vector<std::pair<std::string, std::string>>* backend_values);

// Wipes the values of the secret parameters among values (before values is freed).
void CleanseSecretParams(std::vector<std::pair<std::string, std::string>>* values);

// Parameters, name and value, whose secret values are wiped when the list is freed.
struct ParamList : std::vector<std::pair<std::string, std::string>> {
  ParamList() = default;
  ParamList(const ParamList&) = default;
  ParamList& operator=(const ParamList&) = default;
  ~ParamList() { CleanseSecretParams(this); }
};

// TLS settings from a URL, the same on every scheme that has TLS: tls=1, ca= (PEM file of
// trusted CAs; the system's store when absent), cert= and key= (a client certificate and its
// key, both or neither), sni= (the name sent in the handshake and checked in the certificate
// instead of the host; a host name or an IP address, checked as such), tls_verify=0 (no check
// of the server's certificate at all: Describe() and dlock -v say "certificate not verified").
struct TlsParams {
  bool enabled = false;
  std::string ca;
  std::string cert;
  std::string key;
  std::string sni;
  bool verify = true;
};

// What a description of a server adds when its certificate is not checked (tls_verify=0):
// " (certificate not verified: tls_verify=0)"; "" when it is, or without TLS.
std::string TlsVerifyNote(bool tls_enabled, bool verify);

// EINVAL naming URL parameter sni= unless name is a host name (letters, digits, '-', '_' and
// '.') or an IP address: it goes into the TLS handshake and etcd's request URL, where a '/',
// ':', '@', '?' or '#' would send the request elsewhere.
Status CheckSniName(const std::string& name);

// The TLS parameter names, for ParseCommonParams' backend_params.
const std::vector<std::string>& TlsParamNames();

// Reads the TLS parameters among values (others are ignored) into out. on_by_scheme: the
// scheme itself means TLS (rediss://), so tls=0 contradicts it. A TLS setting without TLS is
// an error whose message ends with how_to_enable ("use rediss:// or tls=1").
Status ParseTlsParams(const Url& url, const std::vector<std::pair<std::string, std::string>>& values,
                      bool on_by_scheme, const std::string& how_to_enable, TlsParams* out);

// EINVAL naming URL parameter param=path when the file cannot be opened for reading.
Status CheckReadableFile(const std::string& param, const std::string& path);
// CheckReadableFile for each of ca=, cert= and key= that is set (backends that hand the paths
// to a library, which would fail later and less clearly).
Status CheckTlsFiles(const TlsParams& tls);

// Parses a decimal integer in [lo, hi]; what names the value in the error.
Status ParseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what,
                int64_t* out);

}  // namespace dlock

#endif  // DLOCK_CORE_URL_H_
