// URLs of every scheme: the generic parser, then the backend's own reading of it. Whatever the
// text, parsing returns a Status; it never crashes, and the redacted form never shows the
// password.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/url.h"
#include "dynamodb/dynamodb_config.h"
#include "etcd/etcd_config.h"
#include "redis/redis_url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)dlock::RedactUrl(text);
  dlock::Url url;
  if (!dlock::ParseUrl(text, &url).ok()) return 0;
  dlock::redis::RedisConfig redis;
  if (dlock::redis::ParseRedisUrl(url, &redis).ok()) (void)redis.Describe();
  dlock::redis::RedisClusterConfig cluster;
  if (dlock::redis::ParseRedisClusterUrl(url, &cluster).ok()) {
    for (const auto& seed : cluster.seeds) (void)cluster.At(seed.host, seed.port).Describe();
  }
  dlock::redis::RedisSentinelConfig sentinel;
  if (dlock::redis::ParseRedisSentinelUrl(url, &sentinel).ok()) {
    for (const auto& s : sentinel.sentinels) (void)sentinel.SentinelAt(s).Describe();
    (void)sentinel.MasterAt("127.0.0.1", 6379).Describe();
  }
  dlock::dynamodb::DynamoConfig dynamo;
  if (dlock::dynamodb::ParseDynamoUrl(url, &dynamo).ok()) {
    std::string partition, sort;
    (void)dlock::dynamodb::SplitLockName(dynamo, text, &partition, &sort);
  }
  dlock::etcd::EtcdConfig etcd;
  if (dlock::etcd::ParseEtcdUrl(url, &etcd).ok()) {
    for (size_t i = 0; i < etcd.endpoints.size(); ++i) (void)etcd.Post(i, "/v3/kv/txn", "{}");
    (void)etcd.Describe();
  }
  return 0;
}
