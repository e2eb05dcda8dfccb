#include "etcd/etcd_config.h"

#include <algorithm>

namespace dlock::etcd {
namespace {

std::string HostText(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

std::string EtcdConfig::Endpoint(size_t i) const {
  return HostText(endpoints[i].host) + ":" + std::to_string(endpoints[i].port);
}

std::string EtcdConfig::Describe() const {
  std::string out = "etcd ";
  for (size_t i = 0; i < endpoints.size(); ++i) out += (i == 0 ? "" : ",") + Endpoint(i);
  return out + TlsVerifyNote(tls.enabled, tls.verify);
}

http::Request EtcdConfig::Post(size_t i, const std::string& path, std::string body) const {
  http::Request r;
  r.method = "POST";
  const std::string port = std::to_string(endpoints[i].port);
  if (!tls.enabled) {
    r.url = "http://" + Endpoint(i) + path;
  } else {
    // sni= names the host the certificate must match: the URL carries it, the connection
    // goes to the endpoint's address.
    const std::string& name = tls.sni.empty() ? endpoints[i].host : tls.sni;
    r.url = "https://" + HostText(name) + ":" + port + path;
    if (!tls.sni.empty()) r.connect_to = HostText(name) + ":" + port + ":" + HostText(endpoints[i].host) + ":" + port;
    r.ca_file = tls.ca;
    r.cert_file = tls.cert;
    r.key_file = tls.key;
    r.tls_verify = tls.verify;
  }
  r.headers = {"Content-Type: application/json"};
  r.body = std::move(body);
  r.connect_timeout_ms = params.connect_timeout_ms;
  r.timeout_ms = params.timeout_ms;
  return r;
}

namespace {

Status ReadEtcdUrl(const Url& url, EtcdConfig* out) {
  *out = EtcdConfig();
  if (url.user.has_value() || url.password.has_value()) {
    return Status::InvalidArgument(
        "etcd:// takes no user or password (etcd's own authentication is not supported; a TLS "
        "client certificate, cert= and key=, is)");
  }
  if (!url.path.empty() && url.path != "/") {
    return Status::InvalidArgument("etcd:// takes no path ('" + url.path +
                                   "'); the key prefix is the prefix= parameter");
  }
  if (url.hosts.empty()) return Status::InvalidArgument("etcd:// needs at least one host:port");
  if (url.hosts.size() > kMaxEndpoints) {
    return Status::InvalidArgument("etcd:// names " + std::to_string(url.hosts.size()) +
                                   " endpoints; at most " + std::to_string(kMaxEndpoints));
  }
  for (HostPort hp : url.hosts) {
    if (hp.host.empty()) return Status::InvalidArgument("etcd:// has an empty host");
    if (hp.port == 0) hp.port = kDefaultPort;
    out->endpoints.push_back(hp);
  }
  std::vector<std::pair<std::string, std::string>> values;
  std::vector<std::string> names = TlsParamNames();
  names.push_back("layout");
  Status s = ParseCommonParams(url, names, &out->params, &values);
  if (s.ok()) s = ParseTlsParams(url, values, /*on_by_scheme=*/false, "add tls=1", &out->tls);
  if (!s.ok()) return s;
  for (const auto& [param, value] : values) {
    if (param != "layout") continue;
    if (value == "mutex") {
      out->layout = Layout::kMutex;
    } else if (value != "native") {
      return Status::InvalidArgument("URL parameter layout='" + value +
                                     "' is neither 'native' (dlock's keys, the default) nor 'mutex' "
                                     "(etcd's lock recipe, shared with etcdctl lock)");
    }
  }
  // In etcd's recipe the name is the key prefix itself: no "dlock:" before it unless asked for.
  const bool prefix_given = std::any_of(url.query.begin(), url.query.end(),
                                        [](const auto& kv) { return kv.first == "prefix"; });
  if (out->layout == Layout::kMutex && !prefix_given) out->params.prefix.clear();
  return CheckTlsFiles(out->tls);
}

}  // namespace

Status ParseEtcdUrl(const Url& url, EtcdConfig* out) {
  return UrlError(url, ReadEtcdUrl(url, out));
}

}  // namespace dlock::etcd
