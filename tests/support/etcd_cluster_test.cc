// EtcdCluster: a real 3-node cluster starts, serves keys, elects a new leader when its leader
// dies, takes a node back, restarts empty; and over TLS.
#include "support/etcd_cluster.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "support/tls_certs.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// The HTTP status of a POST of {} to url with only the CA to check the server (no client
// certificate); 0 when no HTTP answer came.
long PostWithCaOnly(const std::string& url, const std::string& ca) {
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "{}");
  curl_easy_setopt(curl, CURLOPT_CAINFO, ca.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 3000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION,
                   +[](char*, size_t size, size_t n, void*) { return size * n; });
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  return status;
}

TEST(EtcdClusterTest, ServesKeysAndNamesALeader) {
  const auto start = Clock::now();
  EtcdCluster etcd;
  ASSERT_TRUE(etcd.ready());
  printf("healthy in %lld ms\n", MsSince(start));
  EXPECT_EQ(etcd.url(), "etcd://" + etcd.endpoints());
  EXPECT_EQ(etcd.endpoints(),
            etcd.endpoint(0) + "," + etcd.endpoint(1) + "," + etcd.endpoint(2));

  EXPECT_FALSE(etcd.Get("k").has_value());
  ASSERT_TRUE(etcd.Put("k", std::string("v\0\"1", 4)));  // bytes, not text
  EXPECT_EQ(etcd.Get("k"), std::string("v\0\"1", 4));
  ASSERT_TRUE(etcd.Put("empty", ""));
  EXPECT_EQ(etcd.Get("empty"), "");
  EXPECT_TRUE(etcd.Delete("k"));
  EXPECT_FALSE(etcd.Delete("k"));
  EXPECT_FALSE(etcd.Get("k").has_value());

  const int leader = etcd.Leader();
  ASSERT_GE(leader, 0);
  // A stopped follower: the other two still serve.
  const int follower = (leader + 1) % EtcdCluster::kNodes;
  etcd.Stop(follower);
  EXPECT_TRUE(etcd.Put("k2", "v2"));
  EXPECT_EQ(etcd.Leader(), leader);
  etcd.Cont(follower);
  std::string why;
  EXPECT_TRUE(etcd.WaitHealthy(5s, &why)) << why;
}

TEST(EtcdClusterTest, ElectsANewLeaderTakesANodeBackAndRestartsEmpty) {
  EtcdCluster etcd;
  ASSERT_TRUE(etcd.ready());
  ASSERT_TRUE(etcd.Put("k", "v"));
  const int old_leader = etcd.Leader();
  ASSERT_GE(old_leader, 0);

  const auto killed = Clock::now();
  etcd.Kill(old_leader);
  EXPECT_FALSE(etcd.running(old_leader));
  int leader = -1;
  while ((leader = etcd.Leader()) < 0 && Clock::now() - killed < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(leader, 0) << "no new leader within 10 s";
  EXPECT_NE(leader, old_leader);
  printf("new leader %lld ms after the leader was killed\n", MsSince(killed));
  ASSERT_TRUE(etcd.Put("k", "v2"));

  // Back with its data, it catches up with what it missed.
  ASSERT_TRUE(etcd.StartAgain(old_leader));
  // A serializable range is answered from the node's own copy: "k" (aw==) is "v2" (djI=).
  std::optional<std::string> body;
  for (const auto start = Clock::now(); Clock::now() - start < 5s;) {
    body = etcd.Post("/v3/kv/range", R"({"key":"aw==","serializable":true})", old_leader);
    if (body && body->find(R"("value":"djI=")") != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(body.has_value());
  EXPECT_NE(body->find(R"("value":"djI=")"), std::string::npos) << *body;

  const std::string endpoints = etcd.endpoints();
  etcd.Kill();
  ASSERT_TRUE(etcd.Restart());
  EXPECT_EQ(etcd.endpoints(), endpoints);
  EXPECT_FALSE(etcd.Get("k").has_value());
  EXPECT_GE(etcd.Leader(), 0);
}

TEST(EtcdClusterTest, TlsClusterAnswersOverHttpsWithTheCa) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  {
    EtcdCluster etcd({.tls = &certs});
    ASSERT_TRUE(etcd.ready());
    EXPECT_EQ(etcd.url(), "etcd://" + etcd.endpoints() + "?tls=1&ca=" + certs.ca_cert());
    EXPECT_EQ(PostWithCaOnly("https://" + etcd.endpoint(0) + "/v3/maintenance/status",
                             certs.ca_cert()),
              200);
    EXPECT_NE(PostWithCaOnly("http://" + etcd.endpoint(0) + "/v3/maintenance/status", ""), 200);
  }
  EtcdCluster etcd({.tls = &certs, .client_cert_required = true});
  ASSERT_TRUE(etcd.ready());
  EXPECT_EQ(etcd.url(), "etcd://" + etcd.endpoints() + "?tls=1&ca=" + certs.ca_cert() +
                            "&cert=" + certs.client_cert() + "&key=" + certs.client_key());
  // The harness presents the client certificate; without one the handshake fails.
  ASSERT_TRUE(etcd.Put("k", "v"));
  EXPECT_EQ(etcd.Get("k"), "v");
  EXPECT_EQ(PostWithCaOnly("https://" + etcd.endpoint(0) + "/v3/maintenance/status",
                           certs.ca_cert()),
            0);
}

}  // namespace
}  // namespace dlock_test
