// redis-sentinel://: a real master with two replicas watched by three sentinels; clients find
// the master through the sentinels.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include "conformance/backend.h"
#include "support/redis_sentinel.h"

namespace dlock_test {
namespace {

class RedisSentinelBackend : public BackendServer {
 public:
  bool running() const override { return group_.ready() && !killed_; }
  std::string url() const override {
    return "redis-sentinel://" + group_.sentinels() + "/" + group_.master_name();
  }
  // Errors name the sentinels they asked.
  std::string address() const override { return group_.sentinels(); }
  bool DeleteLock(const std::string& name) override {
    const int master = group_.CurrentMaster();
    return master >= 0 && RedisDeletedSome(group_.data_node(master).Cli(RedisDeleteLockCommand(name)));
  }
  int InLine(const std::string& name) override {
    const int master = group_.CurrentMaster();
    return master < 0 ? -1 : RedisCount(group_.data_node(master).Cli(RedisLineCommand(name)));
  }
  int Listening(const std::string& name) override {
    const int master = group_.CurrentMaster();
    return master < 0 ? -1 : RedisListeners(group_.data_node(master).Cli(RedisListenersCommand(name, false)));
  }
  // Every data node, whichever is the master now. Keep it short: a sentinel's hello (PUBLISH)
  // waits too, and the PINGs behind it on its link (down-after-milliseconds: 1.5 s).
  bool HoldAnswers() override {
    bool ok = true;
    for (int i = 0; i < RedisSentinelGroup::kDataNodes; ++i) {
      ok = group_.data_node(i).Cli(RedisPauseWritesCommand()) == "OK" && ok;
    }
    return ok;
  }
  bool RequestHeld() override {
    for (int i = 0; i < RedisSentinelGroup::kDataNodes; ++i) {
      if (RedisPausedScripts(group_.data_node(i).Cli(RedisClientListCommand())) > 0) return true;
    }
    return false;
  }
  void ReleaseAnswers() override {
    for (int i = 0; i < RedisSentinelGroup::kDataNodes; ++i) group_.data_node(i).Cli(RedisUnpauseCommand());
  }
  // The data nodes die; the sentinels stay and keep naming the master.
  void Kill() override {
    master_ = group_.CurrentMaster();
    for (int i = 0; i < RedisSentinelGroup::kDataNodes; ++i) group_.data_node(i).Kill();
    killed_ = true;
  }
  // The master comes back empty at its address, the replicas follow it again.
  bool Restart() override {
    if (master_ < 0 || !group_.data_node(master_).Restart()) return false;
    const std::string address = group_.data_node(master_).address();
    const std::string port = address.substr(address.rfind(':') + 1);
    for (int i = 0; i < RedisSentinelGroup::kDataNodes; ++i) {
      if (i == master_) continue;
      if (!group_.data_node(i).Restart()) return false;
      group_.data_node(i).Cli({"REPLICAOF", "127.0.0.1", port});
    }
    std::string why;
    if (!group_.WaitSettled(std::chrono::seconds(30), &why)) {
      ADD_FAILURE() << "the sentinel group did not settle after the restart: " << why;
      return false;
    }
    killed_ = false;
    return true;
  }

 private:
  RedisSentinelGroup group_;
  int master_ = -1;
  bool killed_ = false;
};

}  // namespace

BackendFactory RedisSentinelBackendFactory() {
  return {"redis_sentinel", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisSentinelBackend>(); }};
}

}  // namespace dlock_test
