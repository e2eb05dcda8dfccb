// rediss:// and tls=1: what only TLS has. The conformance suite runs every behaviour over TLS
// (CA only, and with a client certificate); these are the ways TLS goes wrong, each a clear
// error naming the cause within the call's bound, and the settings that change what is checked.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "support/redis_server.h"
#include "support/tls_certs.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds: connect_timeout_ms + timeout_ms = 1.6 s, with slack for sanitizers on busy cores.
constexpr const char* kTimeouts = "connect_timeout_ms=800&timeout_ms=800";
constexpr auto kBound = std::chrono::seconds(6);

class RedisTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new TestCertificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(certs_->ok()); }

  // Opens url; the status, and the error in *error.
  static dlock_status Open(const std::string& url, std::string* error,
                           Clock::duration* took = nullptr) {
    dlock_client* c = nullptr;
    const auto start = Clock::now();
    dlock_status s = dlock_client_open(url.c_str(), &c);
    if (took != nullptr) *took = Clock::now() - start;
    *error = s == DLOCK_OK ? "" : dlock_last_error();
    if (s == DLOCK_OK) {  // a lock round trip, as a user's first call
      dlock_lock* l = nullptr;
      s = dlock_acquire(c, "tls", nullptr, &l);
      if (s == DLOCK_OK) s = dlock_release(l);
      if (s != DLOCK_OK) *error = dlock_last_error();
    }
    dlock_client_close(c);
    return s;
  }
  static std::string Ca(const std::string& file) { return std::string("&ca=") + file; }

  static TestCertificates* certs_;
};
TestCertificates* RedisTlsTest::certs_ = nullptr;

TEST_F(RedisTlsTest, AServerCertificateFromAnotherCaIsNotTrusted) {
  RedisServer redis(RedisTls{.certs = certs_});
  std::string error;
  Clock::duration took;
  EXPECT_EQ(Open(redis.url() + "?" + kTimeouts + Ca(certs_->other_ca_cert()), &error, &took),
            DLOCK_EAUTH);
  EXPECT_NE(error.find("certificate is not trusted"), std::string::npos) << error;
  EXPECT_NE(error.find(redis.address()), std::string::npos) << error;
  EXPECT_LT(took, kBound);
  // tls_verify=0 checks nothing: the same server is accepted.
  EXPECT_EQ(Open(redis.url() + "?tls_verify=0" + Ca(certs_->other_ca_cert()), &error), DLOCK_OK)
      << error;
}

TEST_F(RedisTlsTest, AnExpiredServerCertificateIsRefused) {
  RedisServer redis(RedisTls{.certs = certs_, .server_cert = RedisTls::Cert::kExpired});
  std::string error;
  EXPECT_EQ(Open(redis.url() + "?" + kTimeouts + Ca(certs_->ca_cert()), &error), DLOCK_EAUTH);
  EXPECT_NE(error.find("certificate has expired"), std::string::npos) << error;
}

TEST_F(RedisTlsTest, ACertificateForAnotherHostIsRefusedUnlessSniNamesIt) {
  RedisServer redis(RedisTls{.certs = certs_, .server_cert = RedisTls::Cert::kWrongHost});
  std::string error;
  EXPECT_EQ(Open(redis.url() + "?" + kTimeouts + Ca(certs_->ca_cert()), &error), DLOCK_EAUTH);
  EXPECT_NE(error.find("host name mismatch"), std::string::npos) << error;
  // The certificate is for wrong.example: reached at 127.0.0.1 under that name, it is good.
  EXPECT_EQ(Open(redis.url() + "?sni=wrong.example" + Ca(certs_->ca_cert()), &error), DLOCK_OK)
      << error;
  // And the certificate of the right host is checked by name too: "localhost" is in it.
  RedisServer good(RedisTls{.certs = certs_});
  EXPECT_EQ(Open("rediss://localhost:" + std::to_string(good.port()) + "?" + kTimeouts +
                     Ca(certs_->ca_cert()),
                 &error),
            DLOCK_OK)
      << error;
}

