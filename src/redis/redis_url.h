// Redis connection settings from redis:// and redis+unix:// URLs.
#ifndef DLOCK_REDIS_REDIS_URL_H_
#define DLOCK_REDIS_REDIS_URL_H_

#include <optional>
#include <string>

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

  // "redis 127.0.0.1:6379" or "redis unix:/path": how errors name the server.
  std::string Describe() const;
};

Status ParseRedisUrl(const Url& url, RedisConfig* out);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_REDIS_URL_H_
