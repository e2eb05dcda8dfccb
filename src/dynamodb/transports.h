// One DynamoDB call over an http::Transport, blocking or on the loop: signed here (Api::Build,
// which may fetch credentials only where the transport may block) and its answer sorted
// (Api::Interpret). The lock protocol is written once against it.
#ifndef DLOCK_DYNAMODB_TRANSPORTS_H_
#define DLOCK_DYNAMODB_TRANSPORTS_H_

#include "dynamodb/dynamodb_api.h"
#include "http/transport.h"

namespace dlock::dynamodb {

class HttpCaller : public Transport {
 public:
  HttpCaller(Api* api, http::Transport* http) : api_(api), http_(http) {}
  void Call(const std::string& operation, const Json& body, TimePoint deadline, Done done) override;
  void After(Millis delay, std::function<void()> fn) override { http_->After(delay, std::move(fn)); }

 private:
  Api* api_;
  http::Transport* http_;
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_TRANSPORTS_H_