TEST_F(RedisTlsTest, APlainClientAtTheTlsPortIsToldToUseTls) {
  RedisServer redis(RedisTls{.certs = certs_});
  std::string error;
  Clock::duration took;
  EXPECT_EQ(Open("redis://" + redis.address() + "?" + kTimeouts, &error, &took), DLOCK_EIO);
  EXPECT_NE(error.find("rediss:// or tls=1"), std::string::npos) << error;
  EXPECT_LT(took, kBound);
}

TEST_F(RedisTlsTest, ATlsClientAtAPlainPortIsToldItIsPlain) {
  RedisServer redis(RedisTls{.certs = certs_, .plain_port_too = true});
  std::string error;
  Clock::duration took;
  EXPECT_EQ(Open("rediss://127.0.0.1:" + std::to_string(redis.plain_port()) + "?" + kTimeouts +
                     Ca(certs_->ca_cert()),
                 &error, &took),
            DLOCK_EIO);
  EXPECT_NE(error.find("plain Redis port"), std::string::npos) << error;
  EXPECT_LT(took, kBound);
  // The same server's TLS port, and its plain port without TLS, both work.
  EXPECT_EQ(Open(redis.url() + "?" + kTimeouts + Ca(certs_->ca_cert()), &error), DLOCK_OK) << error;
  EXPECT_EQ(Open("redis://127.0.0.1:" + std::to_string(redis.plain_port()), &error), DLOCK_OK)
      << error;
}

TEST_F(RedisTlsTest, AServerThatRequiresAClientCertificateSaysSo) {
  RedisServer redis(RedisTls{.certs = certs_, .require_client_cert = true});
  std::string error;
  Clock::duration took;
  const dlock_status s = Open(redis.url() + "?" + kTimeouts + Ca(certs_->ca_cert()), &error, &took);
  // TLS 1.3: the refusal comes after the handshake, as an alert or (when the server's reset
  // wins the race) as a reset; either way the error says what to do.
  EXPECT_TRUE(s == DLOCK_EAUTH || s == DLOCK_EIO) << dlock_status_str(s);
  EXPECT_NE(error.find("client certificate"), std::string::npos) << error;
  EXPECT_LT(took, kBound);
  EXPECT_EQ(Open(redis.url() + "?" + kTimeouts + Ca(certs_->ca_cert()) + "&cert=" +
                     certs_->client_cert() + "&key=" + certs_->client_key(),
                 &error),
            DLOCK_OK)
      << error;
}

TEST_F(RedisTlsTest, BadFilesAreInvalidArgumentsNamingTheFile) {
  // Nothing listens: the files are read, and refused, before any connection.
  const std::string url = "rediss://127.0.0.1:1?" + std::string(kTimeouts);
  struct Case {
    std::string query;
    std::string says;
  };
  const Case cases[] = {
      {"&ca=/nonexistent/ca.pem", "ca=/nonexistent/ca.pem: cannot read it"},
      {"&ca=" + certs_->ca_key(), "no PEM certificate could be read from it"},
      {"&cert=" + certs_->client_cert() + "&key=" + certs_->mismatched_key(),
       "key=" + certs_->mismatched_key() + " does not match the certificate in cert=" +
           certs_->client_cert()},
      {"&cert=" + certs_->client_cert(), "cert= and key= go together"},
      {"&cert=" + certs_->client_cert() + "&key=/nonexistent.key", "key=/nonexistent.key"},
      {"&cert=" + certs_->client_key() + "&key=" + certs_->client_key(),
       "cert=" + certs_->client_key() + ": no PEM certificate"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_EQ(Open(url + c.query, &error), DLOCK_EINVAL) << c.query;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.query << ": " << error;
    // dlock_backend_prepare reads them too.
    EXPECT_EQ(dlock_backend_prepare((url + c.query).c_str(), 0), DLOCK_EINVAL) << c.query;
  }
}

}  // namespace
}  // namespace dlock_test
