// The credentials chain: environment, shared files with AWS_PROFILE, a container endpoint and
// an IMDSv2 service (both fake, on loopback), refresh before expiry, and no secrets in errors.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "dynamodb/credentials.h"
#include "support/dynalite_server.h"
#include "support/fake_http_server.h"

namespace dlock::dynamodb {
namespace {

using dlock_test::FakeHttpServer;
using dlock_test::FakeRequest;
using dlock_test::FakeResponse;

std::string TempFile(const std::string& content) {
  char path[] = "/tmp/dlock-aws-file-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << content;
  return path;
}

std::string IsoIn(int seconds) {
  std::time_t t = std::time(nullptr) + seconds;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

template <typename Cond>
bool WaitUntil(Cond cond, int limit_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dlock_test::UseTestCredentials();
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
  }
  void TearDown() override {
    for (const auto& f : files_) unlink(f.c_str());
  }
  std::string File(const std::string& content) {
    files_.push_back(TempFile(content));
    return files_.back();
  }
  std::vector<std::string> files_;
};

TEST_F(CredentialsTest, EnvironmentComesFirst) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
  setenv("AWS_SESSION_TOKEN", "env-token", 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", File("[default]\naws_access_key_id=AKIDFILE\naws_secret_access_key=x\n").c_str(), 1);
  CredentialsChain chain;
  Credentials c;
  ASSERT_TRUE(chain.Get(&c).ok());
  EXPECT_EQ(c.access_key_id, "AKIDENV");
  EXPECT_EQ(c.secret_access_key, "env-secret");
  EXPECT_EQ(c.session_token, "env-token");
  EXPECT_EQ(c.source, "environment");
}

TEST_F(CredentialsTest, HalfAnEnvironmentIsAnErrorWithoutTheSecret) {
  setenv("AWS_SECRET_ACCESS_KEY", "lonely-secret", 1);
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_NE(s.message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(s.message().find("lonely-secret"), std::string::npos);
}

TEST_F(CredentialsTest, ProfileFromTheSharedFiles) {
  setenv("AWS_SHARED_CREDENTIALS_FILE",
         File("[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n"
              "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = dev-secret\n"
              "aws_session_token = dev-token\n").c_str(), 1);
  setenv("AWS_CONFIG_FILE", File("[profile ops]\naws_access_key_id = AKIDOPS\naws_secret_access_key = ops-secret\n").c_str(), 1);
  {
    CredentialsChain chain;
    Credentials c;
    ASSERT_TRUE(chain.Get(&c).ok());
    EXPECT_EQ(c.access_key_id, "AKIDDEFAULT");
  }
  setenv("AWS_PROFILE", "dev", 1);
  {
    CredentialsChain chain;
    Credentials c;
    ASSERT_TRUE(chain.Get(&c).ok());
    EXPECT_EQ(c.access_key_id, "AKIDDEV");
    EXPECT_EQ(c.session_token, "dev-token");
    EXPECT_NE(c.source.find("dev"), std::string::npos);
  }
  setenv("AWS_PROFILE", "ops", 1);  // keys may live in the config file too
  {
    CredentialsChain chain;
    Credentials c;
    ASSERT_TRUE(chain.Get(&c).ok());
    EXPECT_EQ(c.access_key_id, "AKIDOPS");
  }
  setenv("AWS_PROFILE", "nope", 1);
  {
    CredentialsChain chain;
    Credentials c;
    Status s = chain.Get(&c);
    EXPECT_EQ(s.code(), Code::kAuthError);
    EXPECT_NE(s.message().find("'nope'"), std::string::npos) << s.message();
  }
}

TEST_F(CredentialsTest, ContainerEndpointWithTokenFileAndRefreshBeforeExpiry) {
  std::atomic<int> served{0};
  FakeHttpServer container([&](const FakeRequest& r) {
    auto auth = r.headers.find("authorization");
    if (r.path != "/creds" || auth == r.headers.end() || auth->second != "Bearer from-file") {
      return FakeResponse{403, "text/plain", "denied"};
    }
    int n = ++served;
    // Six-second credentials: refreshed after half their life.
    return FakeResponse{200, "application/json",
                        R"({"AccessKeyId":"ASIA)" + std::to_string(n) + R"(","SecretAccessKey":"s)" +
                            std::to_string(n) + R"(","Token":"t)" + std::to_string(n) +
                            R"(","Expiration":")" + IsoIn(6) + R"("})"};
  });
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (container.url() + "/creds").c_str(), 1);
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", File("Bearer from-file\n").c_str(), 1);
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-when-a-file-is-set", 1);
  CredentialsChain chain;
  Credentials c;
  ASSERT_TRUE(chain.Get(&c).ok());
  EXPECT_EQ(c.access_key_id, "ASIA1");
  EXPECT_EQ(c.session_token, "t1");
  EXPECT_GT(c.expires_at, std::time(nullptr));
  ASSERT_TRUE(chain.Get(&c).ok());
  EXPECT_EQ(served.load(), 1) << "cached while fresh";
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  ASSERT_TRUE(chain.Get(&c).ok());
  EXPECT_EQ(served.load(), 2) << "refreshed before expiry";
  EXPECT_EQ(c.access_key_id, "ASIA2");
}

