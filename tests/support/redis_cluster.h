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
//
// A TLS cluster (certificates from tls_certs.h): every node listens with TLS only (see
// RedisTls), its cluster bus and replication use TLS too (--tls-cluster yes,
// --tls-replication yes), so CLUSTER SLOTS, MOVED and ASK name TLS ports; node(i).Cli() speaks
// TLS.
//
//   dlock_test::TestCertificates certs;
//   dlock_test::RedisCluster cluster({.tls = dlock_test::RedisTls{.certs = &certs}});
//   "redis-cluster://" + cluster.seeds() + "?tls=1&ca=" + certs.ca_cert();
#ifndef DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_
#define DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/redis_server.h"

namespace dlock_test {

struct RedisClusterOptions {
  // cluster-node-timeout.
  int node_timeout_ms = 1000;
  // Set: every node is a TLS RedisServer with these settings (with plain_port_too, a plain
  // client is answered with the plain ports), and the nodes talk TLS to each other.
  std::optional<RedisTls> tls = {};
};

class RedisCluster {
 public:
  using Options = RedisClusterOptions;
  static constexpr int kMasters = 3;
  static constexpr int kNodes = 6;  // each master has one replica

  // Starts the nodes, creates the cluster and waits (up to 30 s) until it is healthy (see
  // WaitHealthy). On failure, ADD_FAILURE() with the reason and ready() is false.
  explicit RedisCluster(Options options = {});
  explicit RedisCluster(int node_timeout_ms)
      : RedisCluster(Options{.node_timeout_ms = node_timeout_ms}) {}
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  bool ready() const { return ready_; }
  const Options& options() const { return options_; }
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

  Options options_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  bool ready_ = false;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_REDIS_CLUSTER_H_
