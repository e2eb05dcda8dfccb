// The etcd backend's pure parts: its URL and the JSON gateway's text (what goes out, and what
// it makes of what comes back, hostile answers included).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/url.h"
#include "etcd/etcd_config.h"
#include "etcd/gateway.h"
#include "etcd/lock_protocol.h"

namespace dlock::etcd {
namespace {

Json Parse(const std::string& text) {
  Json j;
  EXPECT_TRUE(ParseObject(text, &j)) << text;
  return j;
}

Status ParseEtcd(const std::string& text, EtcdConfig* out) {
  Url url;
  Status s = ParseUrl(text, &url);
  return s.ok() ? ParseEtcdUrl(url, out) : s;
}

TEST(EtcdUrlTest, EndpointsDefaultsAndDescription) {
  EtcdConfig c;
  ASSERT_TRUE(ParseEtcd("etcd://10.0.0.1,10.0.0.2:3379,[::1]:4000?prefix=app:&timeout_ms=500", &c).ok());
  ASSERT_EQ(c.endpoints.size(), 3u);
  EXPECT_EQ(c.endpoints[0].port, 2379);
  EXPECT_EQ(c.Describe(), "etcd 10.0.0.1:2379,10.0.0.2:3379,[::1]:4000");
  EXPECT_EQ(c.params.prefix, "app:");
  EXPECT_EQ(c.params.timeout_ms, 500);
  http::Request r = c.Post(2, "/v3/kv/range", "{}");
  EXPECT_EQ(r.url, "http://[::1]:4000/v3/kv/range");
  EXPECT_EQ(r.timeout_ms, 500);
  EXPECT_FALSE(c.tls.enabled);
}

TEST(EtcdUrlTest, BadUrlsSayWhatIsWrong) {
  EtcdConfig c;
  auto error = [&](const std::string& url) {
    Status s = ParseEtcd(url, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << url;
    return s.message();
  };
  EXPECT_NE(error("etcd://user:pw@h:1").find("no user or password"), std::string::npos);
  EXPECT_NE(error("etcd://h:1/locks").find("no path"), std::string::npos);
  EXPECT_NE(error("etcd://h:1?ca=/x").find("TLS is off"), std::string::npos);
  EXPECT_NE(error("etcd://h:1?tls=1&cert=/x").find("go together"), std::string::npos);
  EXPECT_NE(error("etcd://h:1?tls=1&ca=/no/such/file.pem").find("/no/such/file.pem"), std::string::npos);
  EXPECT_NE(error("etcd://h:1?wait_replicas=1").find("unknown URL parameter 'wait_replicas'"), std::string::npos);
  std::string many = "etcd://";
  for (int i = 0; i < 17; ++i) many += (i ? ",h:" : "h:") + std::to_string(1000 + i);
  EXPECT_NE(error(many).find("at most 16"), std::string::npos);
}

// layout=mutex: etcd's recipe, whose keys carry no prefix unless one is given.
TEST(EtcdUrlTest, MutexLayoutDropsThePrefixUnlessGiven) {
  EtcdConfig c;
  ASSERT_TRUE(ParseEtcd("etcd://h:1", &c).ok());
  EXPECT_EQ(c.layout, Layout::kNative);
  EXPECT_EQ(c.params.prefix, "dlock:");
  ASSERT_TRUE(ParseEtcd("etcd://h:1?layout=mutex", &c).ok());
  EXPECT_EQ(c.layout, Layout::kMutex);
  EXPECT_EQ(c.params.prefix, "");
  ASSERT_TRUE(ParseEtcd("etcd://h:1?prefix=app/&layout=mutex", &c).ok());
  EXPECT_EQ(c.params.prefix, "app/");
  ASSERT_TRUE(ParseEtcd("etcd://h:1?layout=native", &c).ok());
  EXPECT_EQ(c.layout, Layout::kNative);
  Status s = ParseEtcd("etcd://h:1?layout=Mutex", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("layout='Mutex'"), std::string::npos) << s.message();
  // The range of a name's keys, as etcd's clientv3.GetPrefixRangeEnd makes it.
  EXPECT_EQ(PrefixEnd("a/"), "a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff")), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff")), std::string(1, '\0'));
}

TEST(EtcdUrlTest, TlsWithSniConnectsToTheEndpointButChecksTheName) {
  EtcdConfig c;
  ASSERT_TRUE(ParseEtcd("etcd://127.0.0.1:2379?tls=1&sni=etcd.example&tls_verify=0", &c).ok());
  http::Request r = c.Post(0, "/v3/kv/txn", "{}");
  EXPECT_EQ(r.url, "https://etcd.example:2379/v3/kv/txn");
  EXPECT_EQ(r.connect_to, "etcd.example:2379:127.0.0.1:2379");
  EXPECT_FALSE(r.tls_verify);
}

TEST(EtcdGatewayTest, Base64RoundTripsAnyBytes) {
  for (std::string bytes : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                            std::string("dlock:\0\xff\x80name", 13)}) {
    std::string back;
    ASSERT_TRUE(Base64Decode(Base64Encode(bytes), &back));
    EXPECT_EQ(back, bytes);
  }
  std::string out;
  EXPECT_FALSE(Base64Decode("abc", &out));
  EXPECT_FALSE(Base64Decode("a!c=", &out));
}

TEST(EtcdGatewayTest, NumbersAreClampedBeforeUse) {
  Json j = Parse(R"({"big":"99999999999999999999","neg":"-5","text":"12x","num":7,"huge":18446744073709551615})");
  EXPECT_EQ(ReadInt(j, "big", 0, 100, -1), 100);
  EXPECT_EQ(ReadInt(j, "neg", 0, 100, -1), 0);
  EXPECT_EQ(ReadInt(j, "text", 0, 100, -1), -1);
  EXPECT_EQ(ReadInt(j, "num", 0, 100, -1), 7);
  EXPECT_EQ(ReadInt(j, "huge", 0, 100, -1), 100);
  EXPECT_EQ(ReadInt(j, "missing", 0, 100, -1), -1);
  int64_t ttl = 0;
  ASSERT_TRUE(ReadKeepAlive(Parse(R"({"result":{"ID":"1","TTL":"999999999999999"}})"), &ttl).ok());
  EXPECT_EQ(ttl, kMaxLeaseTtlS);
}

TEST(EtcdGatewayTest, AcquireTransactionWonOrRefused) {
  Json body = Parse(TxnBody(Json::array({CompareCreateEqual("dlock:a", 0)}),
                            Json::array({PutRequest("dlock:a", "owner|label", 42)}),
                            Json::array({RangeRequest("dlock:a", "dlock:a\x01")})));
  EXPECT_EQ(body["compare"][0]["target"], "CREATE");
  EXPECT_EQ(body["compare"][0]["create_revision"], "0");
  EXPECT_EQ(body["success"][0]["request_put"]["lease"], "42");
  EXPECT_EQ(body["failure"][0]["request_range"]["key"], Base64Encode("dlock:a"));
  EXPECT_FALSE(PutRequest("k", "v", 0)["request_put"].contains("lease"));

  TxnAnswer won;
  ASSERT_TRUE(ReadTxn(Parse(R"({"header":{"revision":"17"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"17"}}}]})"), &won).ok());
  EXPECT_TRUE(won.succeeded);
  EXPECT_EQ(won.revision, 17);

  TxnAnswer refused;  // "succeeded": false is left out, as the gateway does
  ASSERT_TRUE(ReadTxn(Parse(R"({"header":{"revision":"18"},"responses":[{"response_range":{"header":{"revision":"18"},"kvs":[{"key":"ZGxvY2s6YQ==","create_revision":"9","mod_revision":"9","version":"1","value":"b3RoZXI=","lease":"77"}],"count":"1"}}]})"), &refused).ok());
  EXPECT_FALSE(refused.succeeded);
  ASSERT_EQ(refused.kvs.size(), 1u);
  EXPECT_EQ(refused.kvs[0].key, "dlock:a");
  EXPECT_EQ(refused.kvs[0].value, "other");
  EXPECT_EQ(refused.kvs[0].create_revision, 9);
  EXPECT_EQ(refused.kvs[0].lease, 77);
}

// The kinds' transactions: range compares (every key in [key, range_end) must pass) and reads.
TEST(EtcdGatewayTest, RangeComparesAndRangeReads) {
  Json empty = CompareRangeEmpty(std::string("k\0h", 3), std::string("k\0i", 3));
  EXPECT_EQ(empty["target"], "VERSION");
  EXPECT_EQ(empty["result"], "EQUAL");
  EXPECT_EQ(empty["version"], "0");
  EXPECT_EQ(empty["key"], Base64Encode(std::string("k\0h", 3)));
  EXPECT_EQ(empty["range_end"], Base64Encode(std::string("k\0i", 3)));
  Json moved = CompareRangeModAtMost("a", "b", 41);
  EXPECT_EQ(moved["target"], "MOD");
  EXPECT_EQ(moved["result"], "LESS");
  EXPECT_EQ(moved["mod_revision"], "42") << "at most 41: less than 42";
  EXPECT_EQ(CompareRangeModAtMost("a", "b", INT64_MAX)["mod_revision"], std::to_string(INT64_MAX));
  EXPECT_EQ(CompareCreateEqual("a", 0)["create_revision"], "0");
  Json txn = Parse(TxnBody(Json::array({empty}), Json::array({PutRequest("a", "v", 7), DeleteRequest("w")}),
                           Json::array({RangeRequest("a", "a\x01")})));
  EXPECT_EQ(txn["success"][0]["request_put"]["lease"], "7");
  EXPECT_EQ(txn["success"][1]["request_delete_range"]["key"], Base64Encode("w"));
  EXPECT_EQ(txn["failure"][0]["request_range"]["range_end"], Base64Encode("a\x01"));
  EXPECT_FALSE(Parse(TxnBody(Json::array(), Json::array(), Json())).contains("failure"));
  EXPECT_EQ(Parse(PutBody("a", "v", 0)), Parse(R"({"key":"YQ==","value":"dg=="})"));
  EXPECT_EQ(Parse(RangeBody("a", "b"))["range_end"], Base64Encode("b"));
  EXPECT_EQ(Parse(WatchDeletesBody("a", "a\x01"))["create_request"]["range_end"], Base64Encode("a\x01"));

  std::vector<KeyValue> kvs;
  int64_t revision = 0;
  ASSERT_TRUE(ReadRangeAll(Parse(R"({"header":{"revision":"30"},"kvs":[{"key":"YQ==","create_revision":"5","value":"dg=="},{"key":"Yg==","create_revision":"6","lease":"9"}],"count":"2"})"), &kvs, &revision).ok());
  EXPECT_EQ(revision, 30);
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].key, "a");
  EXPECT_EQ(kvs[0].value, "v");
  EXPECT_EQ(kvs[1].create_revision, 6);
  EXPECT_EQ(kvs[1].lease, 9);
  ASSERT_TRUE(ReadRangeAll(Parse(R"({"header":{"revision":"31"}})"), &kvs, &revision).ok());
  EXPECT_TRUE(kvs.empty());
  EXPECT_FALSE(ReadRangeAll(Parse(R"({"kvs":[]})"), &kvs, &revision).ok()) << "no header revision";
  EXPECT_FALSE(ReadRangeAll(Parse(R"({"header":{"revision":"3"},"kvs":[{"key":"!!"}]})"), &kvs, &revision).ok());
  EXPECT_TRUE(kvs.empty()) << "nothing half-read";
  EXPECT_FALSE(ReadRangeAll(Parse(R"({"header":{"revision":"3"},"kvs":{}})"), &kvs, &revision).ok());
}

