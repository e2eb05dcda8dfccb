// URL parsing: every part, and errors that name what is wrong without echoing secrets.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/secret.h"
#include "core/url.h"
#include "etcd/etcd_config.h"
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

// metrics_groups= is common to every scheme: 0..1000, anything else names the parameter.
TEST(UrlTest, MetricsGroupsIsCheckedOnEveryScheme) {
  redis::RedisConfig c;
  EXPECT_TRUE(ParseRedis("redis://localhost?metrics_groups=20", &c).ok());
  for (const char* bad : {"redis://localhost?metrics_groups=1001", "redis://localhost?metrics_groups=-1",
                          "redis://localhost?metrics_groups=x"}) {
    Status s = ParseRedis(bad, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("metrics_groups"), std::string::npos) << s.message();
  }
  Url url;
  ASSERT_TRUE(ParseUrl("etcd://h:1?metrics_groups=7", &url).ok());
  uint32_t groups = 0;
  ASSERT_TRUE(ParseMetricsGroups(url, &groups).ok());
  EXPECT_EQ(groups, 7u);
  Status unknown = ParseRedis("redis://localhost?metric_groups=2", &c);
  EXPECT_NE(unknown.message().find("metrics_groups"), std::string::npos) << "the known list names it: " << unknown.message();
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


// ----- secrets: passwords holding '/', '?', '#' or '@', secret query parameters -----------

TEST(UrlTest, RedactHidesPasswordsHoldingSlashQuestionMarkHashOrAt) {
  EXPECT_EQ(RedactUrl("redis://:pa#ss@h"), "redis://:***@h");
  EXPECT_EQ(RedactUrl("redis://app:Zm9v/YmFy@h"), "redis://app:***@h");
  EXPECT_EQ(RedactUrl("redis://u:p?w@h:1/0"), "redis://u:***@h:1/0");
  EXPECT_EQ(RedactUrl("redis://u:p@ss@h:1"), "redis://u:***@h:1");
  EXPECT_EQ(RedactUrl("redis://u:a/b?c#d@h:1/2?prefix=x"), "redis://u:***@h:1/2?prefix=x");
  // Slashes missing or doubled: the password is still found.
  EXPECT_EQ(RedactUrl("redis:/:Xq7Zk9@h"), "redis:/:***@h");
  EXPECT_EQ(RedactUrl("redis::Xq7Zk9@h"), "redis::***@h");
  // No password: unchanged, an '@' elsewhere included.
  EXPECT_EQ(RedactUrl("redis://user@h:1"), "redis://user@h:1");
  EXPECT_EQ(RedactUrl("redis+unix:///tmp/a@b.sock"), "redis+unix:///tmp/a@b.sock");
  EXPECT_EQ(RedactUrl("redis://h/?prefix=a@b"), "redis://h/?prefix=a@b");
}

// A URL typed without its scheme still hides its password (dlock --url 'app:pw@h:6379' puts
// what dlock_url_redact shows into argv).
TEST(UrlTest, RedactHidesThePasswordOfAUrlWithoutAScheme) {
  for (const std::string url : {"app:Zm9vYmFy@h:6379", ":Zm9vYmFy@h", "redis:Zm9vYmFy@h"}) {
    const std::string shown = RedactUrl(url);
    EXPECT_EQ(shown.find("Zm9vYmFy"), std::string::npos) << url << " -> " << shown;
  }
}

TEST(UrlTest, RedactHidesSecretQueryParametersByName) {
  EXPECT_EQ(RedactUrl("redis-sentinel://h/m?sentinel_password=Xq7Zk9&db=2"),
            "redis-sentinel://h/m?sentinel_password=***&db=2");
  EXPECT_EQ(RedactUrl("redis-sentinel://h/m?db=2&sentinel_password=Xq7Zk9"),
            "redis-sentinel://h/m?db=2&sentinel_password=***");
  // Its name percent-encoded is the same parameter to the parser.
  EXPECT_EQ(RedactUrl("redis-sentinel://h/m?sentinel%5Fpassword=Xq7Zk9"),
            "redis-sentinel://h/m?sentinel%5Fpassword=***");
  // A bare '&' in the password: the pieces that are no name=value go with it.
  EXPECT_EQ(RedactUrl("redis-sentinel://h/m?sentinel_password=Xq7&Zk9&db=1"),
            "redis-sentinel://h/m?sentinel_password=***&db=1");
  EXPECT_EQ(RedactUrl("redis-sentinel://:pw@h/m?sentinel_password=sp"),
            "redis-sentinel://:***@h/m?sentinel_password=***");
  // Found by fuzz_url: a secret parameter before the first ':' of a misread userinfo.
  EXPECT_EQ(RedactUrl("redis-sentinel://h/m?sentinel_password=Xq7Zk9&p=x/is://a:b@c"),
            "redis-sentinel://h/m?sentinel_password=***&p=x/is:***@c");
  EXPECT_EQ(RedactUrl("etcd://h/m?r:/=x@t&sentinel_password=@Xq7Zk9"),
            "etcd://h/m?r:***");  // the password to the last '@' and the value, as one
  EXPECT_TRUE(IsSecretUrlParam("sentinel_password"));
  EXPECT_FALSE(IsSecretUrlParam("prefix"));
}

// Every backend's reading of text, after the generic one: the first error.
std::vector<Status> ParseEveryWay(const std::string& text) {
  Url url;
  Status s = ParseUrl(text, &url);
  if (!s.ok()) return {s};
  redis::RedisConfig r;
  redis::RedisClusterConfig c;
  redis::RedisSentinelConfig sentinel;
  redis::RedlockConfig redlock;
  etcd::EtcdConfig e;
  return {redis::ParseRedisUrl(url, &r), redis::ParseRedisClusterUrl(url, &c),
          redis::ParseRedisSentinelUrl(url, &sentinel), redis::ParseRedlockUrl(url, &redlock),
          etcd::ParseEtcdUrl(url, &e)};
}

TEST(UrlTest, AnUnclearUrlWithAnAtGetsAFixedMessageThatEchoesNothing) {
  // Each holds the password Xq7Zk9 (maybe cut by a '/', '?' or '#'): no error may show a piece.
  for (const char* text :
       {"redis://app:Xq7/Zk9@h", "redis://:Xq7#Zk9@h", "redis://u:Xq7?Zk9@h",
        "redis://u:Xq7?Zk9=1@h", "redis://u:12/Xq7Zk9@h", "redis://u:Xq7Zk9/@h",
        "redis:/:Xq7Zk9@h", "redis:Xq7Zk9@h", "re dis://:Xq7Zk9@h", "redis://u:Xq7Zk9@h#",
        "redis-cluster://u:1/Xq7Zk9@h", "redlock://u:1/Xq7Zk9@a,b,c", "etcd://u:1/Xq7Zk9@h",
        "redis+unix://u:Xq7Zk9@/s.sock?x=1"}) {
    for (const Status& s : ParseEveryWay(text)) {
      if (s.ok()) continue;
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
      for (const char* piece : {"Xq7", "Zk9"}) {
        EXPECT_EQ(s.message().find(piece), std::string::npos) << text << ": " << s.message();
      }
    }
  }
  Url url;
  Status s = ParseUrl("redis://app:Zm9v/YmFy@h", &url);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("percent-encode"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("Zm9v"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("YmFy"), std::string::npos) << s.message();
}

TEST(UrlTest, QueryErrorsAfterASecretParameterEchoNothingOfIt) {
  // A raw '&' in sentinel_password cuts it: the rest must not be echoed as a parameter.
  for (const char* text : {"redis-sentinel://h/m?sentinel_password=ab&Xq7Zk9",
                           "redis-sentinel://h/m?sentinel_password=ab&Xq7Zk9=1",
                           "redis-sentinel://h/m?sentinel_password=ab&Xq7Zk9=1&Xq7Zk9=2"}) {
    for (const Status& s : ParseEveryWay(text)) {
      if (s.ok()) continue;
      EXPECT_EQ(s.message().find("Xq7Zk9"), std::string::npos) << text << ": " << s.message();
    }
  }
}

TEST(UrlTest, UrlsWithAnAtElsewhereKeepWorking) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("redis://h:1/?prefix=a@b:", &c).ok());
  EXPECT_EQ(c.params.prefix, "a@b:");
  ASSERT_TRUE(ParseRedis("redis+unix:///tmp/a@b.sock", &c).ok());
  EXPECT_EQ(c.socket_path, "/tmp/a@b.sock");
  ASSERT_TRUE(ParseRedis("redis://:p%2Fw%3F%23%40@h", &c).ok());
  EXPECT_EQ(*c.password, "p/w?#@");
  // An '@' inside the authority only: errors still say what is wrong (and hide the password).
  Status s = ParseRedis("redis://:Xq7Zk9@h?bogus=1", &c);
  EXPECT_NE(s.message().find("bogus"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("Xq7Zk9"), std::string::npos) << s.message();
}

// ----- TLS: tls_verify=0 is said, sni= is a host name ---------------------------------------

TEST(UrlTest, DescribeSaysWhenTheCertificateIsNotVerified) {
  redis::RedisConfig c;
  ASSERT_TRUE(ParseRedis("rediss://h:1?tls_verify=0", &c).ok());
  EXPECT_NE(c.Describe().find("certificate not verified"), std::string::npos) << c.Describe();
  ASSERT_TRUE(ParseRedis("rediss://h:1", &c).ok());
  EXPECT_EQ(c.Describe(), "redis h:1");
  ASSERT_TRUE(ParseRedis("redis://h:1?tls_verify=1&tls=1", &c).ok());
  EXPECT_EQ(c.Describe(), "redis h:1");
  redis::RedisClusterConfig cluster;
  ASSERT_TRUE(ParseCluster("redis-cluster://h:1?tls=1&tls_verify=0", &cluster).ok());
  EXPECT_NE(cluster.At("h", 2).Describe().find("certificate not verified"), std::string::npos);
  Url url;
  etcd::EtcdConfig e;
  ASSERT_TRUE(ParseUrl("etcd://h:1?tls=1&tls_verify=0", &url).ok());
  ASSERT_TRUE(etcd::ParseEtcdUrl(url, &e).ok());
  EXPECT_NE(e.Describe().find("certificate not verified"), std::string::npos) << e.Describe();
  ASSERT_TRUE(ParseUrl("etcd://h:1?tls=1", &url).ok());
  ASSERT_TRUE(etcd::ParseEtcdUrl(url, &e).ok());
  EXPECT_EQ(e.Describe(), "etcd h:1");
}

// The reading of text by the backend its scheme names (the others refuse it for other reasons).
Status ParseByScheme(const std::string& text) {
  std::vector<Status> all = ParseEveryWay(text);
  if (all.size() == 1) return all[0];
  // redis, cluster, sentinel, redlock, etcd
  return text.rfind("rediss:", 0) == 0           ? all[0]
         : text.rfind("redis-cluster:", 0) == 0  ? all[1]
         : text.rfind("redis-sentinel:", 0) == 0 ? all[2]
         : text.rfind("redlock:", 0) == 0        ? all[3]
                                                 : all[4];
}

TEST(UrlTest, SniMustBeAHostNameOnEveryScheme) {
  for (const char* good : {"redis.example", "a-b.c1", "redis_1", "10.0.0.1", "::1", "fe80::1"}) {
    for (const std::string prefix : {"rediss://h?", "redis-cluster://h:1?tls=1&",
                                     "redis-sentinel://h/m?tls=1&", "redlock://a,b,c?tls=1&",
                                     "etcd://h?tls=1&"}) {
      const std::string text = prefix + "sni=" + good;
      Status s = ParseByScheme(text);
      EXPECT_TRUE(s.ok()) << text << ": " << s.message();
    }
  }
  for (const char* bad : {"evil.example/", "evil.example%2Fx", "a:1", "user%40h", "a%3Fb",
                          "a%23b", "a%20b", "-a.b", "a..b", "[::1]", "%00"}) {
    for (const std::string prefix : {"rediss://h?", "redis-cluster://h:1?tls=1&",
                                     "redis-sentinel://h/m?tls=1&", "redlock://a,b,c?tls=1&",
                                     "etcd://h?tls=1&"}) {
      const std::string text = prefix + "sni=" + bad;
      Url url;
      ASSERT_TRUE(ParseUrl(text, &url).ok()) << text;
      Status s = ParseByScheme(text);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
      EXPECT_NE(s.message().find("sni="), std::string::npos) << text << ": " << s.message();
    }
  }
  // etcd pastes it into the request's URL: only a checked name gets there.
  etcd::EtcdConfig e;
  Url url;
  ASSERT_TRUE(ParseUrl("etcd://127.0.0.1:2379?tls=1&sni=::1", &url).ok());
  ASSERT_TRUE(etcd::ParseEtcdUrl(url, &e).ok());
  EXPECT_EQ(e.Post(0, "/v3/kv/txn", "{}").url, "https://[::1]:2379/v3/kv/txn");
}

// ----- secrets wiped when freed (a test hook sees the buffer right after the wipe) ----------

struct CleansedBuffer {
  const char* data;
  size_t len;
  bool all_zero;
};
std::vector<CleansedBuffer>* cleansed = nullptr;

void RecordCleanse(const char* data, size_t len) {
  bool zero = true;
  for (size_t i = 0; i < len; ++i) zero = zero && data[i] == '\0';
  if (cleansed != nullptr) cleansed->push_back({data, len, zero});
}

class SecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cleansed = &seen_;
    SetCleanseHookForTesting(RecordCleanse);
  }
  void TearDown() override {
    SetCleanseHookForTesting(nullptr);
    cleansed = nullptr;
  }
  // Whether the buffer at data was wiped whole (at least len bytes, all zero).
  bool Wiped(const char* data, size_t len) const {
    for (const CleansedBuffer& b : seen_) {
      if (b.data == data && b.len >= len && b.all_zero) return true;
    }
    return false;
  }
  std::vector<CleansedBuffer> seen_;
};

