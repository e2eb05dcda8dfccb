#include "dynamodb/transports.h"

#include <thread>

namespace dlock::dynamodb {

void BlockingTransport::Call(const std::string& operation, const Json& body, TimePoint deadline,
                             Done done) {
  std::string text;
  http::Request request;
  Status s = Transport::Serialize(body, &text);
  if (s.ok()) s = api_->Build(operation, std::move(text), /*may_block=*/true, &request);
  if (!s.ok()) {
    ApiResult failed;
    failed.status = s;
    done(std::move(failed));
    return;
  }
  request.deadline = deadline;
  http::Response response;
  s = http_->Perform(request, &response);
  done(api_->Interpret(operation, s, response));
}

void BlockingTransport::After(Millis delay, std::function<void()> fn) {
  std::this_thread::sleep_for(delay);
  fn();
}

AsyncTransport::~AsyncTransport() { Shutdown(); }

void AsyncTransport::Call(const std::string& operation, const Json& body, TimePoint deadline,
                          Done done) {
  std::string text;
  http::Request request;
  Status s = shut_down_ ? Status::IoError(api_->config().Describe() + ": client closed")
                        : Transport::Serialize(body, &text);
  if (s.ok()) s = api_->Build(operation, std::move(text), /*may_block=*/false, &request);
  if (!s.ok()) {  // fail later, never inside the call
    loop_->Post([done = std::move(done), s] {
      ApiResult failed;
      failed.status = s;
      // Credentials being refreshed in the background: worth another try soon.
      if (s.code() == Code::kAuthError) failed.outcome = Outcome::kRetryable;
      done(std::move(failed));
    });
    return;
  }
  request.deadline = deadline;
  Api* api = api_;
  http_.Start(request, [api, operation, done = std::move(done)](const Status& error,
                                                                http::Response response) {
    done(api->Interpret(operation, error, response));
  });
}

void AsyncTransport::After(Millis delay, std::function<void()> fn) {
  if (shut_down_) {
    loop_->Post(std::move(fn));
    return;
  }
  retries_.After(delay, std::move(fn));
}

void AsyncTransport::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  http_.Shutdown(api_->config().Describe() + ": client closed");
  retries_.RunAllNow();  // the retries fail at once: we are shut down
}

}  // namespace dlock::dynamodb