TEST(EtcdGatewayTest, MalformedAnswersAreErrorsNotCrashes) {
  TxnAnswer txn;
  EXPECT_FALSE(ReadTxn(Parse(R"({"succeeded":true})"), &txn).ok()) << "no header revision";
  EXPECT_FALSE(ReadTxn(Parse(R"({"header":{"revision":"3"},"responses":{}})"), &txn).ok());
  EXPECT_FALSE(ReadTxn(Parse(R"({"header":{"revision":"3"},"responses":[{"response_range":{"kvs":[{"key":"!!"}]}}]})"), &txn).ok());
  KeyValue kv;
  bool found = true;
  ASSERT_TRUE(ReadRange(Parse(R"({"header":{"revision":"3"}})"), &kv, &found).ok());
  EXPECT_FALSE(found);
  EXPECT_FALSE(ReadRange(Parse(R"({"header":{"revision":"3"},"kvs":[5]})"), &kv, &found).ok());
  int64_t ttl = 0;
  EXPECT_FALSE(ReadKeepAlive(Parse(R"({"ID":"1"})"), &ttl).ok());
  int64_t lease = 0;
  EXPECT_FALSE(ReadGrant(Parse(R"({"header":{"revision":"1"},"ID":"0","TTL":"5"})"), &lease, &ttl).ok());
  Json not_object;
  EXPECT_FALSE(ParseObject("[1,2]", &not_object));
  EXPECT_FALSE(ParseObject("{\"a\":", &not_object));
}

