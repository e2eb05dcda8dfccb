// One HTTP exchange, over either way a call travels: blocking on the caller's thread (pooled
// easy handles) or on the client's loop (curl multi). Written once here for the HTTP backends,
// which build on it: DynamoDB signs and sorts answers (dynamodb/transports.h), etcd rotates
// endpoints (etcd/transport.h).
#ifndef DLOCK_HTTP_TRANSPORT_H_
#define DLOCK_HTTP_TRANSPORT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "core/clock.h"
#include "core/connection_count.h"
#include "core/status.h"
#include "http/async_client.h"
#include "http/blocking_client.h"
#include "loop/event_loop.h"

namespace dlock::http {

class Transport {
 public:
  using Sent = std::function<void(const Status& error, Response response)>;
  virtual ~Transport() = default;
  // One exchange. sent runs exactly once: before Send returns (blocking), or later on the loop.
  virtual void Send(const Request& request, Sent sent) = 0;
  // Runs fn after delay (a retry): the blocking transport sleeps, the loop's arms a timer.
  virtual void After(Millis delay, std::function<void()> fn) = 0;
  // Runs fn now (blocking) or on the loop's next turn, never inside the caller's call.
  virtual void Soon(std::function<void()> fn) = 0;
  // Calls on this transport may block their caller (a signer may then fetch credentials).
  virtual bool blocking() const = 0;
  // Shut down (the loop's, at close): calls fail at once.
  virtual bool closed() const { return false; }
};

// Callers' threads. Stateless apart from its pool: one per backend.
class BlockingTransport final : public Transport {
 public:
  // connections: the backend's count of open connections (null: none kept).
  explicit BlockingTransport(std::shared_ptr<ConnectionCount> connections = nullptr)
      : client_(std::move(connections)) {}
  void Send(const Request& request, Sent sent) override {
    Response response;
    Status s = client_.Perform(request, &response);
    sent(s, std::move(response));
  }
  void After(Millis delay, std::function<void()> fn) override {
    std::this_thread::sleep_for(delay);
    fn();
  }
  void Soon(std::function<void()> fn) override { fn(); }
  bool blocking() const override { return true; }

 private:
  BlockingClient client_;
};

// The loop thread only.
class LoopTransport final : public Transport {
 public:
  LoopTransport(EventLoop* loop, std::shared_ptr<ConnectionCount> connections = nullptr)
      : loop_(loop), client_(loop, std::move(connections)), retries_(loop) {}
  ~LoopTransport() override { Shutdown("client closed"); }
  void Send(const Request& request, Sent sent) override { client_.Start(request, std::move(sent)); }
  void After(Millis delay, std::function<void()> fn) override {
    if (shut_down_) return Soon(std::move(fn));
    retries_.After(delay, std::move(fn));
  }
  void Soon(std::function<void()> fn) override { loop_->Post(std::move(fn)); }
  bool blocking() const override { return false; }
  bool closed() const override { return shut_down_; }

  // Fails what is in flight (why names the backend) and runs the pending retries at once,
  // which then fail too. Idempotent.
  void Shutdown(const std::string& why) {
    if (shut_down_) return;
    shut_down_ = true;
    client_.Shutdown(why);
    retries_.RunAllNow();
  }
  // Requests and watch streams in flight, and retries waiting: work whose outcome is not known.
  size_t pending() const { return client_.in_flight() + retries_.size(); }
  // Requests in flight, watch streams not counted.
  size_t requests_in_flight() const { return client_.requests_in_flight(); }
  // For streamed bodies (etcd's watches).
  AsyncClient* client() { return &client_; }

 private:
  EventLoop* loop_;
  AsyncClient client_;
  DelayedCalls retries_;
  bool shut_down_ = false;
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_TRANSPORT_H_
