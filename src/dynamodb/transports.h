// The two ways a call travels: blocking on the caller's thread (http::BlockingClient), or async
// on the client's loop (http::AsyncClient). Both sign the call (Api::Build) and sort the answer
// (Api::Interpret); the lock protocol is written once against Transport.
#ifndef DLOCK_DYNAMODB_TRANSPORTS_H_
#define DLOCK_DYNAMODB_TRANSPORTS_H_

#include "dynamodb/dynamodb_api.h"
#include "http/async_client.h"
#include "http/blocking_client.h"
#include "loop/event_loop.h"

namespace dlock::dynamodb {

// Callers' threads; done runs before Call returns. Stateless: one per call is fine.
class BlockingTransport : public Transport {
 public:
  BlockingTransport(Api* api, http::BlockingClient* http) : api_(api), http_(http) {}
  void Call(const std::string& operation, const Json& body, TimePoint deadline, Done done) override;
  void After(Millis delay, std::function<void()> fn) override;

 private:
  Api* api_;
  http::BlockingClient* http_;
};

// The loop thread only; done runs later on the loop thread.
class AsyncTransport : public Transport {
 public:
  AsyncTransport(Api* api, EventLoop* loop) : api_(api), loop_(loop), http_(loop), retries_(loop) {}
  ~AsyncTransport() override;
  void Call(const std::string& operation, const Json& body, TimePoint deadline, Done done) override;
  void After(Millis delay, std::function<void()> fn) override;
  // Fails what is in flight and runs pending retries at once (which then fail too).
  void Shutdown();
  // Requests in flight and retries waiting: work whose outcome is not known yet.
  size_t pending() const { return http_.in_flight() + retries_.size(); }

 private:
  Api* api_;
  EventLoop* loop_;
  http::AsyncClient http_;
  DelayedCalls retries_;
  bool shut_down_ = false;
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_TRANSPORTS_H_
