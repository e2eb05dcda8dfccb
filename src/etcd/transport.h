// One call to etcd's gateway over an http::Transport (blocking, or on the client's loop), with
// the endpoint rule: a call goes to the endpoint that last worked; when that one cannot be reached or has
// no leader (nothing was applied), the next is tried at once, each at most once per call.
// A call that may have been applied is not retried here: the lock protocol settles it by
// reading the key.
#ifndef DLOCK_ETCD_TRANSPORT_H_
#define DLOCK_ETCD_TRANSPORT_H_

#include <atomic>
#include <functional>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "etcd/etcd_config.h"
#include "etcd/gateway.h"
#include "http/transport.h"

namespace dlock::etcd {

struct CallResult {
  Status status;               // Ok: answer holds etcd's answer, an object that is no error
  Json answer;
  int grpc_code = 0;           // etcd refused it: its gRPC code
  bool maybe_applied = false;  // failed, and etcd may still have applied it
};

class Transport {
 public:
  using Done = std::function<void(CallResult)>;
  // http: blocking (callers' threads) or the loop's (loop thread only).
  Transport(const EtcdConfig* config, http::Transport* http) : config_(config), http_(http) {}
  // POSTs body to path, over by deadline (and each request by timeout_ms). done runs exactly
  // once: before Call returns on a blocking transport, later on the loop on the loop's.
  void Call(const std::string& path, std::string body, TimePoint deadline, Done done);
  const EtcdConfig& config() const { return *config_; }

 private:
  struct Attempt;
  void Try(std::shared_ptr<Attempt> attempt);

  const EtcdConfig* config_;
  http::Transport* http_;
  std::atomic<size_t> current_{0};  // the endpoint calls go to first
};

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_TRANSPORT_H_