TEST(EtcdGatewayTest, LeasesKeepAliveAndTimeToLive) {
  int64_t ttl = -9;
  ASSERT_TRUE(ReadKeepAlive(Parse(R"({"result":{"header":{"revision":"4"},"ID":"5","TTL":"11"}})"), &ttl).ok());
  EXPECT_EQ(ttl, 11);
  // A lease etcd no longer has: the TTL is left out.
  ASSERT_TRUE(ReadKeepAlive(Parse(R"({"result":{"header":{"revision":"4"},"ID":"5"}})"), &ttl).ok());
  EXPECT_EQ(ttl, 0);
  std::vector<std::string> keys;
  ASSERT_TRUE(ReadTimeToLive(Parse(R"({"header":{"revision":"4"},"ID":"5","TTL":"9","grantedTTL":"10","keys":["ZGxvY2s6YQ==","ZGxvY2s6Yg=="]})"), &ttl, &keys).ok());
  EXPECT_EQ(ttl, 9);
  EXPECT_EQ(keys, (std::vector<std::string>{"dlock:a", "dlock:b"}));
  ASSERT_TRUE(ReadTimeToLive(Parse(R"({"header":{"revision":"4"},"ID":"99","TTL":"-1"})"), &ttl, &keys).ok());
  EXPECT_EQ(ttl, -1);
  EXPECT_TRUE(keys.empty());
  EXPECT_EQ(LeaseTtlSeconds(10000), 11);
  EXPECT_EQ(LeaseTtlSeconds(10001), 12);
  EXPECT_EQ(LeaseTtlSeconds(1), 2);
}

