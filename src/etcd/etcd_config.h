// etcd://host[:port][,host[:port]...][?prefix=&connect_timeout_ms=&timeout_ms=&layout=&tls=1&ca=
//       &cert=&key=&sni=&tls_verify=0]: the endpoints of one etcd cluster (v3, its JSON gateway),
// tried in order, port 2379 unless given. layout=mutex speaks etcd's own lock recipe (the keys
// of `etcdctl lock` and Go's concurrency.Mutex: lock_protocol.h, "layout=mutex"); prefix=
// defaults to empty there, so that both meet on the same keys.
#ifndef DLOCK_ETCD_ETCD_CONFIG_H_
#define DLOCK_ETCD_ETCD_CONFIG_H_

#include <string>
#include <vector>

#include "core/status.h"
#include "core/url.h"
#include "http/request.h"

namespace dlock::etcd {

inline constexpr int kDefaultPort = 2379;
// Endpoints in one URL, at most: each may cost a connect on the way to a working one.
inline constexpr size_t kMaxEndpoints = 16;

// How lock names map onto keys: dlock's own (the default) or etcd's recipe.
enum class Layout { kNative, kMutex };

struct EtcdConfig {
  std::vector<HostPort> endpoints;
  Layout layout = Layout::kNative;
  CommonParams params;
  TlsParams tls;

  // "etcd 127.0.0.1:2379,127.0.0.1:22379": how errors name the cluster (with tls_verify=0,
  // " (certificate not verified: tls_verify=0)" after it).
  std::string Describe() const;
  // "127.0.0.1:2379": how errors name one endpoint.
  std::string Endpoint(size_t i) const;
  // A POST of body to path ("/v3/kv/txn") on endpoint i, with the URL's bounds and TLS.
  http::Request Post(size_t i, const std::string& path, std::string body) const;
};

// Reads an etcd:// URL; with TLS on, checks that the named files can be read (EINVAL naming
// the file otherwise). Errors never show a secret of the URL (UrlError).
Status ParseEtcdUrl(const Url& url, EtcdConfig* out);

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_ETCD_CONFIG_H_
