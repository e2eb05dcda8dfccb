// One DynamoDB API call, shared by the blocking and the async path: the JSON body is built by
// the caller, signed here (SigV4), sent by a Transport (pooled easy handles on the caller's
// thread, or curl multi on the loop), and the answer is sorted into what the lock protocol
// needs to know. Throttling and 5xx answers are retried with jittered exponential backoff
// inside the caller's deadline.
#ifndef DLOCK_DYNAMODB_DYNAMODB_API_H_
#define DLOCK_DYNAMODB_DYNAMODB_API_H_

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "dynamodb/credentials.h"
#include "dynamodb/dynamodb_config.h"
#include "dynamodb/sigv4.h"
#include "http/request.h"

namespace dlock::dynamodb {

using Json = nlohmann::json;

enum class Outcome {
  kOk,               // HTTP 200; body holds the answer
  kConditionFailed,  // ConditionalCheckFailedException; body may hold the old "Item"
  kRetryable,        // throttled or a server error: the same call may succeed later
  kFailed,           // anything else: status says what
};

struct ApiResult {
  Outcome outcome = Outcome::kFailed;
  Status status;               // the error, for kRetryable and kFailed
  Json body;                   // the parsed answer (an object), for kOk and kConditionFailed
  bool maybe_applied = false;  // a failed write may still have been applied by the server
  bool expired_token = false;  // the credentials expired: refresh and try again
  std::string error_type;      // DynamoDB's error name ("ResourceInUseException"), if any
};

// Builds and interprets calls for one table. Thread-safe.
class Api {
 public:
  Api(DynamoConfig config, CredentialsChain* credentials)
      : config_(std::move(config)), credentials_(credentials) {}
  const DynamoConfig& config() const { return config_; }

  // A signed request for `operation` ("UpdateItem") with `body`. may_block: may resolve or
  // refresh credentials over the network (never on the loop thread).
  Status Build(const std::string& operation, std::string body, bool may_block, http::Request* out);
  // Sorts a transport error or an HTTP answer into an ApiResult.
  ApiResult Interpret(const std::string& operation, const Status& transport,
                      const http::Response& response) const;
  CredentialsChain* credentials() { return credentials_; }

 private:
  DynamoConfig config_;
  CredentialsChain* credentials_;
  Signer signer_;
};

// Sends calls one way or the other. Both call done exactly once; the blocking one before
// Call returns, the async one on the loop thread and never before Call returns.
class Transport {
 public:
  using Done = std::function<void(ApiResult)>;
  virtual ~Transport() = default;
  // One attempt, over by `deadline` (http::Request::deadline): the request's timeout is
  // timeout_ms or what is left until deadline, whichever is less. The body is serialized here:
  // a value that is not valid UTF-8 fails EINVAL.
  virtual void Call(const std::string& operation, const Json& body, TimePoint deadline, Done done) = 0;
  // Runs fn after delay (blocking: sleeps; async: a loop timer).
  virtual void After(Millis delay, std::function<void()> fn) = 0;
  // Serializes body for a request; no exception escapes.
  static Status Serialize(const Json& body, std::string* out);
};

// Calls once, and again after jittered exponential backoff while the answer is retryable and
// the next try can start before deadline. The result's maybe_applied covers every attempt.
void CallWithRetries(Transport* transport, CredentialsChain* credentials,
                     const std::string& operation, Json body, TimePoint deadline,
                     Transport::Done done);

// Backoff before retry number `retry` (1-based): full jitter over 25 ms * 2^retry, capped.
Millis RetryBackoff(int retry);

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_DYNAMODB_API_H_
