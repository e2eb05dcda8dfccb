// URL parsing: every part, and errors that name what is wrong without echoing secrets.
#include <gtest/gtest.h>

#include "core/url.h"
#include "redis/redis_url.h"

namespace dlock {
namespace {

Status ParseRedis(const std::string& text, redis::RedisConfig* config) {
  Url url;
  Status s = ParseUrl(text, &url);
  if (!s.ok()) return s;
  return redis::ParseRedisUrl(url, config);
}

TEST(UrlTest, ParsesFullRedisUrl) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis://alice:s%40cret@db.example.com:6380/3?prefix=app:&timeout_ms=250", &c).ok());
  EXPECT_EQ(c.host, "db.example.com");
  EXPECT_EQ(c.port, 6380);
  EXPECT_EQ(*c.user, "alice");
  EXPECT_EQ(*c.password, "s@cret");
  EXPECT_EQ(c.db, 3);
  EXPECT_EQ(c.params.prefix, "app:");
  EXPECT_EQ(c.params.timeout_ms, 250);
  EXPECT_EQ(c.params.connect_timeout_ms, 2000);
  EXPECT_EQ(c.Describe(), "redis db.example.com:6380");
}

TEST(UrlTest, DefaultsAndPasswordOnly) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis://:pw@localhost", &c).ok());
  EXPECT_EQ(c.port, 6379);
  EXPECT_FALSE(c.user.has_value());
  EXPECT_EQ(*c.password, "pw");
  EXPECT_EQ(c.db, 0);
  EXPECT_EQ(c.params.prefix, "dlock:");
}

TEST(UrlTest, Ipv6Host) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis://[::1]:7000", &c).ok());
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 7000);
  EXPECT_EQ(c.Describe(), "redis [::1]:7000");
}

TEST(UrlTest, UnixSocket) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis+unix:///run/redis.sock?db=2", &c).ok());
  EXPECT_EQ(c.socket_path, "/run/redis.sock");
  EXPECT_EQ(c.db, 2);
  EXPECT_EQ(c.Describe(), "redis unix:/run/redis.sock");
}

TEST(UrlTest, WaitReplicasOnEveryRedisScheme) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis://h?wait_replicas=2", &c).ok());
  EXPECT_EQ(c.wait_replicas, 2);
  ASSERT_TRUE(ParseRedis("redis+unix:///s.sock?wait_replicas=1&db=1", &c).ok());
  EXPECT_EQ(c.wait_replicas, 1);
  EXPECT_EQ(ParseRedis("redis://h?wait_replicas=-1", &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseRedis("redis://h?wait_replicas=65", &c).code(), Code::kInvalidArgument);
}

TEST(UrlTest, TlsByRedissOrTlsOneWithItsSettings) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("rediss://:pw@h:6380/2", &c).ok());
  EXPECT_TRUE(c.tls.enabled);
  EXPECT_TRUE(c.tls.verify);
  EXPECT_EQ(c.port, 6380);
  EXPECT_EQ(c.db, 2);
  ASSERT_TRUE(ParseRedis("redis://h", &c).ok());
  EXPECT_FALSE(c.tls.enabled);
  ASSERT_TRUE(ParseRedis("redis://h?tls=1&ca=/c/ca.pem&cert=/c/me.pem&key=/c/me.key&sni=redis.example&"
                         "tls_verify=0",
                         &c)
                  .ok());
  EXPECT_TRUE(c.tls.enabled);
  EXPECT_EQ(c.tls.ca, "/c/ca.pem");
  EXPECT_EQ(c.tls.cert, "/c/me.pem");
  EXPECT_EQ(c.tls.key, "/c/me.key");
  EXPECT_EQ(c.tls.sni, "redis.example");
  EXPECT_FALSE(c.tls.verify);
  EXPECT_EQ(c.tls_context, nullptr);  // files are read at open (LoadTls), not when parsing
}

Status ParseCluster(const std::string& text, redis::RedisClusterConfig* config) {
  Url url;
  Status s = ParseUrl(text, &url);
  if (!s.ok()) return s;
  return redis::ParseRedisClusterUrl(url, config);
}

