// redlock://: N independent redis-servers (3 and 5), each its own master, no replicas.
#include <dlock/dlock.h>

#include <memory>
#include <vector>

#include "conformance/backend.h"
#include "support/redis_server.h"

namespace dlock_test {
namespace {

class RedlockBackend : public BackendServer {
 public:
  explicit RedlockBackend(int masters) {
    for (int i = 0; i < masters; ++i) masters_.push_back(std::make_unique<RedisServer>());
  }
  bool running() const override {
    for (const auto& m : masters_) {
      if (!m->running()) return false;
    }
    return true;
  }
  std::string url() const override {
    std::string all;
    for (const auto& m : masters_) all += (all.empty() ? "" : ",") + m->address();
    return "redlock://" + all;
  }
  // An error names every master that failed: the first stands for them all.
  std::string address() const override { return masters_.front()->address(); }
  // Deleted behind the holder's back on every master: a quorum no longer holds it.
  bool DeleteLock(const std::string& name) override {
    int deleted = 0;
    for (auto& m : masters_) deleted += RedisDeletedSome(m->Cli(RedisDeleteLockCommand(name)));
    return deleted > 0;
  }
  void Kill() override {
    for (auto& m : masters_) m->Kill();
  }
  bool Restart() override {
    bool ok = true;
    for (auto& m : masters_) ok = m->Restart() && ok;
    return ok;
  }
  bool HoldAnswers() override {
    bool ok = true;
    for (auto& m : masters_) ok = m->Cli(RedisPauseWritesCommand()) == "OK" && ok;
    return ok;
  }
  // An acquire goes to every master.
  bool RequestHeld() override {
    for (auto& m : masters_) {
      if (RedisPausedScripts(m->Cli(RedisClientListCommand())) == 0) return false;
    }
    return true;
  }
  void ReleaseAnswers() override {
    for (auto& m : masters_) m->Cli(RedisUnpauseCommand());
  }

 private:
  std::vector<std::unique_ptr<RedisServer>> masters_;
};

}  // namespace

// Independent masters promise no strictly increasing tokens under every fault, nor semaphores
// or a fair line (docs/redlock.md); shared holds they do offer.
BackendFactory Redlock3BackendFactory() {
  return {"redlock3", DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_BREAK | DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedlockBackend>(3); }};
}

BackendFactory Redlock5BackendFactory() {
  return {"redlock5", DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_BREAK | DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedlockBackend>(5); }};
}

}  // namespace dlock_test
