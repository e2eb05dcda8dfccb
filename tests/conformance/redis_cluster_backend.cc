// redis-cluster://: a real 3-master + 3-replica Redis Cluster, reached through all six seeds.
#include <dlock/dlock.h>

#include "conformance/backend.h"
#include "support/redis_cluster.h"

namespace dlock_test {
namespace {

class RedisClusterBackend : public BackendServer {
 public:
  bool running() const override { return cluster_.ready(); }
  std::string url() const override { return "redis-cluster://" + cluster_.seeds(); }
  // Errors name the cluster by its seeds.
  std::string address() const override { return cluster_.seeds(); }
  bool DeleteLock(const std::string& name) override {
    // On whichever master serves the key: the others answer MOVED.
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      if (RedisDeletedSome(cluster_.node(i).Cli(RedisDeleteLockCommand(name)))) return true;
    }
    return false;
  }
  int InLine(const std::string& name) override {
    const int master = cluster_.MasterOf("dlock:{" + name + "}");
    return master < 0 ? -1 : RedisCount(cluster_.node(master).Cli(RedisLineCommand(name)));
  }
  int Listening(const std::string& name) override {
    const int master = cluster_.MasterOf("dlock:{" + name + "}");
    return master < 0 ? -1 : RedisListeners(cluster_.node(master).Cli(RedisListenersCommand(name, true)));
  }
  void Kill() override { cluster_.Kill(); }
  bool Restart() override { return cluster_.Restart(); }
  // Every node (replicas too): the lock's master is whichever serves its slot.
  bool HoldAnswers() override {
    bool ok = true;
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      ok = cluster_.node(i).Cli(RedisPauseWritesCommand()) == "OK" && ok;
    }
    return ok;
  }
  bool RequestHeld() override {
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      if (RedisPausedScripts(cluster_.node(i).Cli(RedisClientListCommand())) > 0) return true;
    }
    return false;
  }
  void ReleaseAnswers() override {
    for (int i = 0; i < RedisCluster::kNodes; ++i) cluster_.node(i).Cli(RedisUnpauseCommand());
  }

 private:
  RedisCluster cluster_;
};

}  // namespace

BackendFactory RedisClusterBackendFactory() {
  return {"redis_cluster", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisClusterBackend>(); }};
}

}  // namespace dlock_test
