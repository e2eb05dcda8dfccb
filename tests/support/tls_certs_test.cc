// Tests of TestCertificates and of TLS RedisServers, with real tools (`openssl verify`, OpenSSL,
// redis-server): the library's TLS tests are only as good as these certificates and servers.
#include "support/tls_certs.h"

#include <hiredis/hiredis.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/child_process.h"
#include "support/redis_server.h"
#include "support/redis_wire.h"

namespace dlock_test {
namespace {

using std::chrono::milliseconds;
using wire::ContextPtr;
using wire::ReplyPtr;
using wire::TlsClientOptions;
using wire::TlsConnection;

// `openssl verify ARGS...`: "OK" when it exits 0, else what it said.
std::string Verify(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FindOnPath("openssl", "DLOCK_OPENSSL"), "verify"};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p(argv);
  int code = p.Wait(std::chrono::seconds(30));
  return code == 0 ? "OK" : "exit " + std::to_string(code) + ": " + p.output();
}

// Whether the private key in key_path belongs to the certificate in cert_path.
bool KeyMatches(const std::string& cert_path, const std::string& key_path) {
  FILE* cf = fopen(cert_path.c_str(), "r");
  FILE* kf = fopen(key_path.c_str(), "r");
  X509* cert = cf ? PEM_read_X509(cf, nullptr, nullptr, nullptr) : nullptr;
  EVP_PKEY* key = kf ? PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr) : nullptr;
  EXPECT_TRUE(cert && key) << cert_path << " / " << key_path << " unreadable";
  bool match = cert && key && X509_check_private_key(cert, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (cf) fclose(cf);
  if (kf) fclose(kf);
  return match;
}

// PING over a fresh TLS connection: "PONG", or why not.
std::string TlsPing(int port, const TlsClientOptions& options, int timeout_ms = 2000) {
  TlsConnection c("127.0.0.1", port, options, timeout_ms);
  ReplyPtr r = c.Command({"PING"});
  return r ? wire::Render(r.get()) : c.error();
}

// PING over a fresh plain hiredis connection: "PONG", or why not.
std::string PlainPing(int port) {
  wire::ScopedNoSigpipe no_sigpipe;
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port, wire::Tv(2000)));
  if (!c || c->err) return std::string("CONNECT FAILED: ") + (c ? c->errstr : "no context");
  redisSetTimeout(c.get(), wire::Tv(2000));
  ReplyPtr r = wire::Command(c.get(), {"PING"});
  return r ? wire::Render(r.get()) : std::string("IO FAILED: ") + c->errstr;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TestCertificatesTest, MakesEveryFileInItsOwnDirAndRemovesIt) {
  std::string dir;
  {
    const auto start = std::chrono::steady_clock::now();
    TestCertificates certs;
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(certs.ok());
    printf("made the certificates in %lld ms\n",
           static_cast<long long>(std::chrono::duration_cast<milliseconds>(took).count()));
    dir = certs.dir();
    for (const std::string& path :
         {certs.ca_cert(), certs.ca_key(), certs.other_ca_cert(), certs.server_cert(),
          certs.server_key(), certs.wrong_host_cert(), certs.wrong_host_key(),
          certs.expired_cert(), certs.expired_key(), certs.client_cert(), certs.client_key(),
          certs.peer_cert(), certs.peer_key(), certs.mismatched_key()}) {
      EXPECT_EQ(path.rfind(dir + "/", 0), 0u) << path;
      EXPECT_EQ(path[0], '/') << path;
      struct stat st;
      EXPECT_TRUE(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) << path;
    }
    TestCertificates other;
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other.dir(), dir);
  }
  EXPECT_NE(access(dir.c_str(), F_OK), 0) << dir << " still exists";
}

