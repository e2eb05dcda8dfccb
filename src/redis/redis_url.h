// Redis connection settings from redis://, redis+unix:// and redis-cluster:// URLs.
#ifndef DLOCK_REDIS_REDIS_URL_H_
#define DLOCK_REDIS_REDIS_URL_H_

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/url.h"

namespace dlock::redis {

struct RedisConfig {
  std::string host;         // TCP host, empty for a unix socket
  int port = 6379;
  std::string socket_path;  // unix socket path, empty for TCP
  std::optional<std::string> user;
  std::optional<std::string> password;
  int db = 0;
  CommonParams params;
  // wait_replicas=N: an acquire counts only once N replicas acknowledged it (WAIT).
  int wait_replicas = 0;

  // "redis 127.0.0.1:6379" or "redis unix:/path": how errors name the server.
  std::string Describe() const;
};

Status ParseRedisUrl(const Url& url, RedisConfig* out);

// redis-cluster://[[user]:password@]host:port[,host:port...][?params]: the seed nodes, and the
// settings every node of the cluster shares (node.host/port unset).
struct RedisClusterConfig {
  RedisConfig node;
  std::vector<HostPort> seeds;
  // The settings of the node at host:port.
  RedisConfig At(const std::string& host, int port) const;
};

Status ParseRedisClusterUrl(const Url& url, RedisClusterConfig* out);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_REDIS_URL_H_
