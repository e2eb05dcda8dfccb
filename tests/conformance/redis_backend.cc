// redis:// and redis+unix://: one redis-server, reached over TCP or over its unix socket.
#include <dlock/dlock.h>

#include "conformance/backend.h"
#include "support/redis_server.h"

namespace dlock_test {
namespace {

class RedisBackend : public BackendServer {
 public:
  explicit RedisBackend(bool over_unix_socket) : unix_(over_unix_socket) {}
  bool running() const override { return redis_.running(); }
  std::string url() const override {
    return unix_ ? "redis+unix://" + redis_.unix_socket() : redis_.url();
  }
  std::string address() const override { return unix_ ? redis_.unix_socket() : redis_.address(); }
  bool DeleteLock(const std::string& name) override {
    return RedisDeletedSome(redis_.Cli(RedisDeleteLockCommand(name)));
  }
  int InLine(const std::string& name) override { return RedisCount(redis_.Cli(RedisLineCommand(name))); }
  int Listening(const std::string& name) override {
    return RedisListeners(redis_.Cli(RedisListenersCommand(name, false)));
  }
  int ClientConnections() override { return RedisOtherClients(redis_.Cli(RedisClientsCommand())); }
  bool DropClientConnections() override {
    bool ok = true;
    for (const auto& command : RedisDropClientsCommands()) ok = RedisCount(redis_.Cli(command)) >= 0 && ok;
    return ok;
  }
  void Kill() override { redis_.Kill(); }
  bool Restart() override { return redis_.Restart(); }
  bool HoldAnswers() override { return redis_.Cli(RedisPauseWritesCommand()) == "OK"; }
  bool RequestHeld() override { return RedisPausedScripts(redis_.Cli(RedisClientListCommand())) > 0; }
  void ReleaseAnswers() override { redis_.Cli(RedisUnpauseCommand()); }

 private:
  bool unix_;
  RedisServer redis_;
};

}  // namespace

BackendFactory RedisTcpBackend() {
  return {"redis", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisBackend>(false); }};
}

BackendFactory RedisUnixBackend() {
  return {"redis_unix", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisBackend>(true); }};
}

}  // namespace dlock_test