TEST(TestCertificatesTest, IssuedCertificatesVerifyAgainstTheCaOnly) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  const std::string ca = certs.ca_cert();
  EXPECT_EQ(Verify({"-CAfile", ca, "-purpose", "sslserver", certs.server_cert()}), "OK");
  EXPECT_EQ(Verify({"-CAfile", ca, "-purpose", "sslserver", certs.wrong_host_cert()}), "OK");
  EXPECT_EQ(Verify({"-CAfile", ca, "-purpose", "sslclient", certs.client_cert()}), "OK");
  EXPECT_EQ(Verify({"-CAfile", ca, "-purpose", "sslserver", "-verify_ip", "127.0.0.1",
                    certs.peer_cert()}), "OK");
  EXPECT_EQ(Verify({"-CAfile", ca, "-purpose", "sslclient", certs.peer_cert()}), "OK");
  // Usages: the client certificate is no server's, nor the server's a client's.
  EXPECT_NE(Verify({"-CAfile", ca, "-purpose", "sslserver", certs.client_cert()}), "OK");
  EXPECT_NE(Verify({"-CAfile", ca, "-purpose", "sslclient", certs.server_cert()}), "OK");
  // The other CA vouches for none of them.
  for (const std::string& cert : {certs.server_cert(), certs.client_cert()}) {
    std::string v = Verify({"-CAfile", certs.other_ca_cert(), cert});
    EXPECT_TRUE(Contains(v, "unable to get local issuer certificate")) << v;
  }
  EXPECT_EQ(Verify({"-CAfile", certs.other_ca_cert(), certs.other_ca_cert()}), "OK");
}

TEST(TestCertificatesTest, ServerCertificatesNameTheirHosts) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  const std::string ca = certs.ca_cert();
  EXPECT_EQ(Verify({"-CAfile", ca, "-verify_ip", "127.0.0.1", certs.server_cert()}), "OK");
  EXPECT_EQ(Verify({"-CAfile", ca, "-verify_hostname", "localhost", certs.server_cert()}), "OK");
  std::string v = Verify({"-CAfile", ca, "-verify_ip", "127.0.0.1", certs.wrong_host_cert()});
  EXPECT_TRUE(Contains(v, "IP address mismatch")) << v;
  v = Verify({"-CAfile", ca, "-verify_hostname", "localhost", certs.wrong_host_cert()});
  EXPECT_TRUE(Contains(v, "hostname mismatch")) << v;
  EXPECT_EQ(Verify({"-CAfile", ca, "-verify_hostname", "wrong.example", certs.wrong_host_cert()}),
            "OK");
}

TEST(TestCertificatesTest, ExpiredCertificateIsExpiredAndOtherwiseGood) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  std::string v = Verify({"-CAfile", certs.ca_cert(), certs.expired_cert()});
  EXPECT_TRUE(Contains(v, "certificate has expired")) << v;
  // Only its dates are wrong: unless they are checked, it passes.
  EXPECT_EQ(Verify({"-CAfile", certs.ca_cert(), "-no_check_time", "-verify_ip",
                    "127.0.0.1", "-purpose", "sslserver", certs.expired_cert()}),
            "OK");
}

TEST(TestCertificatesTest, EachKeyMatchesItsCertificateButTheMismatchedOne) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  EXPECT_TRUE(KeyMatches(certs.ca_cert(), certs.ca_key()));
  EXPECT_TRUE(KeyMatches(certs.server_cert(), certs.server_key()));
  EXPECT_TRUE(KeyMatches(certs.wrong_host_cert(), certs.wrong_host_key()));
  EXPECT_TRUE(KeyMatches(certs.expired_cert(), certs.expired_key()));
  EXPECT_TRUE(KeyMatches(certs.client_cert(), certs.client_key()));
  EXPECT_TRUE(KeyMatches(certs.peer_cert(), certs.peer_key()));
  EXPECT_FALSE(KeyMatches(certs.client_cert(), certs.mismatched_key()));
  // A TLS client will not even offer that pair.
  std::string e = TlsConnection("127.0.0.1", 1,
                                {.cert_file = certs.client_cert(),
                                 .key_file = certs.mismatched_key()},
                                1000)
                      .error();
  EXPECT_TRUE(Contains(e, "CONNECT FAILED: client certificate")) << e;
}

