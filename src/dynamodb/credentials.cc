#include "dynamodb/credentials.h"

#include "core/secret.h"
#include "core/server_text.h"
#include "core/text.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

namespace dlock::dynamodb {
namespace {

constexpr char kEcsHost[] = "http://169.254.170.2";
constexpr char kImdsDefault[] = "http://169.254.169.254";
constexpr char kImdsIpv6[] = "http://[fd00:ec2::254]";
constexpr int kEndpointTimeoutMs = 2000;

// The host of an http(s) URL, without brackets or port.
std::string UrlHost(const std::string& url) {
  size_t start = url.find("://");
  if (start == std::string::npos) return "";
  start += 3;
  size_t end = url.find_first_of("/?#", start);
  std::string authority = url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    return close == std::string::npos ? "" : authority.substr(1, close - 1);
  }
  return authority.substr(0, authority.find(':'));
}

}  // namespace

bool ContainerHostAllowedOverHttp(const std::string& host) {
  if (host == "localhost") return true;
  // Parsed, not compared as text: "127.evil.com" starts like a loopback address but is not one.
  unsigned char v4[sizeof(in_addr)];
  if (inet_pton(AF_INET, host.c_str(), v4) == 1) {
    return v4[0] == 127 || host == "169.254.170.2" || host == "169.254.170.23";
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  in6_addr eks;
  inet_pton(AF_INET6, "fd00:ec2::23", &eks);
  return IN6_IS_ADDR_LOOPBACK(&v6) || std::memcmp(&v6, &eks, sizeof v6) == 0;
}

namespace {

// Wipes the strings of a parsed credentials answer (the secret key and token among them).
void CleanseJsonStrings(nlohmann::json* doc) {
  if (!doc->is_object()) return;
  for (auto& item : doc->items()) {
    if (item.value().is_string()) Cleanse(&item.value().get_ref<std::string&>());
  }
}

Status ReadCredentialsJson(const nlohmann::json& doc, const std::string& source,
                           Credentials* out) {
  auto str = [&](const char* key) -> std::string {
    if (!doc.is_object()) return "";
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (!doc.is_object()) return Status::AuthError(source + " answered with something other than JSON");
  if (std::string code = str("Code"); !code.empty() && code != "Success") {
    return Status::AuthError(source + " answered Code=" + ServerText(code, 128) + ": " +
                             ServerText(str("Message")));
  }
  Credentials c;
  c.access_key_id = str("AccessKeyId");
  c.secret_access_key = str("SecretAccessKey");
  c.session_token = str("Token");
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return Status::AuthError(source + " answered without AccessKeyId/SecretAccessKey");
  }
  std::string expiration = str("Expiration");
  if (!expiration.empty()) {
    c.expires_at = ParseIsoTime(expiration);
    if (c.expires_at < 0) {
      return Status::AuthError(source + " answered a bad Expiration '" + ServerText(expiration, 64) + "'");
    }
  }
  c.source = source;
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace

Status ParseCredentialsJson(const std::string& text, const std::string& source, Credentials* out) {
  // Nesting bounded before parsing (server_text.h): the endpoint's answer is a server's text.
  nlohmann::json doc = JsonDepthWithin(text) ? nlohmann::json::parse(text, nullptr, false) : nlohmann::json();
  Status s = ReadCredentialsJson(doc, source, out);
  CleanseJsonStrings(&doc);
  return s;
}

namespace {

Status FetchOnce(http::BlockingClient* client, http::Request request, http::Response* response,
                 const std::string& what) {
  request.connect_timeout_ms = 1000;
  request.timeout_ms = kEndpointTimeoutMs;
  Status s = client->Perform(request, response);
  if (!s.ok()) return Status::AuthError(what + ": " + s.message());
  return Status::Ok();
}

}  // namespace

namespace {

// Reads a whole file straight into *out (no stream buffer keeps a copy of it).
bool ReadSecretFile(const std::string& path, Secret* out) {
  // O_NONBLOCK and a regular file only: a FIFO with no writer would block the refresh forever.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 && st.st_size <= (1 << 20);
  if (ok) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (ok && got < text.size()) {
      const ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) break;  // shorter than it was a moment ago
      ok = n > 0;
      if (ok) got += static_cast<size_t>(n);
    }
    text.resize(got);
    *out = Secret(std::move(text));
  }
  close(fd);
  return ok;
}

}  // namespace

int64_t ParseIsoTime(const std::string& text) {
  int y, mo, d, h, mi, sec;
  char rest[64] = {0};
  int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%63s", &y, &mo, &d, &h, &mi, &sec, rest);
  if (n < 6) return -1;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  int64_t t = timegm(&tm);
  // Skip fractional seconds, then apply an offset like +02:00 (Z or nothing means UTC).
  const char* p = rest;
  if (*p == '.') {
    ++p;
    while (*p >= '0' && *p <= '9') ++p;
  }
  if (*p == '+' || *p == '-') {
    int oh = 0, om = 0;
    if (std::sscanf(p + 1, "%2d:%2d", &oh, &om) < 1) return -1;
    int64_t offset = oh * 3600 + om * 60;
    t += *p == '+' ? -offset : offset;
  }
  return t;
}

Status CredentialsFromEnvironment(Credentials* out, bool* found) {
  *found = false;
  std::string id = Env("AWS_ACCESS_KEY_ID");
  Secret secret = Env("AWS_SECRET_ACCESS_KEY");
  if (id.empty() && secret.empty()) return Status::Ok();
  if (id.empty() || secret.empty()) {
    return Status::AuthError(std::string(id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
                             " is set but " + (id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
                             " is not");
  }
  *out = Credentials{id, secret, Env("AWS_SESSION_TOKEN"), 0, "environment"};
  *found = true;
  return Status::Ok();
}

Status CredentialsFromProfile(const AwsProfile& profile, Credentials* out, bool* found) {
  *found = false;
  const std::string where = "profile '" + profile.name + "' of the AWS shared files";
  if (!profile.found) {
    if (profile.explicitly_chosen) {
      return Status::AuthError("AWS_PROFILE names " + where + ", which has no such section");
    }
    return Status::Ok();
  }
  std::string id = profile.Get("aws_access_key_id");
  Secret secret = profile.Get("aws_secret_access_key");
  if (!id.empty() && !secret.empty()) {
    *out = Credentials{id, secret, profile.Get("aws_session_token"), 0, where};
    *found = true;
    return Status::Ok();
  }
  if (!id.empty() || !secret.empty()) {
    return Status::AuthError(where + " has only one of aws_access_key_id / aws_secret_access_key");
  }
  for (const char* unsupported : {"role_arn", "credential_process", "sso_session", "sso_start_url",
                                  "web_identity_token_file"}) {
    if (!profile.Get(unsupported).empty()) {
      return Status::AuthError(where + " uses " + unsupported +
                               ", which dlock does not support: export the resulting keys to "
                               "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN");
    }
  }
  return Status::Ok();
}

Status CredentialsFromContainer(http::BlockingClient* client, Credentials* out, bool* found) {
  *found = false;
  std::string relative = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  std::string full = Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (relative.empty() && full.empty()) return Status::Ok();
  std::string url;
  if (!relative.empty()) {
    url = kEcsHost + (relative[0] == '/' ? relative : "/" + relative);
  } else {
    url = full;
    bool https = url.rfind("https://", 0) == 0;
    bool http_url = url.rfind("http://", 0) == 0;
    if (!https && !(http_url && ContainerHostAllowedOverHttp(UrlHost(url)))) {
      return Status::AuthError(
          "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to a loopback or ECS/EKS "
          "agent address; got host '" + UrlHost(url) + "'");
    }
  }
  const std::string source = "container credentials endpoint " + url;
  http::Request request;
  request.method = "GET";
  request.url = url;
  Secret token;
  if (std::string file = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !file.empty()) {
    Secret text;
    if (!ReadSecretFile(file, &text)) {
      return Status::AuthError("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + file);
    }
    token = Trim(text);
  } else {
    token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    return Status::AuthError("the container authorization token contains a line break");
  }
  if (!token.empty()) request.headers.push_back("Authorization: " + token);
  http::Response response;
  Status s = FetchOnce(client, request, &response, source);
  if (s.ok() && response.status >= 500) s = FetchOnce(client, request, &response, source);  // once more
  for (std::string& header : request.headers) Cleanse(&header);
  if (s.ok() && response.status != 200) {
    s = Status::AuthError(source + " answered HTTP " + std::to_string(response.status));
  } else if (s.ok()) {
    s = ParseCredentialsJson(response.body, source, out);
    *found = s.ok();
  }
  Cleanse(&response.body);
  return s;
}

Status CredentialsFromImds(http::BlockingClient* client, Credentials* out, bool* found) {
  *found = false;
  if (IsTrue(Env("AWS_EC2_METADATA_DISABLED"))) return Status::Ok();
  std::string base = Env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (base.empty()) {
    base = Env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE") == "IPv6" ? kImdsIpv6 : kImdsDefault;
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string source = "EC2 instance metadata at " + base;

  http::Request token_request;
  token_request.method = "PUT";
  token_request.url = base + "/latest/api/token";
  token_request.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
  http::Response response;
  if (Status reach = FetchOnce(client, token_request, &response, source); !reach.ok()) {
    return reach;  // no metadata service here: not on EC2, the chain simply ends
  }
  if (response.status != 200 || response.body.empty()) {
    return Status::AuthError(source + ": IMDSv2 token request answered HTTP " +
                             std::to_string(response.status));
  }
  const std::string token_header = "X-aws-ec2-metadata-token: " + Trim(response.body);

  http::Request role_request;
  role_request.method = "GET";
  role_request.url = base + "/latest/meta-data/iam/security-credentials/";
  role_request.headers = {token_header};
  Status s = FetchOnce(client, role_request, &response, source);
  if (!s.ok()) return s;
  if (response.status == 404) return Status::AuthError(source + ": the instance has no IAM role");
  if (response.status != 200) {
    return Status::AuthError(source + ": role lookup answered HTTP " + std::to_string(response.status));
  }
  std::string role = Trim(response.body.substr(0, response.body.find('\n')));
  if (role.empty()) return Status::AuthError(source + ": the instance has no IAM role");
  // The role goes into the next URL's path and into messages: only what IAM allows in a role
  // name (1 to 64 of [A-Za-z0-9+=,.@_-]), so that an answer cannot steer the request or the text.
  const bool role_ok = role.size() <= 64 && std::all_of(role.begin(), role.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("+=,.@_-", ch) != nullptr;
  });
  if (!role_ok) {
    return Status::AuthError(source + ": the role lookup answered something that is not an IAM "
                             "role name ('" + ServerText(role, 80) + "')");
  }

  http::Request creds_request = role_request;
  creds_request.url += role;
  s = FetchOnce(client, creds_request, &response, source);
  if (!s.ok()) return s;
  if (response.status != 200) {
    return Status::AuthError(source + ": credentials of role " + role + " answered HTTP " +
                             std::to_string(response.status));
  }
  s = ParseCredentialsJson(response.body, source + " (role " + role + ")", out);
  *found = s.ok();
  Cleanse(&response.body);
  return s;
}

CredentialsChain::~CredentialsChain() {
  if (background_.joinable()) background_.join();
}

namespace {
std::string OrNoHome(const std::string& path) { return path.empty() ? "(HOME unset)" : path; }
}  // namespace

Status CredentialsChain::Resolve(Credentials* out) {
  // What each source said, for the message when none has credentials: a user who expected one
  // source to work needs to see why it did not, not only the last source's complaint.
  std::vector<std::string> tried;
  bool found = false;
  Status s = CredentialsFromEnvironment(out, &found);
  if (!s.ok() || found) return s;
  tried.push_back("environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY not set");
  AwsProfile profile;
  s = LoadAwsProfile(&profile);
  if (!s.ok()) return s;
  s = CredentialsFromProfile(profile, out, &found);
  if (!s.ok() || found) return s;
  tried.push_back("profile '" + profile.name + "' in " + OrNoHome(profile.credentials_file) + " and " +
                  OrNoHome(profile.config_file) + ": " +
                  (profile.found ? "no aws_access_key_id in it" : "no such profile"));
  s = CredentialsFromContainer(&http_, out, &found);
  if (!s.ok() || found) return s;
  tried.push_back("container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI not set");
  if (IsTrue(Env("AWS_EC2_METADATA_DISABLED"))) {
    tried.push_back("EC2 instance metadata: off (AWS_EC2_METADATA_DISABLED)");
  } else {
    s = CredentialsFromImds(&http_, out, &found);
    if (found) return s;
    tried.push_back(s.ok() ? "EC2 instance metadata: no credentials" : s.message());
  }
  std::string message = "no AWS credentials found; tried, in order:";
  for (size_t i = 0; i < tried.size(); ++i) {
    message += " (" + std::to_string(i + 1) + ") " + tried[i] + (i + 1 < tried.size() ? ";" : ".");
  }
  return Status::AuthError(
      message + " Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a local dynalite accepts any "
      "pair), put keys in a profile (AWS_PROFILE picks it), or run with container credentials "
      "or on EC2 with an instance role");
}

bool CredentialsChain::Usable(std::time_t now) const {
  if (!have_) return false;
  if (cached_.expires_at == 0) return true;
  // A little slack: a request signed now must still be valid when it arrives.
  int64_t slack = std::min<int64_t>(10, (cached_.expires_at - fetched_at_) / 4);
  return now + slack < cached_.expires_at;
}

bool CredentialsChain::DueForRefresh(std::time_t now) const {
  if (!have_ || invalidated_) return true;
  if (cached_.expires_at == 0) return false;
  int64_t lifetime = cached_.expires_at - fetched_at_;
  int64_t margin = std::min<int64_t>(kRefreshMarginSeconds, lifetime / 2);
  return now >= cached_.expires_at - margin;
}

Status CredentialsChain::Get(Credentials* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!DueForRefresh(std::time(nullptr))) {
      *out = cached_;
      return Status::Ok();
    }
  }
  std::lock_guard<std::mutex> one_at_a_time(refresh_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);  // another thread may have refreshed meanwhile
    if (!DueForRefresh(std::time(nullptr))) {
      *out = cached_;
      return Status::Ok();
    }
  }
  Credentials fresh;
  Status s = Resolve(&fresh);
  std::lock_guard<std::mutex> lock(mu_);
  std::time_t now = std::time(nullptr);
  if (!s.ok()) {
    if (Usable(now)) {  // keep using the old ones until they really expire
      *out = cached_;
      return Status::Ok();
    }
    return s;
  }
  cached_ = std::move(fresh);
  fetched_at_ = now;
  have_ = true;
  invalidated_ = false;
  *out = cached_;
  return Status::Ok();
}

void CredentialsChain::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  invalidated_ = true;
}

Status CredentialsChain::GetCached(Credentials* out) {
  std::lock_guard<std::mutex> lock(mu_);
  std::time_t now = std::time(nullptr);
  if (DueForRefresh(now) && !background_running_.exchange(true)) {
    if (background_.joinable()) background_.join();  // the previous refresh has finished
    background_ = std::thread([this] {
      Credentials ignored;
      (void)Get(&ignored);
      background_running_.store(false);
    });
  }
  if (Usable(now)) {
    *out = cached_;
    return Status::Ok();
  }
  return Status::AuthError(have_ ? "AWS credentials from " + cached_.source +
                                       " expired; a refresh is under way"
                                 : "AWS credentials are not resolved yet; resolving");
}

}  // namespace dlock::dynamodb
