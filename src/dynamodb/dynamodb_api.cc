#include "dynamodb/dynamodb_api.h"

#include <algorithm>
#include <ctime>

#include "core/server_text.h"
#include "core/token.h"

namespace dlock::dynamodb {
namespace {

constexpr char kTargetPrefix[] = "DynamoDB_20120810.";
constexpr int kMaxAttempts = 10;
// An error's __type is a short name ("ConditionalCheckFailedException"); more is not DynamoDB's.
constexpr size_t kMaxErrorTypeBytes = 128;

// "com.amazonaws.dynamodb.v20120810#ThrottlingException" -> "ThrottlingException".
std::string ShortType(const std::string& type) {
  size_t hash = type.rfind('#');
  return hash == std::string::npos ? type : type.substr(hash + 1);
}

bool OneOf(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

std::string StringField(const Json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Millis RetryBackoff(int retry) {
  uint64_t cap = std::min<uint64_t>(25ull << std::min(retry, 6), 1000);
  return Millis(RandomBetween(cap / 4, cap));
}

Status Transport::Serialize(const Json& body, std::string* out) {
  try {
    *out = body.dump();
    return Status::Ok();
  } catch (const std::exception&) {
    // Only invalid UTF-8 makes dump() throw; the names are checked earlier, labels may not be.
    return Status::InvalidArgument("a lock name or owner label is not valid UTF-8, which DynamoDB requires");
  }
}

Status Api::Build(const std::string& operation, std::string body, bool may_block, http::Request* out) {
  Credentials credentials;
  Status s = may_block ? credentials_->Get(&credentials) : credentials_->GetCached(&credentials);
  if (!s.ok()) return s;
  const std::string target = kTargetPrefix + operation;
  SigningRequest to_sign;
  to_sign.method = "POST";
  to_sign.path = "/";
  to_sign.headers = {{"content-length", std::to_string(body.size())},
                     {"content-type", "application/x-amz-json-1.0"},
                     {"host", config_.host_header},
                     {"x-amz-target", target}};
  to_sign.body = body;
  SigningOptions options;
  options.region = config_.region;
  options.service = "dynamodb";
  options.timestamp = std::time(nullptr);
  SignedParts parts = signer_.Sign(to_sign, credentials, options);

  out->method = "POST";
  out->url = config_.endpoint + "/";
  out->headers.clear();
  out->headers.reserve(4 + parts.add_headers.size());
  out->headers.push_back("Host: " + config_.host_header);
  out->headers.push_back("Content-Type: application/x-amz-json-1.0");
  out->headers.push_back("X-Amz-Target: " + target);
  for (const auto& [name, value] : parts.add_headers) out->headers.push_back(name + ": " + value);
  out->body = std::move(body);
  out->connect_timeout_ms = config_.params.connect_timeout_ms;
  out->timeout_ms = config_.params.timeout_ms;
  out->tls_verify = config_.tls_verify;
  return Status::Ok();
}

ApiResult Api::Interpret(const std::string& operation, const Status& transport,
                         const http::Response& response) const {
  ApiResult result;
  const std::string where = config_.Describe();
  if (!transport.ok()) {
    result.outcome = Outcome::kFailed;
    result.status = transport;
    result.maybe_applied = response.maybe_sent;
    return result;
  }
  if (!JsonDepthWithin(response.body)) {  // checked before parsing: a container per '['
    result.status = Status::BackendError(where + " answered " + operation + " (HTTP " +
                                         std::to_string(response.status) +
                                         ") with JSON nested deeper than " +
                                         std::to_string(kMaxJsonDepth) + " levels (dlock's limit)");
    result.maybe_applied = true;
    return result;
  }
  Json doc = Json::parse(response.body, nullptr, false);
  if (response.status == 200) {
    if (!doc.is_object()) {
      result.status = Status::BackendError(where + " answered " + operation +
                                           " with something other than a JSON object");
      result.maybe_applied = true;
      return result;
    }
    result.outcome = Outcome::kOk;
    result.body = std::move(doc);
    return result;
  }
  // The server's words are capped and their control bytes escaped (server_text.h): they end up
  // in messages that reach terminals. DynamoDB's own types and messages are far shorter.
  const std::string type =
      doc.is_object() ? ServerText(ShortType(StringField(doc, "__type")), kMaxErrorTypeBytes) : std::string();
  std::string message = doc.is_object() ? StringField(doc, "message") : std::string();
  if (message.empty() && doc.is_object()) message = StringField(doc, "Message");
  message = ServerText(message);
  const std::string described = type.empty() ? "HTTP " + std::to_string(response.status)
                                              : type + (message.empty() ? "" : ": " + message);
  result.maybe_applied = response.status >= 500;
  result.error_type = type;

  if (type == "ConditionalCheckFailedException") {
    result.outcome = Outcome::kConditionFailed;
    result.body = std::move(doc);
    return result;
  }
  if (response.status >= 500 ||
      OneOf(type, {"ThrottlingException", "ProvisionedThroughputExceededException",
                   "RequestLimitExceeded", "InternalServerError", "ServiceUnavailable",
                   "TransactionConflictException"})) {
    result.outcome = Outcome::kRetryable;
    result.status = Status::BackendError(where + ": " + operation + " failed: " + described);
    return result;
  }
  if (OneOf(type, {"ExpiredTokenException", "ExpiredToken"})) {
    result.outcome = Outcome::kRetryable;
    result.expired_token = true;
    result.status = Status::AuthError(where + " refused the credentials: " + described);
    return result;
  }
  result.outcome = Outcome::kFailed;
  if (response.status == 401 || response.status == 403 ||
      OneOf(type, {"UnrecognizedClientException", "InvalidSignatureException",
                   "MissingAuthenticationToken", "MissingAuthenticationTokenException",
                   "IncompleteSignatureException", "AccessDeniedException", "InvalidClientTokenId",
                   "SignatureDoesNotMatch"})) {
    result.status = Status::AuthError(where + " refused the credentials: " + described);
  } else if (type == "ResourceNotFoundException" && operation != "DescribeTable") {
    std::string key_schema = "AttributeName=" + config_.partition_key + ",KeyType=HASH";
    std::string attributes = "AttributeName=" + config_.partition_key + ",AttributeType=S";
    if (!config_.sort_key.empty()) {
      key_schema += " AttributeName=" + config_.sort_key + ",KeyType=RANGE";
      attributes += " AttributeName=" + config_.sort_key + ",AttributeType=S";
    }
    result.status = Status::BackendError(
        "table '" + config_.table + "' does not exist in region " + config_.region + " at " +
        config_.endpoint + " (" + described + "). Create it with dlock_backend_prepare() or `dlock prepare`, "
        "or: aws dynamodb create-table --table-name " + config_.table +
        " --attribute-definitions " + attributes + " --key-schema " + key_schema +
        " --billing-mode PAY_PER_REQUEST");
  } else if (type == "ValidationException" && message.find("key element") != std::string::npos) {
    result.status = Status::BackendError(
        where + ": " + described + " (the table's key must be the string attribute '" +
        config_.partition_key + "'" +
        (config_.sort_key.empty() ? std::string(" with no sort key")
                                  : " with the string sort key '" + config_.sort_key + "'") +
        "; set partition_key= / sort_key= in the URL to match the table)");
  } else if (type.empty()) {
    result.status = Status::BackendError(where + " answered " + operation + " with HTTP " +
                                         std::to_string(response.status) +
                                         " and no DynamoDB error in the body");
  } else {
    result.status = Status::BackendError(where + ": " + operation + " failed: " + described);
  }
  return result;
}

namespace {

struct RetryState {
  Transport* transport;
  CredentialsChain* credentials;
  std::string operation;
  Json body;
  TimePoint deadline;
  Transport::Done done;
  int attempt = 0;
  bool maybe_applied = false;
};

void Attempt(std::shared_ptr<RetryState> state) {
  ++state->attempt;
  Transport* transport = state->transport;
  transport->Call(state->operation, state->body, state->deadline, [state](ApiResult result) {
    state->maybe_applied = state->maybe_applied || result.maybe_applied;
    if (result.outcome == Outcome::kRetryable && state->attempt < kMaxAttempts) {
      if (result.expired_token) state->credentials->Invalidate();
      Millis delay = result.expired_token ? Millis(0) : RetryBackoff(state->attempt);
      if (Now() + delay < state->deadline && !(result.expired_token && state->attempt > 1)) {
        state->transport->After(delay, [state] { Attempt(state); });
        return;
      }
    }
    if (result.outcome == Outcome::kRetryable) result.outcome = Outcome::kFailed;
    result.maybe_applied = state->maybe_applied;
    auto done = std::move(state->done);
    done(std::move(result));
  });
}

}  // namespace

void CallWithRetries(Transport* transport, CredentialsChain* credentials,
                     const std::string& operation, Json body, TimePoint deadline,
                     Transport::Done done) {
  auto state = std::make_shared<RetryState>();
  state->transport = transport;
  state->credentials = credentials;
  state->operation = operation;
  state->body = std::move(body);
  state->deadline = deadline;
  state->done = std::move(done);
  Attempt(std::move(state));
}

}  // namespace dlock::dynamodb