TEST(UrlTest, ClusterSeedsAndSharedSettings) {
  redis::RedisClusterConfig c;
  ASSERT_TRUE(ParseCluster("redis-cluster://u:p@10.0.0.1:7000,[::1]:7001,node3?timeout_ms=500&wait_replicas=1",
                           &c).ok());
  ASSERT_EQ(c.seeds.size(), 3u);
  EXPECT_EQ(c.seeds[1].host, "::1");
  EXPECT_EQ(c.seeds[2].port, 6379);
  EXPECT_EQ(*c.node.user, "u");
  EXPECT_EQ(c.node.params.timeout_ms, 500);
  EXPECT_EQ(c.node.wait_replicas, 1);
  redis::RedisConfig node = c.At("10.0.0.9", 7005);
  EXPECT_EQ(node.Describe(), "redis 10.0.0.9:7005");
  EXPECT_EQ(*node.password, "p");
  EXPECT_FALSE(node.tls.enabled);
  ASSERT_TRUE(ParseCluster("redis-cluster://h:1?tls=1&sni=c.example", &c).ok());
  EXPECT_TRUE(c.At("10.0.0.9", 7005).tls.enabled);
  EXPECT_EQ(c.At("10.0.0.9", 7005).tls.sni, "c.example");
  Status s = ParseCluster("redis-cluster://h:1/2", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("database 0 only"), std::string::npos) << s.message();
  s = ParseCluster("redis-cluster:///x", &c);
  EXPECT_NE(s.message().find("no host"), std::string::npos) << s.message();
  s = ParseCluster("redis-cluster://h:1?db=1", &c);
  EXPECT_NE(s.message().find("db"), std::string::npos) << s.message();
}

TEST(UrlTest, RedlockMastersQuorumAndWhatItRefuses) {
  auto parse = [](const std::string& text, redis::RedlockConfig* c) {
    Url url;
    Status s = ParseUrl(text, &url);
    return s.ok() ? redis::ParseRedlockUrl(url, c) : s;
  };
  redis::RedlockConfig c;
  ASSERT_TRUE(parse("redlock://:pw@10.0.0.1:7000,[::1]:7001,node3?timeout_ms=300&tls=1", &c).ok());
  ASSERT_EQ(c.masters.size(), 3u);
  EXPECT_EQ(c.quorum(), 2u);
  EXPECT_EQ(c.masters[1].host, "::1");
  EXPECT_EQ(c.masters[2].port, 6379);
  redis::RedisConfig node = c.At(c.masters[0]);
  EXPECT_EQ(node.Describe(), "redis 10.0.0.1:7000");
  EXPECT_EQ(*node.password, "pw");
  EXPECT_EQ(node.params.timeout_ms, 300);
  EXPECT_TRUE(node.tls.enabled);
  ASSERT_TRUE(parse("redlock://a:1,b:1,c:1,d:1,e:1", &c).ok());
  EXPECT_EQ(c.quorum(), 3u);
  ASSERT_TRUE(parse("redlock://a:1,b:1,c:1,d:1", &c).ok());  // even: allowed, 3 of 4 must agree
  EXPECT_EQ(c.quorum(), 3u);

  // One or two masters, the same one twice, a database, wait_replicas: each named.
  const std::pair<const char*, const char*> refused[] = {
      {"redlock://a:1", "names 1 master: a quorum needs at least 3"},
      {"redlock://a:1,b:1", "names 2 masters: a quorum needs at least 3"},
      {"redlock://a:1,b:1,a:1", "names a:1 twice"},
      {"redlock://a,b:6379,a", "names a:6379 twice"},
      {"redlock://a:1,b:1,c:1/2", "database 0 only"},
      {"redlock://a:1,b:1,c:1?wait_replicas=1", "no wait_replicas"},
      {"redlock://a:1,b:1,c:1?bogus=1", "bogus"},
      {"redlock:///", "names 0 masters"},
  };
  for (const auto& [text, words] : refused) {
    Status s = parse(text, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(words), std::string::npos) << text << ": " << s.message();
  }
}

