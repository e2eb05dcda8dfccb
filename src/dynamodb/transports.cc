#include "dynamodb/transports.h"

#include <event2/event.h>

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
  auto* timer = new PendingTimer{this, nullptr, std::move(fn)};
  timer->ev = evtimer_new(loop_->base(), &AsyncTransport::OnTimer, timer);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(delay.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((delay.count() % 1000) * 1000);
  timers_.insert(timer);
  evtimer_add(timer->ev, &tv);
}

void AsyncTransport::OnTimer(int, short, void* arg) {
  auto* timer = static_cast<PendingTimer*>(arg);
  timer->self->timers_.erase(timer);
  std::function<void()> fn = std::move(timer->fn);
  event_free(timer->ev);
  delete timer;
  fn();
}

void AsyncTransport::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  http_.Shutdown(api_->config().Describe() + ": client closed");
  std::unordered_set<PendingTimer*> timers;
  timers.swap(timers_);
  for (PendingTimer* timer : timers) {
    event_free(timer->ev);
    std::function<void()> fn = std::move(timer->fn);
    delete timer;
    fn();  // retries now: the call fails at once because we are shut down
  }
}

}  // namespace dlock::dynamodb