TEST(TlsRedisServerTest, AnswersOverTlsOnly) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(RedisTls{.certs = &certs});
  ASSERT_TRUE(redis.running());
  EXPECT_TRUE(redis.tls());
  EXPECT_EQ(redis.url(), "rediss://127.0.0.1:" + std::to_string(redis.port()));
  EXPECT_EQ(redis.plain_port(), -1);
  EXPECT_EQ(redis.unix_socket(), "");
  EXPECT_EQ(redis.Cli({"PING"}), "PONG");
  EXPECT_EQ(redis.Cli({"SET", "k", "over tls"}), "OK");
  EXPECT_EQ(redis.Cli({"GET", "k"}), "over tls");
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "port"}), "port\n0");
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "tls-auth-clients"}), "tls-auth-clients\nno");
  // It presents server.crt: good for 127.0.0.1 and localhost under our CA, not another.
  EXPECT_EQ(TlsPing(redis.port(), {.ca_file = certs.ca_cert(), .verify_host = "127.0.0.1"}),
            "PONG");
  EXPECT_EQ(TlsPing(redis.port(), {.ca_file = certs.ca_cert(), .verify_host = "localhost"}),
            "PONG");
  // (redis-server sends ca.crt along with server.crt: it builds the chain from
  // --tls-ca-cert-file. So the client sees a self-signed CA it does not trust.)
  std::string e = TlsPing(redis.port(), {.ca_file = certs.other_ca_cert()});
  EXPECT_TRUE(Contains(e, "CONNECT FAILED: TLS handshake: ") &&
              Contains(e, "self-signed certificate in certificate chain"))
      << e;
  // A plain client is cut off (redis-server logs "wrong version number").
  e = PlainPing(redis.port());
  EXPECT_NE(e, "PONG");
  printf("plain client on the TLS port: %s\n", e.c_str());
}

TEST(TlsRedisServerTest, PresentsTheCertificateItWasGiven) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer wrong_host(RedisTls{.certs = &certs, .server_cert = RedisTls::Cert::kWrongHost});
  RedisServer expired(RedisTls{.certs = &certs, .server_cert = RedisTls::Cert::kExpired});
  ASSERT_TRUE(wrong_host.running());
  ASSERT_TRUE(expired.running());
  // Cli() checks no certificate, so the harness reaches both...
  EXPECT_EQ(wrong_host.Cli({"PING"}), "PONG");
  EXPECT_EQ(expired.Cli({"PING"}), "PONG");
  // ...but a client that verifies refuses each for its own reason.
  std::string e =
      TlsPing(wrong_host.port(), {.ca_file = certs.ca_cert(), .verify_host = "127.0.0.1"});
  EXPECT_TRUE(Contains(e, "IP address mismatch")) << e;
  e = TlsPing(wrong_host.port(), {.ca_file = certs.ca_cert(), .verify_host = "localhost"});
  EXPECT_TRUE(Contains(e, "hostname mismatch")) << e;
  EXPECT_EQ(TlsPing(wrong_host.port(), {.ca_file = certs.ca_cert(),
                                        .verify_host = "wrong.example"}),
            "PONG");
  e = TlsPing(expired.port(), {.ca_file = certs.ca_cert(), .verify_host = "127.0.0.1"});
  EXPECT_TRUE(Contains(e, "certificate has expired")) << e;
}

TEST(TlsRedisServerTest, RequiresAClientCertificateWhenAsked) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(RedisTls{.certs = &certs, .require_client_cert = true});
  ASSERT_TRUE(redis.running());
  EXPECT_EQ(redis.Cli({"PING"}), "PONG");  // Cli() presents client.crt
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "tls-auth-clients"}), "tls-auth-clients\nyes");
  const TlsClientOptions verified = {.ca_file = certs.ca_cert(), .verify_host = "127.0.0.1"};
  // TLS 1.3: the client's handshake ends before the server has seen the client's (missing)
  // certificate, so the refusal comes as an alert on the first read.
  std::string e = TlsPing(redis.port(), verified);
  EXPECT_NE(e, "PONG");
  printf("TLS client without a certificate, when one is required: %s\n", e.c_str());
  TlsClientOptions with_cert = verified;
  with_cert.cert_file = certs.client_cert();
  with_cert.key_file = certs.client_key();
  EXPECT_EQ(TlsPing(redis.port(), with_cert), "PONG");
  // A certificate for another purpose (server.crt is serverAuth only) is refused too.
  TlsClientOptions server_as_client = verified;
  server_as_client.cert_file = certs.server_cert();
  server_as_client.key_file = certs.server_key();
  e = TlsPing(redis.port(), server_as_client);
  EXPECT_NE(e, "PONG");
  printf("TLS client with a server certificate as its own: %s\n", e.c_str());
}