TEST(UrlTest, SentinelsMasterNameAndTheirOwnPassword) {
  auto parse = [](const std::string& text, redis::RedisSentinelConfig* c) {
    Url url;
    Status s = ParseUrl(text, &url);
    return s.ok() ? redis::ParseRedisSentinelUrl(url, c) : s;
  };
  redis::RedisSentinelConfig c;
  ASSERT_TRUE(parse("redis-sentinel://:pw@10.0.0.1,10.0.0.2:5000/my%20master?sentinel_password=sp&db=2&wait_replicas=1",
                    &c).ok());
  ASSERT_EQ(c.sentinels.size(), 2u);
  EXPECT_EQ(c.sentinels[0].port, 26379);
  EXPECT_EQ(c.sentinels[1].port, 5000);
  EXPECT_EQ(c.master_name, "my master");
  EXPECT_EQ(*c.sentinel_password, "sp");
  redis::RedisConfig master = c.MasterAt("10.0.0.9", 6380);
  EXPECT_EQ(*master.password, "pw");
  EXPECT_EQ(master.db, 2);
  EXPECT_EQ(master.wait_replicas, 1);
  redis::RedisConfig sentinel = c.SentinelAt(c.sentinels[0]);
  EXPECT_EQ(*sentinel.password, "sp");  // its own password, not the master's
  EXPECT_EQ(sentinel.db, 0);
  ASSERT_TRUE(parse("redis-sentinel://h/m", &c).ok());
  EXPECT_FALSE(c.SentinelAt(c.sentinels[0]).password.has_value());
  EXPECT_FALSE(c.SentinelAt(c.sentinels[0]).tls.enabled);
  // tls=1 is for the sentinels and the master alike.
  ASSERT_TRUE(parse("redis-sentinel://h/m?tls=1&ca=/ca.pem", &c).ok());
  EXPECT_TRUE(c.SentinelAt(c.sentinels[0]).tls.enabled);
  EXPECT_EQ(c.SentinelAt(c.sentinels[0]).tls.ca, "/ca.pem");
  EXPECT_TRUE(c.MasterAt("10.0.0.9", 6380).tls.enabled);
  for (const char* bad : {"redis-sentinel://h", "redis-sentinel://h/", "redis-sentinel://h/a/b",
                          "redis-sentinel:///m"}) {
    Status s = parse(bad, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_TRUE(s.message().find("MASTER_NAME") != std::string::npos ||
                s.message().find("no sentinel") != std::string::npos)
        << s.message();
  }
}

struct BadUrl {
  const char* url;
  const char* message_part;
};

class BadUrlTest : public ::testing::TestWithParam<BadUrl> {};

TEST_P(BadUrlTest, IsRejectedWithAMessageNamingTheProblem) {
  redis::RedisConfig c;
  Status s = ParseRedis(GetParam().url, &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << GetParam().url;
  EXPECT_NE(s.message().find(GetParam().message_part), std::string::npos)
      << "message: " << s.message();
}

INSTANTIATE_TEST_SUITE_P(
    All, BadUrlTest,
    ::testing::Values(BadUrl{"", "no scheme"}, BadUrl{"localhost:6379", "no scheme"},
                      BadUrl{"redis://", "no host"}, BadUrl{"redis://host:0", "port"},
                      BadUrl{"redis://host:99999", "port"}, BadUrl{"redis://host:abc", "port"},
                      BadUrl{"redis://host:", "empty port"}, BadUrl{"redis://host/x", "database"},
                      BadUrl{"redis://host/-1", "database"},
                      BadUrl{"redis://host?bogus=1", "unknown URL parameter 'bogus'"},
                      BadUrl{"redis://host?timeout_ms=0", "timeout_ms"},
                      BadUrl{"redis://host?timeout_ms=1&timeout_ms=2", "twice"},
                      BadUrl{"redis://host?prefix=a{b", "prefix"},
                      BadUrl{"redis://a:1,b:2", "one"}, BadUrl{"redis://ho st", "space"},
                      BadUrl{"redis://[::1", "unclosed"}, BadUrl{"redis://h:1:2", "brackets"}, BadUrl{"redis://host#frag", "fragment"},
                      BadUrl{"redis://user@host", "without a password"},
                      BadUrl{"redis://host/%zz", "percent"},
                      BadUrl{"redis+unix://host/sock", "must not name a host"},
                      BadUrl{"redis+unix://", "no socket path"},
                      BadUrl{"redis://h?db=1", "unknown URL parameter 'db'"},
                      BadUrl{"redis://h?ca=/x.pem", "ca= is a TLS setting, but TLS is off"},
                      BadUrl{"redis://h?tls=0&sni=x", "sni= is a TLS setting"},
                      BadUrl{"rediss://h?tls=0", "contradicts rediss://"},
                      BadUrl{"rediss://h?tls=yes", "tls='yes' must be 0 or 1"},
                      BadUrl{"rediss://h?tls_verify=2", "must be 0 or 1"},
                      BadUrl{"rediss://h?ca=", "ca= is empty"},
                      BadUrl{"redis+unix:///s.sock?tls=1", "TLS is for TCP"}));

TEST(UrlTest, ErrorsNeverShowThePassword) {
  Url url;
  Status s = ParseUrl("redis://user:hunter2@host:bad", &url);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << s.message();
  EXPECT_EQ(RedactUrl("redis://user:hunter2@host:1/0"), "redis://user:***@host:1/0");
}

}  // namespace
}  // namespace dlock
