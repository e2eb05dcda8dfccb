// AWS credentials, found the way the AWS SDKs find them, in their order:
//   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
//   2. the shared files' profile (aws_profile.h): aws_access_key_id, aws_secret_access_key,
//      aws_session_token;
//   3. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on 169.254.170.2) or
//      AWS_CONTAINER_CREDENTIALS_FULL_URI (https, or http to a loopback / ECS / EKS address),
//      with the Authorization header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
//      AWS_CONTAINER_AUTHORIZATION_TOKEN;
//   4. EC2 instance metadata, IMDSv2 (token first), unless AWS_EC2_METADATA_DISABLED=true;
//      AWS_EC2_METADATA_SERVICE_ENDPOINT overrides the address.
// Temporary credentials (3, 4, or any with an expiry) are refreshed before they expire.
// Secrets never appear in a Status: messages name the source and at most the access key id.
#ifndef DLOCK_DYNAMODB_CREDENTIALS_H_
#define DLOCK_DYNAMODB_CREDENTIALS_H_

#include <atomic>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "dynamodb/aws_profile.h"
#include "dynamodb/sigv4.h"
#include "http/blocking_client.h"

namespace dlock::dynamodb {

// One step of the chain: Ok with *found=false when the source is not configured (the chain
// goes on); an error when it is configured but broken (the chain stops there).
Status CredentialsFromEnvironment(Credentials* out, bool* found);
Status CredentialsFromProfile(const AwsProfile& profile, Credentials* out, bool* found);
Status CredentialsFromContainer(http::BlockingClient* client, Credentials* out, bool* found);
Status CredentialsFromImds(http::BlockingClient* client, Credentials* out, bool* found);

// Reads the JSON that container endpoints and IMDS answer with (AccessKeyId, SecretAccessKey,
// Token, Expiration, Code); `source` names the endpoint in errors.
Status ParseCredentialsJson(const std::string& text, const std::string& source, Credentials* out);

// Whether AWS_CONTAINER_CREDENTIALS_FULL_URI may name host over plain http, as AWS's SDKs
// allow: a loopback address (127.0.0.0/8, ::1, localhost) or the ECS and EKS agents'
// (169.254.170.2, 169.254.170.23, fd00:ec2::23). host is parsed as an address, without
// brackets: "127.evil.com" is not one.
bool ContainerHostAllowedOverHttp(const std::string& host);

// "2026-11-20T08:09:10Z" (fractions and offsets allowed) -> seconds since the epoch; -1 if bad.
int64_t ParseIsoTime(const std::string& text);

class CredentialsChain {
 public:
  CredentialsChain() = default;
  ~CredentialsChain();
  CredentialsChain(const CredentialsChain&) = delete;
  CredentialsChain& operator=(const CredentialsChain&) = delete;

  // Callers' threads: resolves the chain on first use and refreshes credentials that expire
  // soon; may block on a credentials endpoint.
  Status Get(Credentials* out);
  // The loop thread: never blocks. The cached credentials while they are still valid; when
  // they are due for refresh, a refresh starts on a helper thread. An error when none are.
  Status GetCached(Credentials* out);
  // DynamoDB said the credentials expired: the next Get fetches new ones.
  void Invalidate();

  // Temporary credentials are refreshed this long before they expire (less for short-lived
  // ones: half their lifetime).
  static constexpr int64_t kRefreshMarginSeconds = 300;

 private:
  Status Resolve(Credentials* out);
  bool DueForRefresh(std::time_t now) const;  // mu_ held
  bool Usable(std::time_t now) const;          // mu_ held

  http::BlockingClient http_;
  std::mutex refresh_mu_;  // one resolution at a time
  mutable std::mutex mu_;  // guards the fields below
  bool have_ = false;
  bool invalidated_ = false;
  Credentials cached_;
  std::time_t fetched_at_ = 0;
  std::thread background_;
  std::atomic<bool> background_running_{false};
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_CREDENTIALS_H_
