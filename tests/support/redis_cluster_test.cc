// The cluster harness itself: the cluster it starts is what the Cluster tests rely on.
#include "support/redis_cluster.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "support/harness_util.h"
#include "support/redis_wire.h"
#include "support/tls_certs.h"

namespace {

using dlock_test::CountOf;
using dlock_test::RedisCluster;

TEST(RedisClusterTest, ThreeMastersWithOneReplicaEachCoverEverySlot) {
  RedisCluster cluster;
  ASSERT_TRUE(cluster.ready());
  int masters = 0;
  int replicas = 0;
  for (int i = 0; i < RedisCluster::kNodes; ++i) {
    std::string info = cluster.node(i).Cli({"CLUSTER", "INFO"});
    EXPECT_NE(info.find("cluster_state:ok"), std::string::npos) << info;
    EXPECT_NE(info.find("cluster_slots_ok:16384"), std::string::npos) << info;
    std::string role = cluster.node(i).Cli({"ROLE"});
    masters += role.rfind("master", 0) == 0;
    replicas += role.rfind("slave", 0) == 0;
  }
  EXPECT_EQ(masters, 3);
  EXPECT_EQ(replicas, 3);
  // Every node knows all six.
  EXPECT_EQ(CountOf(cluster.node(0).Cli({"CLUSTER", "NODES"}), "connected"), 6);
  EXPECT_EQ(CountOf(cluster.seeds(), ","), 5);
}

TEST(RedisClusterTest, KilledMasterIsReplacedByItsReplica) {
  RedisCluster cluster;
  ASSERT_TRUE(cluster.ready());
  int master = -1;
  for (int i = 0; i < RedisCluster::kNodes && master < 0; ++i) {
    if (cluster.node(i).Cli({"ROLE"}).rfind("master", 0) == 0) master = i;
  }
  ASSERT_GE(master, 0);
  cluster.node(master).Kill();
  // The replica is promoted once the others have missed the master for node_timeout (1 s).
  int masters = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (masters < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    masters = 0;
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      if (i != master && cluster.node(i).Cli({"ROLE"}).rfind("master", 0) == 0) ++masters;
    }
  }
  EXPECT_EQ(masters, 3);  // the replica took over
  std::string why;
  EXPECT_TRUE(cluster.WaitHealthy(std::chrono::seconds(30), &why)) << why;
}

// TLS everywhere: the nodes answer over TLS only (to clients with a certificate), and name
// each other by their TLS ports (tls-cluster), which a TLS client is sent to by CLUSTER SLOTS.
TEST(RedisClusterTest, ATlsClusterTalksTlsOnlyAndNamesItsTlsPorts) {
  dlock_test::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisCluster cluster({.tls = dlock_test::RedisTls{.certs = &certs, .require_client_cert = true}});
  ASSERT_TRUE(cluster.ready());
  std::set<std::string> ports;
  for (int i = 0; i < RedisCluster::kNodes; ++i) {
    ports.insert(std::to_string(cluster.node(i).port()));
    EXPECT_EQ(cluster.node(i).Cli({"CONFIG", "GET", "port"}), "port\n0");
    EXPECT_EQ(cluster.node(i).Cli({"CONFIG", "GET", "tls-cluster"}), "tls-cluster\nyes");
    // A plain client is cut off.
    dlock_test::wire::Connection plain(cluster.node(i).port(), "", std::nullopt, "", 1000, 1000);
    EXPECT_EQ(plain.ok() ? plain.Command({"PING"}) : nullptr, nullptr) << cluster.node(i).address();
  }
  // "<id> 127.0.0.1:<port>@<bus port> ..." for each of the six: every port a TLS port.
  std::istringstream nodes(cluster.node(0).Cli({"CLUSTER", "NODES"}));
  int lines = 0;
  for (std::string line; std::getline(nodes, line); ++lines) {
    const size_t colon = line.find(" 127.0.0.1:"), at = line.find('@');
    ASSERT_TRUE(colon != std::string::npos && at != std::string::npos) << line;
    const std::string port = line.substr(colon + 11, at - colon - 11);
    EXPECT_EQ(ports.count(port), 1u) << "not a TLS port: " << line;
  }
  EXPECT_EQ(lines, RedisCluster::kNodes);
  // And MOVED, as a TLS client gets it, names one of them.
  const int master = cluster.MasterOf("k");
  ASSERT_GE(master, 0);
  const std::string moved = cluster.node((master + 1) % RedisCluster::kNodes).Cli({"GET", "k"});
  if (moved.rfind("ERR: MOVED ", 0) == 0) {
    EXPECT_EQ(moved.substr(moved.rfind(':') + 1), std::to_string(cluster.node(master).port()));
  }
}

}  // namespace
