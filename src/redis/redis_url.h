// Redis connection settings from redis://, rediss://, redis+unix://, redis-cluster://,
// redis-sentinel:// and redlock:// URLs. Every scheme takes the common parameters (prefix=,
// connect_timeout_ms=, timeout_ms=), wait_replicas= and the TLS ones (tls=1, ca=, cert=, key=,
// sni=, tls_verify=0; rediss:// is redis:// with tls=1). Every Parse*Url returns its errors
// through UrlError (core/url.h): none shows a secret of the URL.
#ifndef DLOCK_REDIS_REDIS_URL_H_
#define DLOCK_REDIS_REDIS_URL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/connection_count.h"
#include "core/status.h"
#include "core/url.h"
#include "redis/wire/tls.h"

namespace dlock::redis {

struct RedisConfig {
  std::string host;         // TCP host, empty for a unix socket
  int port = 6379;
  std::string socket_path;  // unix socket path, empty for TCP
  std::optional<std::string> user;
  std::optional<Secret> password;  // wiped when freed (core/secret.h)
  int db = 0;
  CommonParams params;
  // wait_replicas=N: an acquire counts only once N replicas acknowledged it (WAIT).
  int wait_replicas = 0;
  TlsParams tls;
  // Made from tls at open (files read once), shared by every connection of the client; null
  // for plain connections.
  std::shared_ptr<const TlsContext> tls_context;
  // Made at open, shared by every connection of the client (sentinels' too): the
  // dlock_connections gauge. Null (nothing counted) where no client is (prepare).
  std::shared_ptr<ConnectionCount> connections;

  // "redis 127.0.0.1:6379" or "redis unix:/path": how errors name the server; with
  // tls_verify=0 it adds " (certificate not verified: tls_verify=0)".
  std::string Describe() const;
  // The AUTH command for these credentials (AUTH [user] password); empty without a password.
  std::vector<std::string> AuthCommand() const {
    if (!password.has_value()) return {};
    std::vector<std::string> auth{"AUTH"};
    if (user.has_value()) auth.push_back(*user);
    auth.push_back(*password);
    return auth;
  }
};

// redis://, rediss:// (TLS) and redis+unix://.
Status ParseRedisUrl(const Url& url, RedisConfig* out);
// With TLS on, makes config->tls_context from config->tls: reads the CA, certificate and key
// files (DLOCK_EINVAL naming a file that is missing, unreadable or does not fit). At open.
Status LoadTls(RedisConfig* config);

// redis-cluster://[[user]:password@]host:port[,host:port...][?params]: the seed nodes, and the
// settings every node of the cluster shares (node.host/port unset).
struct RedisClusterConfig {
  RedisConfig node;
  std::vector<HostPort> seeds;
  // The settings of the node at host:port.
  RedisConfig At(const std::string& host, int port) const;
};

Status ParseRedisClusterUrl(const Url& url, RedisClusterConfig* out);

// redis-sentinel://[[user]:password@]host:port[,host:port...]/MASTER_NAME[?params]: the
// sentinels (port 26379 unless given), the master's name, and the settings of the master
// (node.host/port unset). Sentinels are reached with sentinel_password= (none by default),
// the same timeouts, no user, database 0.
struct RedisSentinelConfig {
  RedisConfig node;
  std::vector<HostPort> sentinels;
  std::string master_name;
  std::optional<Secret> sentinel_password;
  RedisConfig MasterAt(const std::string& host, int port) const;
  RedisConfig SentinelAt(const HostPort& sentinel) const;
};

Status ParseRedisSentinelUrl(const Url& url, RedisSentinelConfig* out);

// redlock://[[user]:password@]host:port,host:port,host:port[,...][?params]: N >= 3 independent
// masters (port 6379 unless given; the same host:port twice is refused: one server cannot vote
// twice), each reached with the settings in node (node.host/port unset). wait_replicas is
// refused: a quorum's safety rests on the masters, not on their replicas.
struct RedlockConfig {
  RedisConfig node;
  std::vector<HostPort> masters;
  RedisConfig At(const HostPort& master) const;
  // How many masters must agree: N/2 + 1.
  size_t quorum() const { return masters.size() / 2 + 1; }
};

Status ParseRedlockUrl(const Url& url, RedlockConfig* out);

// The node settings of any scheme's config: the TLS parameters live there.
inline RedisConfig& NodeOf(RedisConfig& config) { return config; }
template <typename Config>
RedisConfig& NodeOf(Config& config) {
  return config.node;
}

// A scheme's config from its URL, TLS files loaded: parse, then load, written once for every
// Redis scheme (its backend's open and prepare both start here).
template <typename Config>
Status ConfigFromUrl(const Url& url, Status (*parse)(const Url&, Config*), Config* out) {
  Status s = parse(url, out);
  return s.ok() ? LoadTls(&NodeOf(*out)) : s;
}

// dlock_backend_prepare for a Redis scheme: nothing to create, only the URL and files checked.
template <typename Config>
Status CheckUrl(const Url& url, Status (*parse)(const Url&, Config*)) {
  Config config;
  return ConfigFromUrl(url, parse, &config);
}

// A backend opened for a Redis scheme: make(config) once the config is read.
template <typename Config, typename Make>
Status OpenFromUrl(const Url& url, Status (*parse)(const Url&, Config*), Make make,
                   std::unique_ptr<Backend>* out) {
  Config config;
  Status s = ConfigFromUrl(url, parse, &config);
  if (!s.ok()) return s;
  NodeOf(config).connections = std::make_shared<ConnectionCount>();
  *out = make(config);
  return s;
}

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_REDIS_URL_H_
