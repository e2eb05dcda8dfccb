// URLs of every scheme: the generic parser, then the backend's own reading of it. Whatever the
// text, parsing returns a Status; it never crashes.
//
// And the redaction property: a 16-byte password is planted in a URL built from the input, in
// the userinfo (scheme://USER:PASSWORD@REST) or as sentinel_password= (scheme://REST?BEFORE&
// sentinel_password=PASSWORD&AFTER), unencoded, among the input's bytes. It must appear in no
// output: not in RedactUrl (dlock_url_redact), not in the message of any reading's error (what
// dlock_last_error() says when a client cannot open), not in a Describe() (how errors name the
// server; but see Outputs for a URL that reads another way). The password is derived from a
// hash of the input: the fuzzer cannot aim at it.
#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/url.h"
#include "dynamodb/dynamodb_config.h"
#include "etcd/etcd_config.h"
#include "redis/redis_url.h"

namespace {

const char* const kSchemes[] = {"redis",  "rediss",   "redis+unix", "redis-cluster", "redis-sentinel",
                                "redlock", "dynamodb", "etcd",       "postgres",      "re dis"};

// 16 printable bytes (URL delimiters included: / ? # @ : & = %) from a hash of the input.
std::string PasswordFor(const uint8_t* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, digest, &len, EVP_sha256(), nullptr);
  std::string password;
  for (unsigned i = 0; i < 16; ++i) password.push_back(static_cast<char>(0x21 + digest[i] % 94));
  return password;
}

// What each reading of text shows: its errors' messages, and the descriptions of what it names.
// A URL whose '@' lies past the authority (redis+unix:///a:b@c.sock) but that parses anyway is
// taken as written: its socket path and hosts are what it names, and descriptions show them.
// For it only RedactUrl and the errors count.
std::vector<std::string> Outputs(const std::string& text) {
  std::vector<std::string> out{dlock::RedactUrl(text)};
  dlock::Url url;
  dlock::Status s = dlock::ParseUrl(text, &url);
  out.push_back(s.message());
  if (!s.ok()) return out;
  std::vector<std::string> named;
  dlock::redis::RedisConfig redis;
  s = dlock::redis::ParseRedisUrl(url, &redis);
  (s.ok() ? named : out).push_back(s.ok() ? redis.Describe() : s.message());
  dlock::redis::RedisClusterConfig cluster;
  s = dlock::redis::ParseRedisClusterUrl(url, &cluster);
  out.push_back(s.message());
  if (s.ok()) {
    for (const auto& seed : cluster.seeds) named.push_back(cluster.At(seed.host, seed.port).Describe());
  }
  dlock::redis::RedisSentinelConfig sentinel;
  s = dlock::redis::ParseRedisSentinelUrl(url, &sentinel);
  out.push_back(s.message());
  if (s.ok()) {
    for (const auto& one : sentinel.sentinels) named.push_back(sentinel.SentinelAt(one).Describe());
    named.push_back(sentinel.MasterAt("127.0.0.1", 6379).Describe());
  }
  dlock::redis::RedlockConfig redlock;
  s = dlock::redis::ParseRedlockUrl(url, &redlock);
  out.push_back(s.message());
  if (s.ok()) {
    for (const auto& master : redlock.masters) named.push_back(redlock.At(master).Describe());
  }
  dlock::dynamodb::DynamoConfig dynamo;
  s = dlock::dynamodb::ParseDynamoUrl(url, &dynamo);
  (s.ok() ? named : out).push_back(s.ok() ? dynamo.Describe() : s.message());
  if (s.ok()) {
    std::string partition, sort;
    (void)dlock::dynamodb::SplitLockName(dynamo, text, &partition, &sort);  // text as a name
  }
  dlock::etcd::EtcdConfig etcd;
  s = dlock::etcd::ParseEtcdUrl(url, &etcd);
  (s.ok() ? named : out).push_back(s.ok() ? etcd.Describe() : s.message());
  if (s.ok()) {
    for (size_t i = 0; i < etcd.endpoints.size(); ++i) (void)etcd.Post(i, "/v3/kv/txn", "{}");
  }
  if (!url.unclear_userinfo) out.insert(out.end(), named.begin(), named.end());
  return out;
}

void CheckHidden(const std::string& text, const std::string& password) {
  for (const std::string& shown : Outputs(text)) {
    if (shown.find(password) == std::string::npos) continue;
    std::fprintf(stderr, "the password leaked\n  URL: %s\n  password: %s\n  shown: %s\n",
                 text.c_str(), password.c_str(), shown.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The input itself as a URL: no crash, whatever it holds.
  (void)Outputs(std::string(reinterpret_cast<const char*>(data), size));
  if (size < 2) return 0;

  // The input as the parts of a URL that holds a password.
  const std::string password = PasswordFor(data, size);
  const std::string scheme = kSchemes[data[0] % (sizeof kSchemes / sizeof kSchemes[0])];
  const bool in_query = data[0] & 0x80;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = rest.find('\n');  // the input's first part, then its second
  const std::string first = rest.substr(0, cut);
  const std::string second = cut == std::string::npos ? "" : rest.substr(cut + 1);
  if (!in_query) {
    CheckHidden(scheme + "://" + first + ":" + password + "@" + second, password);
  } else if (password.find('&') == std::string::npos) {
    // The value of sentinel_password= in the query: '?' before it (first may end the query's
    // start earlier), '&' or the end after it. (An '&' in the password would cut it in two.)
    const std::string before = first.empty() || first.back() == '?' || first.back() == '&'
                                   ? first
                                   : first + "&";
    const std::string head = scheme + "://" + (before.find('?') == std::string::npos ? "h/m?" : "");
    CheckHidden(head + before + "sentinel_password=" + password + (second.empty() ? "" : "&" + second),
                password);
  }
  return 0;
}
