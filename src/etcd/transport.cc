#include "etcd/transport.h"

namespace dlock::etcd {

struct Transport::Attempt {
  std::string path;
  std::string body;
  TimePoint deadline;
  Done done;
  size_t first = 0;  // the endpoint tried first
  size_t tried = 0;
  std::string failures;  // "A: why; B: why"
};

void Transport::Call(const std::string& path, std::string body, TimePoint deadline, Done done) {
  auto attempt = std::make_shared<Attempt>();
  attempt->path = path;
  attempt->body = std::move(body);
  attempt->deadline = deadline;
  attempt->done = std::move(done);
  attempt->first = current_.load() % config_->endpoints.size();
  Try(std::move(attempt));
}

void Transport::Try(std::shared_ptr<Attempt> attempt) {
  const size_t n = config_->endpoints.size();
  const size_t endpoint = (attempt->first + attempt->tried) % n;
  http::Request request = config_->Post(endpoint, attempt->path, attempt->body);
  request.deadline = attempt->deadline;
  Send(request, [this, attempt, endpoint, n](const Status& error, http::Response response) {
    CallResult result;
    bool next = false;  // nothing was applied: the next endpoint may serve it
    std::string why;
    if (!error.ok()) {
      why = error.message();
      result.status = error;
      result.maybe_applied = response.maybe_sent;
      next = !response.maybe_sent && error.code() == Code::kIoError;
    } else if (!ParseObject(response.body, &result.answer)) {
      why = "answered HTTP " + std::to_string(response.status) + " with something other than a JSON object (is it etcd's gateway?)";
      result.status = Status::BackendError(config_->Describe() + ": " + config_->Endpoint(endpoint) + " " + why);
      result.maybe_applied = true;
    } else if (GatewayError e = ReadError(result.answer); e.code != 0) {
      result.grpc_code = e.code;
      why = "etcd said: " + e.message;
      const bool no_leader = e.code == kGrpcUnavailable && e.message.find("no leader") != std::string::npos;
      next = no_leader;
      result.maybe_applied = e.code == kGrpcUnavailable && !no_leader;
      Code code = e.code == kGrpcUnavailable || e.code == kGrpcDeadlineExceeded ? Code::kIoError
                  : e.code == kGrpcUnauthenticated || e.code == kGrpcPermissionDenied ? Code::kAuthError
                  : e.code == kGrpcInvalidArgument || e.code == kGrpcOutOfRange ? Code::kInvalidArgument
                                                                                : Code::kBackendError;
      result.status = Status(code, config_->Describe() + ": " + config_->Endpoint(endpoint) + ": " + why);
    } else if (response.status != 200) {
      why = "answered HTTP " + std::to_string(response.status) + " (is it etcd's v3 gateway?)";
      result.status = Status::BackendError(config_->Describe() + ": " + config_->Endpoint(endpoint) + " " + why);
      result.maybe_applied = true;
    } else {
      current_.store(endpoint);  // calls go where an answer came from
      attempt->done(std::move(result));
      return;
    }
    if (!why.empty()) {
      attempt->failures += (attempt->failures.empty() ? "" : "; ") + config_->Endpoint(endpoint) + ": " + why;
    }
    // Later calls start at the next endpoint: this one failed.
    size_t expected = endpoint;
    current_.compare_exchange_strong(expected, (endpoint + 1) % n);
    ++attempt->tried;
    if (next && attempt->tried < n && Now() < attempt->deadline) {
      Try(attempt);
      return;
    }
    if (attempt->tried > 1 && next) {
      result.status = Status(result.status.code(), config_->Describe() + ": no endpoint could serve it (" +
                                                       attempt->failures + ")");
    } else if (result.status.message().find(config_->Describe()) == std::string::npos) {
      result.status = Status(result.status.code(), config_->Describe() + ": " + result.status.message());
    }
    attempt->done(std::move(result));
  });
}

void BlockingTransport::Send(const http::Request& request, Sent sent) {
  http::Response response;
  Status s = http_.Perform(request, &response);
  sent(s, std::move(response));
}

void AsyncTransport::Send(const http::Request& request, Sent sent) { http_.Start(request, std::move(sent)); }

}  // namespace dlock::etcd
