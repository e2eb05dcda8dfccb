#include "etcd/transport.h"

#include "core/server_text.h"

namespace dlock::etcd {

struct Transport::Attempt {
  std::string path;
  std::string body;
  TimePoint deadline;
  Done done;
  size_t first = 0;  // the endpoint tried first
  size_t tried = 0;
  std::string failures;  // each endpoint's why, "; "-separated
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
  http_->Send(request, [this, attempt, endpoint, n](const Status& error, http::Response response) {
    CallResult result;
    bool next = false;  // nothing was applied: the next endpoint may serve it
    Code code = Code::kBackendError;
    std::string why;    // names the endpoint
    const std::string at = config_->Endpoint(endpoint);
    if (!error.ok()) {
      code = error.code();
      why = error.message();  // names the URL
      result.maybe_applied = response.maybe_sent;
      next = !response.maybe_sent && error.code() == Code::kIoError;
    } else if (!JsonDepthWithin(response.body)) {
      why = at + " answered HTTP " + std::to_string(response.status) + " with JSON nested deeper than " +
            std::to_string(kMaxJsonDepth) + " levels (dlock's limit)";
      result.maybe_applied = true;
    } else if (!ParseObject(response.body, &result.answer)) {
      why = at + " answered HTTP " + std::to_string(response.status) +
            " with something other than a JSON object (is it etcd's gateway?)";
      result.maybe_applied = true;
    } else if (GatewayError e = ReadError(result.answer); e.code != 0) {
      result.grpc_code = e.code;
      why = at + ": etcd said: " + e.message;
      const bool no_leader = e.code == kGrpcUnavailable && e.message.find("no leader") != std::string::npos;
      next = no_leader;
      result.maybe_applied = e.code == kGrpcUnavailable && !no_leader;
      code = e.code == kGrpcUnavailable || e.code == kGrpcDeadlineExceeded ? Code::kIoError
             : e.code == kGrpcUnauthenticated || e.code == kGrpcPermissionDenied ? Code::kAuthError
             : e.code == kGrpcInvalidArgument || e.code == kGrpcOutOfRange ? Code::kInvalidArgument
                                                                           : Code::kBackendError;
    } else if (response.status != 200) {
      why = at + " answered HTTP " + std::to_string(response.status) + " (is it etcd's v3 gateway?)";
      result.maybe_applied = true;
    } else {
      current_.store(endpoint);  // calls go where an answer came from
      attempt->done(std::move(result));
      return;
    }
    attempt->failures += (attempt->failures.empty() ? "" : "; ") + why;
    // Later calls start at the next endpoint: this one failed.
    size_t expected = endpoint;
    current_.compare_exchange_strong(expected, (endpoint + 1) % n);
    ++attempt->tried;
    if (next && attempt->tried < n && Now() < attempt->deadline) {
      Try(attempt);
      return;
    }
    result.status = Status(code, config_->Describe() + ": " +
                                     (attempt->tried > 1 ? "no endpoint could serve it (" + attempt->failures + ")"
                                                         : why));
    attempt->done(std::move(result));
  });
}

}  // namespace dlock::etcd