TEST_F(SecretTest, ItsWholeBufferIsWipedBeforeItIsFreed) {
  const std::string text(100, 'k');
  const char* buffer = nullptr;
  size_t capacity = 0;
  {
    Secret s = text;
    s.reserve(300);  // the wipe covers the capacity, not only the text
    buffer = s.data();
    capacity = s.capacity();
  }
  EXPECT_TRUE(Wiped(buffer, capacity));
}

TEST_F(SecretTest, AssignmentAndMoveWipeWhatTheyGiveUp) {
  Secret a = std::string(64, 'a');
  const char* old_buffer = a.data();
  const size_t old_capacity = a.capacity();
  a = Secret(std::string(500, 'b'));  // a bigger one: a's old buffer is freed
  EXPECT_TRUE(Wiped(old_buffer, old_capacity));
  EXPECT_EQ(a, std::string(500, 'b'));

  Secret short_one = "pw";  // in the object itself (short-string optimisation)
  const char* inline_buffer = short_one.data();
  Secret taken = std::move(short_one);
  EXPECT_TRUE(Wiped(inline_buffer, 2)) << "the moved-from object keeps no copy";
  EXPECT_EQ(taken, "pw");

  std::string plain(40, 'p');
  const char* plain_buffer = plain.data();
  Secret from_plain = std::move(plain);  // takes the buffer: nothing left to wipe in plain
  EXPECT_EQ(from_plain.data(), plain_buffer);
  EXPECT_EQ(from_plain, std::string(40, 'p'));
}

TEST_F(SecretTest, UrlPasswordsAndSecretParametersAreSecrets) {
  const char* password = nullptr;
  size_t capacity = 0;
  {
    Url url;
    ASSERT_TRUE(ParseUrl("redis://:a-password-longer-than-sso@h", &url).ok());
    redis::RedisConfig c;
    ASSERT_TRUE(redis::ParseRedisUrl(url, &c).ok());
    password = c.password->data();
    capacity = c.password->capacity();
    EXPECT_EQ(*c.password, "a-password-longer-than-sso");
  }
  EXPECT_TRUE(Wiped(password, capacity));
  {
    Url url;
    ASSERT_TRUE(ParseUrl("redis-sentinel://h/m?sentinel_password=a-sentinel-password-too", &url).ok());
    password = url.query[0].second.data();
    capacity = url.query[0].second.capacity();
  }
  EXPECT_TRUE(Wiped(password, capacity));
}

}  // namespace
}  // namespace dlock