TEST(TlsRedisServerTest, PlainAndTlsPortsSideBySide) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(RedisTls{.certs = &certs, .plain_port_too = true});
  ASSERT_TRUE(redis.running());
  ASSERT_GT(redis.plain_port(), 0);
  EXPECT_NE(redis.plain_port(), redis.port());
  EXPECT_EQ(redis.url(), "rediss://127.0.0.1:" + std::to_string(redis.port()));
  EXPECT_EQ(PlainPing(redis.plain_port()), "PONG");
  EXPECT_EQ(TlsPing(redis.port(), {.ca_file = certs.ca_cert()}), "PONG");
  ASSERT_EQ(redis.Cli({"SET", "shared", "yes"}), "OK");
  {
    ContextPtr c(redisConnect("127.0.0.1", redis.plain_port()));
    ASSERT_TRUE(c && !c->err);
    ReplyPtr r = wire::Command(c.get(), {"GET", "shared"});
    ASSERT_TRUE(r);
    EXPECT_EQ(wire::Render(r.get()), "yes");
  }
  // The wrong way round: a plain client on the TLS port is cut off; a TLS client on the plain
  // port gets no answer at all (the server waits for the rest of an inline command), so its
  // handshake times out.
  EXPECT_NE(PlainPing(redis.port()), "PONG");
  const auto start = std::chrono::steady_clock::now();
  std::string e = TlsPing(redis.plain_port(), {.ca_file = certs.ca_cert()}, 300);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(e, "CONNECT FAILED: TLS handshake: timed out");
  printf("TLS client on the plain port: %s (after %lld ms)\n", e.c_str(),
         static_cast<long long>(std::chrono::duration_cast<milliseconds>(took).count()));
}

TEST(TlsRedisServerTest, RestartKeepsTls) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(
      RedisTls{.certs = &certs, .require_client_cert = true, .plain_port_too = true});
  ASSERT_TRUE(redis.running());
  const int port = redis.port(), plain_port = redis.plain_port();
  ASSERT_EQ(redis.Cli({"SET", "gone", "1"}), "OK");
  redis.Kill();
  EXPECT_TRUE(Contains(redis.Cli({"PING"}), "CONNECT FAILED: ")) << redis.Cli({"PING"});
  ASSERT_TRUE(redis.Restart());
  EXPECT_EQ(redis.port(), port);
  EXPECT_EQ(redis.plain_port(), plain_port);
  EXPECT_EQ(redis.Cli({"GET", "gone"}), "(nil)");
  EXPECT_EQ(PlainPing(plain_port), "PONG");
  EXPECT_NE(PlainPing(port), "PONG");
  EXPECT_NE(TlsPing(port, {.ca_file = certs.ca_cert()}), "PONG");  // still wants a certificate
  EXPECT_EQ(TlsPing(port, {.ca_file = certs.ca_cert(),
                           .cert_file = certs.client_cert(),
                           .key_file = certs.client_key()}),
            "PONG");
}

TEST(TlsRedisServerTest, RequirePassOverTls) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisServer redis(RedisTls{.certs = &certs}, {"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.running());
  EXPECT_EQ(redis.Cli({"SET", "k", "v"}), "OK");
  std::string e = TlsPing(redis.port(), {});
  EXPECT_TRUE(Contains(e, "NOAUTH")) << e;
}

}  // namespace
}  // namespace dlock_test