TEST(EtcdGatewayTest, WatchMessagesAndErrors) {
  WatchMessage m;
  ASSERT_TRUE(ReadWatchMessage(Parse(R"({"result":{"header":{"revision":"6"},"created":true}})"), &m).ok());
  EXPECT_TRUE(m.created);
  ASSERT_TRUE(ReadWatchMessage(Parse(R"({"result":{"header":{"revision":"8"},"events":[{"kv":{"key":"dw=="}},{"type":"DELETE","kv":{"key":"dw==","mod_revision":"8"}}]}})"), &m).ok());
  EXPECT_EQ(m.events, 2);
  EXPECT_EQ(m.deletes, 1);
  EXPECT_EQ(m.deleted, std::vector<std::string>{"w"});  // whose deletion wakes whom (layout=mutex)
  ASSERT_TRUE(ReadWatchMessage(Parse(R"({"result":{"header":{},"canceled":true,"compact_revision":"6"}})"), &m).ok());
  EXPECT_TRUE(m.canceled);
  EXPECT_EQ(m.compact_revision, 6);
  EXPECT_FALSE(ReadWatchMessage(Parse(R"({"error":{"grpc_code":14}})"), &m).ok());

  GatewayError e = ReadError(Parse(R"({"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14})"));
  EXPECT_EQ(e.code, kGrpcUnavailable);
  EXPECT_EQ(e.message, "etcdserver: no leader");
  EXPECT_EQ(ReadError(Parse(R"({"header":{}})")).code, 0);
  EXPECT_EQ(ReadError(Parse(R"({"error":{"x":1}})")).code, 2) << "an error of unknown shape is still one";
}

}  // namespace
}  // namespace dlock::etcd

namespace dlock::etcd {
namespace {

// A hostile gateway: nesting that would cost a container per byte is refused before parsing;
// an error's words are capped and their control bytes escaped before they reach a message.
TEST(EtcdGatewayTest, DeepNestingIsRefusedBeforeParsing) {
  Json j;
  auto nested = [](size_t depth) {
    return "{\"kvs\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  EXPECT_TRUE(ParseObject(nested(64), &j)) << "64 levels, the limit, are fine";
  EXPECT_FALSE(ParseObject(nested(65), &j));
  EXPECT_FALSE(ParseObject(nested(200000), &j));
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(ParseObject("{\"k\":\"" + std::string(1000, '[') + "\\\"[\"}", &j));
  std::vector<WatchMessage> messages;
  std::string lines = nested(100) + "\n";
  EXPECT_FALSE(TakeWatchLines(&lines, &messages).ok());
}

TEST(EtcdGatewayTest, ErrorWordsAreCappedAndEscaped) {
  GatewayError e = ReadError(Parse(R"({"error":"x","message":"bad \u001b[2Jthing\u0007","code":3})"));
  EXPECT_EQ(e.message, "bad \\x1b[2Jthing\\x07");
  e = ReadError(Parse(R"({"error":"x","message":")" + std::string(5000, 'm') + R"(","code":3})"));
  EXPECT_EQ(e.message, std::string(512, 'm') + "\xe2\x80\xa6");
}

}  // namespace
}  // namespace dlock::etcd
