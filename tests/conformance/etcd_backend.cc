// etcd://: a real 3-node etcd cluster (support/etcd_cluster.h); clients are given every node's
// client endpoint. etcd_mutex: the same with layout=mutex (etcd's own lock recipe).
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include "conformance/backend.h"
#include "support/etcd_cluster.h"
#include "support/unread_bytes.h"

namespace dlock_test {
namespace {

class EtcdBackend : public BackendServer {
 public:
  explicit EtcdBackend(bool mutex) : mutex_(mutex) {}
  bool running() const override { return etcd_.ready() && !killed_; }
  std::string url() const override { return etcd_.url() + (mutex_ ? "?layout=mutex" : ""); }
  // Errors name the endpoints they tried.
  std::string address() const override { return etcd_.endpoints(); }
  // The backend keeps lock NAME at key prefix + NAME, the prefix "dlock:" by default.
  // Its shared holds, permits and writer announcements are keys after it: key + NUL + ...;
  // all of them lie in [key, key + "\x01").
  // layout=mutex: every key under NAME/ (holder and waiters), no prefix.
  bool DeleteLock(const std::string& name) override {
    if (mutex_) return etcd_.DeleteRange(name + "/", name + "0");
    const std::string key = "dlock:" + name;
    return etcd_.DeleteRange(key, key + '\x01');
  }
  // layout=mutex: the keys under NAME/ but the first (the holder's).
  int InLine(const std::string& name) override {
    if (!mutex_) return -1;
    const int keys = etcd_.Count(name + "/", name + "0");
    return keys <= 0 ? keys : keys - 1;
  }
  void Kill() override {
    etcd_.Kill();
    killed_ = true;
  }
  // A new empty cluster at the same endpoints.
  bool Restart() override {
    killed_ = !etcd_.Restart();
    return !killed_;
  }
  // Every node SIGSTOPped together (Go's tickers drop the ticks missed meanwhile: no election
  // follows a short stop of them all); a request to any waits unread.
  bool HoldAnswers() override {
    bool ok = true;
    for (int i = 0; i < EtcdCluster::kNodes; ++i) etcd_.Stop(i);
    for (int i = 0; i < EtcdCluster::kNodes; ++i) ok = etcd_.pid(i) > 0 && WaitStopped(etcd_.pid(i)) && ok;
    unread_at_hold_ = UnreadBytesOnPorts(ClientPorts());
    return ok;
  }
  bool RequestHeld() override { return UnreadBytesOnPorts(ClientPorts()) > unread_at_hold_; }
  void ReleaseAnswers() override {
    for (int i = 0; i < EtcdCluster::kNodes; ++i) etcd_.Cont(i);
  }

 private:
  std::vector<int> ClientPorts() const {
    std::vector<int> ports;
    for (int i = 0; i < EtcdCluster::kNodes; ++i) {
      const std::string endpoint = etcd_.endpoint(i);
      ports.push_back(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
    }
    return ports;
  }

  const bool mutex_;
  EtcdCluster etcd_;
  bool killed_ = false;
  int64_t unread_at_hold_ = 0;
};

}  // namespace

BackendFactory EtcdBackendFactory() {
  return {"etcd", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS | DLOCK_CAP_BREAK | DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<EtcdBackend>(false); }};
}

BackendFactory EtcdMutexBackendFactory() {
  return {"etcd_mutex", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_FAIR,
          [] { return std::make_unique<EtcdBackend>(true); }, /*inspect_shows_tokens=*/false};
}

}  // namespace dlock_test
