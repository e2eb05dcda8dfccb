// The dlock command never shows a URL's secrets, wherever it shows a URL (`-v`, `prepare`,
// `inspect`, its errors), and says when a certificate is not verified (tls_verify=0). Run as a
// user runs it, against real servers: a redis-server with a password, one speaking TLS only,
// and a Sentinel group whose sentinels have their own password.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/child_process.h"
#include "support/redis_sentinel.h"
#include "support/redis_server.h"
#include "support/tls_certs.h"

namespace dlock_test {
namespace cli_secrets {  // its own: a unity build puts this file beside cli_test.cc
namespace {

using namespace std::chrono_literals;

const std::string kDlock = DLOCK_CLI;
// The password every URL below holds, or the pieces it is cut into by a '/', '?' or '#'.
const std::string kPassword = "Xq7Zk9";
const char* const kPieces[] = {"Xq7", "Zk9"};

struct CliRun {
  int code;
  std::string output;  // stdout and stderr
};

// `dlock --url URL ARGS...`, the URL also in DLOCK_URL (the command line wins): both ways in.
CliRun Dlock(const std::string& url, std::vector<std::string> args) {
  args.insert(args.begin(), {kDlock, "--url", url});
  ChildProcess p(args, ChildOptions::Env({"DLOCK_URL=" + url}));
  const int code = p.Wait(60s);
  return {code, p.output()};
}

void ExpectNoPieceOfThePassword(const CliRun& r, const std::string& url) {
  for (const char* piece : kPieces) {
    EXPECT_EQ(r.output.find(piece), std::string::npos) << url << " shows '" << piece << "':\n" << r.output;
  }
}

class CliSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.running()); }
  std::string Address() const { return redis_.address(); }
  RedisServer redis_{std::vector<std::string>{"--requirepass", kPassword}};
};

TEST_F(CliSecretsTest, InspectShowsNoPieceOfAPasswordHoldingSlashHashOrQuestionMark) {
  // Unencoded, these characters end the authority early: the URL cannot be read, and the
  // message must echo nothing of it (today's: "URL port 'Xq7' is not an integer").
  for (const std::string& url :
       {"redis://app:Xq7/Zk9@" + Address(), "redis://:Xq7#Zk9@" + Address(),
        "redis://u:Xq7?Zk9@" + Address(), "redis://:Xq7/Zk9@" + Address() + "/0",
        "redis-sentinel://:Xq7/Zk9@" + Address() + "/m", "redis:/:Xq7Zk9@" + Address()}) {
    CliRun r = Dlock(url, {"inspect", "x"});
    EXPECT_EQ(r.code, 64) << url << "\n" << r.output;
    EXPECT_NE(r.output.find("percent-encode"), std::string::npos) << url << "\n" << r.output;
    ExpectNoPieceOfThePassword(r, url);
  }
  // Percent-encoded, the same password works.
  CliRun r = Dlock("redis://:" + kPassword + "@" + Address(), {"inspect", "x"});
  EXPECT_EQ(r.code, 0) << r.output;
  ExpectNoPieceOfThePassword(r, "encoded");
}

TEST_F(CliSecretsTest, InspectOfAWrongPasswordShowsNoneOfIt) {
  const std::string url = "redis://:" + kPassword + "wrong@" + Address();
  CliRun r = Dlock(url, {"inspect", "x"});
  EXPECT_NE(r.code, 0) << r.output;
  ExpectNoPieceOfThePassword(r, url);
}

TEST_F(CliSecretsTest, ASentinelPasswordCutByARawAmpersandShowsNoneOfIt) {
  // The pieces after the '&' are no parameters: the message names none of them.
  const std::string cut = "redis-sentinel://" + Address() + "/mymaster?sentinel_password=Xq7&Zk9";
  CliRun r = Dlock(cut, {"prepare"});
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("%26"), std::string::npos) << r.output;
  ExpectNoPieceOfThePassword(r, cut);
  const std::string named = cut + "=1";
  r = Dlock(named, {"inspect", "x"});
  EXPECT_EQ(r.code, 64) << r.output;
  ExpectNoPieceOfThePassword(r, named);
}

TEST(CliSentinelSecretsTest, PrepareAndVerboseExecShowTheSentinelPasswordAsStars) {
  RedisSentinelGroup::Options options;
  options.master_password = kPassword;
  options.sentinel_password = kPassword;
  RedisSentinelGroup group(options);
  ASSERT_TRUE(group.ready());
  const std::string url = "redis-sentinel://:" + kPassword + "@" + group.sentinels() + "/" +
                          group.master_name() + "?sentinel_password=" + kPassword +
                          "&timeout_ms=2000";
  CliRun r = Dlock(url, {"prepare"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ready: redis-sentinel://:***@"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("?sentinel_password=***&timeout_ms=2000"), std::string::npos) << r.output;
  ExpectNoPieceOfThePassword(r, url);

  r = Dlock(url, {"-v", "exec", "job", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sentinel_password=***"), std::string::npos) << r.output;
  ExpectNoPieceOfThePassword(r, url);
}

TEST_F(CliSecretsTest, VerboseExecShowsTheUrlWithoutItsPassword) {
  for (const std::string& url :
       {"redis://:" + kPassword + "@" + Address() + "/?prefix=app:",
        "redis://default:" + kPassword + "@" + Address()}) {
    CliRun r = Dlock(url, {"-v", "exec", "job", "--", "true"});
    EXPECT_EQ(r.code, 0) << url << "\n" << r.output;
    EXPECT_NE(r.output.find("waiting for lock 'job' at redis://"), std::string::npos) << r.output;
    ExpectNoPieceOfThePassword(r, url);
  }
}

TEST(CliTlsTest, AnUnverifiedCertificateIsSaidByVerboseExecPrepareAndErrors) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(RedisTls{.certs = &certs});
  ASSERT_TRUE(redis.running());
  const std::string note = "certificate not verified";

  CliRun r = Dlock(redis.url() + "?tls_verify=0", {"-v", "exec", "job", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(note), std::string::npos) << r.output;

  r = Dlock(redis.url() + "?tls_verify=0", {"prepare"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(note), std::string::npos) << r.output;

  // An error that names the server: nothing listens on the plain port of a stopped server.
  const std::string gone = redis.url() + "?tls_verify=0&connect_timeout_ms=500&timeout_ms=500";
  redis.Stop();
  r = Dlock(gone, {"inspect", "x"});
  EXPECT_EQ(r.code, 69) << r.output;
  EXPECT_NE(r.output.find("redis 127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(note), std::string::npos) << r.output;

  // Verified: no such words.
  RedisServer verified(RedisTls{.certs = &certs});
  r = Dlock(verified.url() + "?ca=" + certs.ca_cert(), {"-v", "exec", "job", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find(note), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cli_secrets
}  // namespace dlock_test
