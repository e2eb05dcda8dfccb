// One call to etcd's gateway, written once for the blocking path (pooled easy handles on the
// caller's thread) and the async one (curl multi on the client's loop), with the endpoint
// rule: a call goes to the endpoint that last worked; when that one cannot be reached or has
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
#include "http/async_client.h"
#include "http/blocking_client.h"

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
  virtual ~Transport() = default;
  // POSTs body to path, over by deadline (and each request by timeout_ms). done runs exactly
  // once: before Call returns on the blocking transport, later on the loop on the async one.
  void Call(const std::string& path, std::string body, TimePoint deadline, Done done);
  const EtcdConfig& config() const { return *config_; }

 protected:
  using Sent = std::function<void(const Status& error, http::Response response)>;
  explicit Transport(const EtcdConfig* config) : config_(config) {}
  // One HTTP exchange.
  virtual void Send(const http::Request& request, Sent sent) = 0;

 private:
  struct Attempt;
  void Try(std::shared_ptr<Attempt> attempt);

  const EtcdConfig* config_;
  std::atomic<size_t> current_{0};  // the endpoint calls go to first
};

// Callers' threads.
class BlockingTransport : public Transport {
 public:
  explicit BlockingTransport(const EtcdConfig* config) : Transport(config) {}

 private:
  void Send(const http::Request& request, Sent sent) override;
  http::BlockingClient http_;
};

// The loop thread only.
class AsyncTransport : public Transport {
 public:
  AsyncTransport(const EtcdConfig* config, EventLoop* loop) : Transport(config), http_(loop) {}
  http::AsyncClient* http() { return &http_; }
  // Requests in flight; watch streams are not counted.
  size_t in_flight() const { return http_.requests_in_flight(); }
  void Shutdown() { http_.Shutdown(config().Describe() + ": client closed"); }

 private:
  void Send(const http::Request& request, Sent sent) override;
  http::AsyncClient http_;
};

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_TRANSPORT_H_
