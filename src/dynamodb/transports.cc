#include "dynamodb/transports.h"

namespace dlock::dynamodb {

void HttpCaller::Call(const std::string& operation, const Json& body, TimePoint deadline,
                      Done done) {
  std::string text;
  http::Request request;
  Status s = http_->closed() ? Status::IoError(api_->config().Describe() + ": client closed")
                             : Transport::Serialize(body, &text);
  if (s.ok()) s = api_->Build(operation, std::move(text), http_->blocking(), &request);
  if (!s.ok()) {
    // On the loop, credentials refreshed in the background are worth another try soon.
    const bool retryable = !http_->blocking() && s.code() == Code::kAuthError;
    http_->Soon([done = std::move(done), s, retryable] {  // on the loop: never inside the call
      ApiResult failed;
      failed.status = s;
      if (retryable) failed.outcome = Outcome::kRetryable;
      done(std::move(failed));
    });
    return;
  }
  request.deadline = deadline;
  Api* api = api_;
  http_->Send(request, [api, operation, done = std::move(done)](const Status& error,
                                                                http::Response response) {
    done(api->Interpret(operation, error, response));
  });
}

}  // namespace dlock::dynamodb
