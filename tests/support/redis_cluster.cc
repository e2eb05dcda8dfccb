#include "support/redis_cluster.h"

#include <gtest/gtest.h>

#include <thread>

#include "support/child_process.h"
#include "support/tls_certs.h"

namespace dlock_test {

RedisCluster::RedisCluster(Options options) : options_(std::move(options)) {
  for (int i = 0; i < kNodes; ++i) {
    // The bus port is given, not the default port + 10000: free ports are often above 55535.
    std::vector<std::string> args = {
        "--cluster-enabled", "yes", "--cluster-port", std::to_string(FreeTcpPort()),
        "--cluster-node-timeout", std::to_string(options_.node_timeout_ms),
        // A replica that never finished its first sync is not promoted: sync at once (the
        // default waits 5 s for more replicas before streaming).
        "--repl-diskless-sync-delay", "0"};
    if (options_.tls) {
      args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
      nodes_.push_back(std::make_unique<RedisServer>(*options_.tls, args));
    } else {
      nodes_.push_back(std::make_unique<RedisServer>(args));
    }
    if (!nodes_.back()->running()) return;  // RedisServer said why
  }
  ready_ = Create();
}

bool RedisCluster::Create() {
  const std::string cli = FindOnPath("redis-cli", "DLOCK_REDIS_CLI");
  if (cli.empty()) {
    ADD_FAILURE() << "RedisCluster: redis-cli not found on PATH";
    return false;
  }
  std::vector<std::string> create = {cli, "--cluster", "create"};
  for (auto& n : nodes_) create.push_back(n->address());
  create.insert(create.end(), {"--cluster-replicas", "1", "--cluster-yes"});
  if (options_.tls) {
    const TestCertificates& certs = *options_.tls->certs;
    create.insert(create.end(), {"--tls", "--cacert", certs.ca_cert(), "--cert",
                                 certs.client_cert(), "--key", certs.client_key()});
  }
  ChildProcess creator(create);
  int code = creator.Wait(std::chrono::seconds(30));
  if (code != 0) {
    ADD_FAILURE() << "RedisCluster: redis-cli --cluster create " << DescribeExitCode(code) << ":\n"
                  << creator.output();
    return false;
  }
  std::string why;
  if (!WaitHealthy(std::chrono::seconds(30), &why)) {
    ADD_FAILURE() << "RedisCluster: " << why;
    return false;
  }
  return true;
}

int RedisCluster::MasterOf(const std::string& key) {
  for (int i = 0; i < kNodes; ++i) {
    if (!nodes_[i]->running()) continue;
    std::string answer = nodes_[i]->Cli({"EXISTS", key});
    if (answer == "0" || answer == "1") return i;
  }
  return -1;
}

void RedisCluster::Kill() {
  for (auto& n : nodes_) n->Kill();
}

bool RedisCluster::Restart() {
  ready_ = false;
  for (auto& n : nodes_) {
    if (!n->Restart()) return false;
  }
  ready_ = Create();
  return ready_;
}

std::string RedisCluster::seeds() const {
  std::string out;
  for (const auto& n : nodes_) out += (out.empty() ? "" : ",") + n->address();
  return out;
}

bool RedisCluster::WaitHealthy(std::chrono::milliseconds timeout, std::string* why) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::string bad;
    for (auto& n : nodes_) {
      if (!n->running()) continue;
      std::string info = n->Cli({"CLUSTER", "INFO"});
      if (info.find("cluster_state:ok") == std::string::npos) {
        bad = n->address() + " says: " + info.substr(0, 200);
        break;
      }
      std::string replication = n->Cli({"INFO", "replication"});
      if (replication.find("role:slave") != std::string::npos &&
          replication.find("master_link_status:up") == std::string::npos) {
        bad = "replica " + n->address() + " has not synced with its master yet";
        break;
      }
    }
    if (bad.empty()) return true;
    if (std::chrono::steady_clock::now() >= until) {
      *why = "not healthy within " + std::to_string(timeout.count()) + " ms: " + bad;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace dlock_test
