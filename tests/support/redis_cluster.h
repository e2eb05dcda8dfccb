// A real, throwaway Redis Cluster for integration tests: 3 masters and 3 replicas
// (redis-server --cluster-enabled yes, joined by redis-cli --cluster create --cluster-replicas 1),
// each node a RedisServer (free loopback port, own temp dir, no persistence, always stopped).
//
//   dlock_test::RedisCluster cluster;         // starts it, or ADD_FAILURE()s
//   ASSERT_TRUE(cluster.ready());
//   cluster.seeds();                           // "127.0.0.1:P1,127.0.0.1:P2,..."
//   cluster.node(0).Cli({"CLUSTER", "INFO"});
//
// cluster-node-timeout is short (1000 ms by default), so a killed master's replica is promoted
// within a few seconds.
#ifndef DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_
#define DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.h"

namespace dlock_test {

class RedisCluster {
 public:
  static constexpr int kMasters = 3;
  static constexpr int kNodes = 6;  // each master has one replica

  // Starts the nodes, creates the cluster and waits (up to 30 s) until it is healthy (see
  // WaitHealthy). On failure, ADD_FAILURE() with the reason and ready() is false.
  explicit RedisCluster(int node_timeout_ms = 1000);
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  bool ready() const { return ready_; }
  RedisServer& node(int i) { return *nodes_[i]; }
  // Every node's address, comma-separated: the seed list of a redis-cluster:// URL.
  std::string seeds() const;
  // Waits up to timeout until every running node reports cluster_state:ok and every running
  // replica is in sync with its master (only then can it be promoted); why says otherwise.
  bool WaitHealthy(std::chrono::milliseconds timeout, std::string* why);
  // The node now serving key as master (the one that does not redirect it), or -1.
  int MasterOf(const std::string& key);
  // CLUSTER MYID of node i.
  std::string NodeId(int i) { return node(i).Cli({"CLUSTER", "MYID"}); }
  // SIGKILLs every node.
  void Kill();
  // Starts every node again on its port, empty, and creates the cluster anew (as the
  // constructor does). True when it is healthy again.
  bool Restart();

 private:
  // redis-cli --cluster create over the running nodes, then WaitHealthy; ADD_FAILURE()s.
  bool Create();

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  bool ready_ = false;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_
