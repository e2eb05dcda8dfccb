// The cluster harness itself: the cluster it starts is what the Cluster tests rely on.
#include "support/redis_cluster.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace {

using dlock_test::RedisCluster;

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

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

}  // namespace