TEST_F(CredentialsTest, LoopThreadRefreshesInTheBackground) {
  std::atomic<int> served{0};
  FakeHttpServer container([&](const FakeRequest&) {
    int n = ++served;
    return FakeResponse{200, "application/json",
                        R"({"AccessKeyId":"ASIA)" + std::to_string(n) +
                            R"(","SecretAccessKey":"s","Token":"t","Expiration":")" + IsoIn(6) + R"("})"};
  });
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url().c_str(), 1);
  CredentialsChain chain;
  Credentials c;
  EXPECT_EQ(chain.GetCached(&c).code(), Code::kAuthError) << "nothing resolved yet, and no blocking";
  ASSERT_TRUE(WaitUntil([&] { return chain.GetCached(&c).ok(); }, 10000));
  EXPECT_EQ(c.access_key_id, "ASIA1");
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));  // past half the lifetime
  ASSERT_TRUE(chain.GetCached(&c).ok()) << "still valid while the refresh runs";
  ASSERT_TRUE(WaitUntil(
      [&] { return chain.GetCached(&c).ok() && c.access_key_id == "ASIA2"; }, 10000));
}

TEST_F(CredentialsTest, ContainerFullUriMustNotLeaveTheHostOverPlainHttp) {
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://credentials.example.com/creds", 1);
  Credentials c;
  bool found = true;
  Status s = CredentialsFromContainer(nullptr, &c, &found);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_FALSE(found);
  EXPECT_NE(s.message().find("credentials.example.com"), std::string::npos);
}

TEST_F(CredentialsTest, ContainerFullUriOverPlainHttpNeedsALoopbackOrAgentAddressNotAPrefix) {
  // Names that only look like a loopback address are refused before any request is made.
  for (const char* url : {"http://127.evil.com/creds", "http://127.0.0.1.evil.com/creds",
                          "http://localhost.evil.com/creds", "http://127.1/creds",
                          "http://169.254.170.2.evil.com/creds", "http://[::2]/creds",
                          "http://user@evil.com/creds", "http://1270.0.0.1/creds"}) {
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    http::BlockingClient client;
    Credentials c;
    bool found = true;
    Status s = CredentialsFromContainer(&client, &c, &found);
    EXPECT_EQ(s.code(), Code::kAuthError) << url;
    EXPECT_FALSE(found) << url;
    EXPECT_NE(s.message().find("must be https, or http to a loopback"), std::string::npos)
        << url << ": " << s.message();
  }
  // What AWS's SDKs allow over plain http: loopback (127.0.0.0/8, ::1, localhost) and the
  // ECS and EKS agents' addresses.
  for (const char* host : {"127.0.0.1", "127.255.0.9", "localhost", "::1", "0:0::1",
                           "169.254.170.2", "169.254.170.23", "fd00:ec2::23", "FD00:EC2:0::23"}) {
    EXPECT_TRUE(ContainerHostAllowedOverHttp(host)) << host;
  }
  for (const char* host : {"127.evil.com", "127.0.0.1.evil.com", "localhost.evil.com", "127.1",
                           "128.0.0.1", "::2", "169.254.170.3", "fd00:ec2::254", "", "127.0.0.1 "}) {
    EXPECT_FALSE(ContainerHostAllowedOverHttp(host)) << host;
  }
}

TEST_F(CredentialsTest, ContainerErrorsNameTheEndpointButNoSecret) {
  FakeHttpServer container([&](const FakeRequest&) { return FakeResponse{500, "text/plain", "boom"}; });
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url().c_str(), 1);
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "super-secret-token", 1);
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_NE(s.message().find(container.url()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("500"), std::string::npos);
  EXPECT_EQ(s.message().find("super-secret-token"), std::string::npos);
  EXPECT_EQ(container.requests(), 2) << "a 5xx is tried once more";
}

TEST_F(CredentialsTest, ImdsV2TokenThenRoleThenCredentials) {
  std::atomic<bool> token_requested{false};
  FakeHttpServer imds([&](const FakeRequest& r) {
    if (r.method == "PUT" && r.path == "/latest/api/token") {
      if (r.headers.count("x-aws-ec2-metadata-token-ttl-seconds") == 0) return FakeResponse{400, "text/plain", ""};
      token_requested = true;
      return FakeResponse{200, "text/plain", "imds-session-token"};
    }
    auto token = r.headers.find("x-aws-ec2-metadata-token");
    if (token == r.headers.end() || token->second != "imds-session-token") {
      return FakeResponse{401, "text/plain", ""};  // IMDSv2 only: no token, no answer
    }
    if (r.path == "/latest/meta-data/iam/security-credentials/") return FakeResponse{200, "text/plain", "lock-role\n"};
    if (r.path == "/latest/meta-data/iam/security-credentials/lock-role") {
      return FakeResponse{200, "application/json",
                          R"({"Code":"Success","AccessKeyId":"ASIAIMDS","SecretAccessKey":"imds-secret",)"
                          R"("Token":"imds-token","Expiration":")" + IsoIn(3600) + R"("})"};
    }
    return FakeResponse{404, "text/plain", ""};
  });
  unsetenv("AWS_EC2_METADATA_DISABLED");
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url().c_str(), 1);
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(token_requested.load());
  EXPECT_EQ(c.access_key_id, "ASIAIMDS");
  EXPECT_EQ(c.session_token, "imds-token");
  EXPECT_NE(c.source.find("lock-role"), std::string::npos);
}

