#include "redis/redis_url.h"

#include <algorithm>

namespace dlock::redis {

std::string RedisConfig::Describe() const {
  if (!socket_path.empty()) return "redis unix:" + socket_path;
  bool v6 = host.find(':') != std::string::npos;
  return "redis " + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) +
         TlsVerifyNote(tls.enabled, tls.verify);
}

namespace {

// rediss://, or tls=1 and its companions on any Redis scheme.
Status ParseTls(const Url& url, const std::vector<std::pair<std::string, std::string>>& values,
                TlsParams* out) {
  Status s = ParseTlsParams(url, values, url.scheme == "rediss", "use rediss:// or tls=1", out);
  if (s.ok() && out->enabled && url.scheme == "redis+unix") {
    return Status::InvalidArgument("TLS is for TCP connections, not redis+unix://");
  }
  return s;
}

// The parts every Redis scheme shares: credentials, the common parameters, wait_replicas and
// TLS. The scheme's own parameters (backend_params) are returned in extra.
Status ParseShared(const Url& url, std::vector<std::string> backend_params, RedisConfig* out,
                   std::vector<std::pair<std::string, std::string>>* extra) {
  backend_params.push_back("wait_replicas");
  const auto& tls_names = TlsParamNames();
  backend_params.insert(backend_params.end(), tls_names.begin(), tls_names.end());
  ParamList values;
  Status s = ParseCommonParams(url, backend_params, &out->params, &values);
  if (!s.ok()) return s;
  std::vector<std::pair<std::string, std::string>> tls;
  for (auto& [key, value] : values) {
    if (std::find(tls_names.begin(), tls_names.end(), key) != tls_names.end()) {
      tls.emplace_back(key, value);
      continue;
    }
    if (key != "wait_replicas") {
      extra->emplace_back(key, value);
      continue;
    }
    int64_t n;
    s = ParseInt(value, 0, 64, "URL parameter wait_replicas", &n);
    if (!s.ok()) return s;
    out->wait_replicas = static_cast<int>(n);
  }
  s = ParseTls(url, tls, &out->tls);
  if (!s.ok()) return s;
  if (url.user.has_value() && !url.user->empty()) out->user = url.user;
  out->password = url.password;
  if (out->user.has_value() && !out->password.has_value()) {
    return Status::InvalidArgument("URL names user '" + *out->user +
                                   "' without a password (use user:password@ or :password@)");
  }
  return Status::Ok();
}

}  // namespace

RedisConfig RedisClusterConfig::At(const std::string& host, int port) const {
  RedisConfig c = node;
  c.host = host;
  c.port = port;
  return c;
}

namespace {

Status ReadRedisClusterUrl(const Url& url, RedisClusterConfig* out) {
  *out = RedisClusterConfig();
  ParamList extra;
  Status s = ParseShared(url, {}, &out->node, &extra);
  if (!s.ok()) return s;
  if (url.hosts.empty()) {
    return Status::InvalidArgument(
        "redis-cluster:// URL has no host (expected redis-cluster://host:port[,host:port...])");
  }
  if (!url.path.empty() && url.path != "/") {
    return Status::InvalidArgument("redis-cluster:// URL has a path ('" + url.path +
                                   "'): a cluster has database 0 only");
  }
  for (HostPort seed : url.hosts) {
    if (seed.port == 0) seed.port = 6379;
    out->seeds.push_back(std::move(seed));
  }
  return Status::Ok();
}

}  // namespace

Status ParseRedisClusterUrl(const Url& url, RedisClusterConfig* out) {
  return UrlError(url, ReadRedisClusterUrl(url, out));
}

RedisConfig RedlockConfig::At(const HostPort& master) const {
  RedisConfig c = node;
  c.host = master.host;
  c.port = master.port;
  return c;
}

namespace {

Status ReadRedlockUrl(const Url& url, RedlockConfig* out) {
  *out = RedlockConfig();
  ParamList extra;
  Status s = ParseShared(url, {}, &out->node, &extra);
  if (!s.ok()) return s;
  if (out->node.wait_replicas != 0) {
    return Status::InvalidArgument(
        "redlock:// takes no wait_replicas: the quorum is of masters, each its own (drop it)");
  }
  if (!url.path.empty() && url.path != "/") {
    return Status::InvalidArgument("redlock:// URL has a path ('" + url.path +
                                   "'): the masters are used with database 0 only");
  }
  for (HostPort master : url.hosts) {
    if (master.port == 0) master.port = 6379;
    for (const HostPort& seen : out->masters) {
      if (seen.host == master.host && seen.port == master.port) {
        return Status::InvalidArgument("redlock:// URL names " + master.host + ":" +
                                       std::to_string(master.port) +
                                       " twice: each master has one vote");
      }
    }
    out->masters.push_back(std::move(master));
  }
  if (out->masters.size() < 3) {
    return Status::InvalidArgument(
        "redlock:// URL names " + std::to_string(out->masters.size()) +
        (out->masters.size() == 1 ? " master" : " masters") +
        ": a quorum needs at least 3 independent ones (an odd number: 3, 5, ...; expected "
        "redlock://host:port,host:port,host:port)");
  }
  return Status::Ok();
}

}  // namespace

