// rediss://: one redis-server that speaks TLS only, with certificates made for the run. Clients
// trust the run's CA (ca=); the second deployment's server also requires a client certificate,
// which its clients present (cert=, key=).
#include <dlock/dlock.h>

#include "conformance/backend.h"
#include "support/redis_server.h"
#include "support/tls_certs.h"

namespace dlock_test {
namespace {

// Made once per process: every deployment of the run trusts the same CA.
const TestCertificates& Certificates() {
  static const TestCertificates* certs = new TestCertificates();  // its files outlive every test
  return *certs;
}

class RedisTlsBackend : public BackendServer {
 public:
  explicit RedisTlsBackend(bool client_cert)
      : client_cert_(client_cert),
        redis_(RedisTls{.certs = &Certificates(), .require_client_cert = client_cert}) {}
  bool running() const override { return Certificates().ok() && redis_.running(); }
  std::string url() const override {
    std::string url = redis_.url() + "?ca=" + Certificates().ca_cert();
    if (client_cert_) {
      url += "&cert=" + Certificates().client_cert() + "&key=" + Certificates().client_key();
    }
    return url;
  }
  std::string address() const override { return redis_.address(); }
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
  bool client_cert_;
  RedisServer redis_;
};

}  // namespace

BackendFactory RedisTlsBackendFactory() {
  return {"redis_tls", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisTlsBackend>(false); }};
}

BackendFactory RedisTlsClientCertBackendFactory() {
  return {"redis_tls_client_cert", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<RedisTlsBackend>(true); }};
}

}  // namespace dlock_test