TEST_F(CredentialsTest, AnImdsRoleThatIsNoRoleNameIsRefusedNotFollowed) {
  // A role name goes into the next request's path: "../" or a query must not steer it, and
  // control bytes must not reach the message.
  std::atomic<int> followed{0};
  FakeHttpServer imds([&](const FakeRequest& r) {
    if (r.method == "PUT") return FakeResponse{200, "text/plain", "imds-session-token"};
    if (r.path == "/latest/meta-data/iam/security-credentials/") {
      return FakeResponse{200, "text/plain", "../../user-data?x=\x1b[31m\n"};
    }
    ++followed;
    return FakeResponse{404, "text/plain", ""};
  });
  unsetenv("AWS_EC2_METADATA_DISABLED");
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url().c_str(), 1);
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_NE(s.message().find("not an IAM role name"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos) << "a control byte reached the message";
  EXPECT_EQ(followed.load(), 0) << "the answer was used in a request";
}

TEST_F(CredentialsTest, NothingAnywhereSaysWhereItLooked) {
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_NE(s.message().find("no AWS credentials found"), std::string::npos);
  EXPECT_NE(s.message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  // Every source, in order, with what it said.
  for (const char* source : {"(1) environment", "(2) profile 'default'", "(3) container credentials",
                             "(4) EC2 instance metadata: off"}) {
    EXPECT_NE(s.message().find(source), std::string::npos) << source << " in " << s.message();
  }
  EXPECT_NE(s.message().find("dynalite accepts any pair"), std::string::npos) << s.message();
}

TEST_F(CredentialsTest, AnImdsThatRefusesIsOneSourceAmongTheOthers) {
  // A machine whose metadata address answers 403 (a proxy, not EC2): the error lists all four
  // sources, not only IMDS's complaint.
  FakeHttpServer imds([&](const FakeRequest&) { return FakeResponse{403, "text/plain", "denied"}; });
  unsetenv("AWS_EC2_METADATA_DISABLED");
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url().c_str(), 1);
  std::string empty = TempFile("[other]\naws_access_key_id = A\n");
  files_.push_back(empty);
  setenv("AWS_SHARED_CREDENTIALS_FILE", empty.c_str(), 1);
  CredentialsChain chain;
  Credentials c;
  Status s = chain.Get(&c);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  EXPECT_EQ(s.code(), Code::kAuthError);
  EXPECT_NE(s.message().find("no AWS credentials found"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(1) environment"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("profile 'default' in " + empty), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no such profile"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(3) container credentials"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("IMDSv2 token request answered HTTP 403"), std::string::npos) << s.message();
}

TEST(IsoTime, Parses) {
  EXPECT_EQ(ParseIsoTime("1970-01-01T00:00:10Z"), 10);
  EXPECT_EQ(ParseIsoTime("1970-01-01T00:00:10.123Z"), 10);
  EXPECT_EQ(ParseIsoTime("1970-01-01T01:00:10+01:00"), 10);
  EXPECT_EQ(ParseIsoTime("garbage"), -1);
}

TEST(Ini, SectionsKeysAndSubProperties) {
  auto ini = ParseIni("# c\n[a]\nKey = v 1\n; c\nsub =\n  nested = x\n[profile b]\nk=2\n");
  EXPECT_EQ(ini["a"]["key"], "v 1");
  EXPECT_EQ(ini["a"].count("nested"), 0u);
  EXPECT_EQ(ini["profile b"]["k"], "2");
}

// A credentials endpoint is a server too: its nesting is bounded before parsing, and its own
// words reach a message capped, with control bytes escaped (server_text.h).
TEST(CredentialsJson, DeepNestingIsRefusedAndErrorWordsAreEscaped) {
  Credentials got;
  const std::string deep = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"x\":" +
                           std::string(100000, '[') + std::string(100000, ']') + "}";
  Status s = ParseCredentialsJson(deep, "container endpoint", &got);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("something other than JSON"), std::string::npos) << s.message();

  s = ParseCredentialsJson("{\"Code\":\"Denied\\u001b[2J\",\"Message\":\"" + std::string(5000, 'm') +
                               "\\u0007\"}",
                           "container endpoint", &got);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Denied\\x1b[2J"), std::string::npos) << s.message();
  EXPECT_LT(s.message().size(), 1000u) << "the endpoint's 5000-byte message was kept whole";
}

}  // namespace
}  // namespace dlock::dynamodb
