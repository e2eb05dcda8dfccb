// AWS Signature Version 4 (header-based signing), with OpenSSL's SHA-256 and HMAC.
// General enough for AWS's own test suite (paths, queries, repeated and folded headers), fast
// enough for every DynamoDB call: the derived signing key is cached per day/region/service.
#ifndef DLOCK_DYNAMODB_SIGV4_H_
#define DLOCK_DYNAMODB_SIGV4_H_

#include <cstdint>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/secret.h"

namespace dlock::dynamodb {

// The secret key and session token are wiped from memory when freed (core/secret.h).
struct Credentials {
  std::string access_key_id;
  Secret secret_access_key;
  Secret session_token;  // empty for long-term credentials
  // Wall-clock expiry (seconds since the epoch) of temporary credentials, 0 when they never
  // expire. Never shown anywhere: only access_key_id may appear in messages.
  int64_t expires_at = 0;
  std::string source;  // where they came from ("environment", "profile default", ...), for errors
};

// The request as the signer sees it.
struct SigningRequest {
  std::string method;                                        // "POST"
  std::string path = "/";                                    // raw, not yet URI-encoded
  std::string query;                                         // raw "a=1&b=2", without '?'
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as given
  std::string_view body;
};

struct SigningOptions {
  std::string region;
  std::string service;
  std::time_t timestamp = 0;        // seconds since the epoch, UTC
  bool normalize_path = true;       // remove "." / ".." segments and repeated slashes
  bool sign_body = false;           // add and sign x-amz-content-sha256
  bool omit_session_token = false;  // add x-amz-security-token after signing (not signed)
};

// What signing produced: headers to add to the request (x-amz-date, x-amz-security-token,
// x-amz-content-sha256 as needed, then authorization) and the intermediate texts for tests.
struct SignedParts {
  std::vector<std::pair<std::string, std::string>> add_headers;
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // lowercase hex
  std::string authorization;  // the Authorization header's value
};

// "20150830T123600Z" for t.
std::string AmzDate(std::time_t t);
// Lowercase hex SHA-256 of data.
std::string Sha256Hex(std::string_view data);
// URI-encodes per SigV4: unreserved characters stay, every other byte becomes %XX (uppercase);
// '/' stays when keep_slash.
std::string UriEncode(std::string_view in, bool keep_slash);

// Signs one request. Thread-safe; caches the derived key of the last day/region/service/secret
// (the secret and the key are wiped when replaced or freed).
class Signer {
 public:
  SignedParts Sign(const SigningRequest& request, const Credentials& credentials,
                   const SigningOptions& options);

 private:
  Secret SigningKey(const std::string& secret, const std::string& date, const std::string& region,
                    const std::string& service);

  std::mutex mu_;
  Secret cached_secret_;
  std::string cached_scope_;  // date/region/service
  Secret cached_key_;
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_SIGV4_H_