Status ParseRedlockUrl(const Url& url, RedlockConfig* out) {
  return UrlError(url, ReadRedlockUrl(url, out));
}

RedisConfig RedisSentinelConfig::MasterAt(const std::string& host, int port) const {
  RedisConfig c = node;
  c.host = host;
  c.port = port;
  return c;
}

RedisConfig RedisSentinelConfig::SentinelAt(const HostPort& sentinel) const {
  RedisConfig c;
  c.host = sentinel.host;
  c.port = sentinel.port;
  c.password = sentinel_password;
  c.params = node.params;
  c.tls = node.tls;  // tls=1 is for the sentinels and the master alike
  c.tls_context = node.tls_context;
  c.connections = node.connections;  // a client's sentinel connections count as its own
  return c;
}

namespace {

Status ReadRedisSentinelUrl(const Url& url, RedisSentinelConfig* out) {
  *out = RedisSentinelConfig();
  ParamList extra;
  Status s = ParseShared(url, {"sentinel_password", "db"}, &out->node, &extra);
  if (!s.ok()) return s;
  for (const auto& [key, value] : extra) {
    if (key == "sentinel_password") {
      out->sentinel_password = value;
    } else {
      int64_t db;
      s = ParseInt(value, 0, 1 << 30, "URL parameter db", &db);
      if (!s.ok()) return s;
      out->node.db = static_cast<int>(db);
    }
  }
  if (url.hosts.empty()) {
    return Status::InvalidArgument(
        "redis-sentinel:// URL has no sentinel (expected redis-sentinel://host:port[,host:port...]/MASTER_NAME)");
  }
  if (url.path.size() < 2 || url.path.find('/', 1) != std::string::npos) {
    return Status::InvalidArgument(
        "redis-sentinel:// URL must name the master once after the hosts "
        "(redis-sentinel://host:port[,host:port...]/MASTER_NAME)");
  }
  out->master_name = url.path.substr(1);
  for (HostPort sentinel : url.hosts) {
    if (sentinel.port == 0) sentinel.port = 26379;
    out->sentinels.push_back(std::move(sentinel));
  }
  return Status::Ok();
}

}  // namespace

Status ParseRedisSentinelUrl(const Url& url, RedisSentinelConfig* out) {
  return UrlError(url, ReadRedisSentinelUrl(url, out));
}

Status LoadTls(RedisConfig* config) {
  if (!config->tls.enabled) return Status::Ok();
  return TlsContext::Create(config->tls, &config->tls_context);
}

namespace {

Status ReadRedisUrl(const Url& url, RedisConfig* out) {
  *out = RedisConfig();
  const bool unix_socket = url.scheme == "redis+unix";
  ParamList extra;
  Status s = ParseShared(url, unix_socket ? std::vector<std::string>{"db"} : std::vector<std::string>{},
                         out, &extra);
  if (!s.ok()) return s;
  if (unix_socket) {
    if (!url.hosts.empty()) {
      return Status::InvalidArgument("redis+unix:// URL must not name a host: use redis+unix:///path/to.sock");
    }
    if (url.path.empty() || url.path == "/") {
      return Status::InvalidArgument("redis+unix:// URL has no socket path (expected redis+unix:///path/to.sock)");
    }
    out->socket_path = url.path;
    for (const auto& [key, value] : extra) {
      int64_t db;
      s = ParseInt(value, 0, 1 << 30, "URL parameter db", &db);
      if (!s.ok()) return s;
      out->db = static_cast<int>(db);
    }
    return Status::Ok();
  }
  if (url.hosts.empty()) return Status::InvalidArgument("redis:// URL has no host (expected redis://host[:port][/db])");
  if (url.hosts.size() > 1) {
    return Status::InvalidArgument("redis:// URL names " + std::to_string(url.hosts.size()) +
                                   " hosts; it takes one (several independent masters are redlock://)");
  }
  out->host = url.hosts[0].host;
  if (url.hosts[0].port != 0) out->port = url.hosts[0].port;
  if (!url.path.empty() && url.path != "/") {
    int64_t db;
    s = ParseInt(url.path.substr(1), 0, 1 << 30, "URL database number", &db);
    if (!s.ok()) return s;
    out->db = static_cast<int>(db);
  }
  return Status::Ok();
}

}  // namespace

Status ParseRedisUrl(const Url& url, RedisConfig* out) {
  return UrlError(url, ReadRedisUrl(url, out));
}

}  // namespace dlock::redis
