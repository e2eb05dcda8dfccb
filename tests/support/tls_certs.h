// Throwaway certificates for the TLS tests, made with the `openssl` command line.
//
//   dlock_test::TestCertificates certs;             // makes them all, or ADD_FAILURE()s
//   ASSERT_TRUE(certs.ok());
//   dlock_test::RedisServer redis(dlock_test::RedisTls{.certs = &certs});  // redis_server.h
//   std::string url = redis.url() + "?ca=" + certs.ca_cert();  // "rediss://127.0.0.1:PORT?ca=..."
//   url += "&cert=" + certs.client_cert() + "&key=" + certs.client_key();
//
// Everything lives in a fresh temp dir, removed by the destructor. Keys are EC P-256 (a key is
// made in about 5 ms; RSA 2048 takes about 150 ms), so a whole set, 13 runs of openssl, takes
// about 0.1 s.
// Every certificate but the CAs is issued by ca_cert():
//   server_cert      DNS:localhost, IP:127.0.0.1; valid for 10 years
//   wrong_host_cert  DNS:wrong.example only: no good for 127.0.0.1 or localhost
//   expired_cert     DNS:localhost, IP:127.0.0.1; valid 2000-01-01 to 2000-01-02 only
//   client_cert      clientAuth, CN=dlock test client; mismatched_key() is not its key
//   peer_cert        serverAuth and clientAuth, DNS:localhost, IP:127.0.0.1: for a server that
//                    also dials with its own certificate (etcd's JSON gateway dials its own
//                    gRPC port with it, which --client-cert-auth checks as a client's)
// other_ca_cert() is an unrelated CA that issued none of them.
#ifndef DLOCK_TESTS_SUPPORT_TLS_CERTS_H_
#define DLOCK_TESTS_SUPPORT_TLS_CERTS_H_

#include <string>
#include <vector>

namespace dlock_test {

class TestCertificates {
 public:
  // Makes every file below with `openssl` (found on PATH, or $DLOCK_OPENSSL). On failure,
  // ADD_FAILURE() with the command and openssl's output, and ok() is false.
  TestCertificates();
  ~TestCertificates();  // removes the temp dir
  TestCertificates(const TestCertificates&) = delete;
  TestCertificates& operator=(const TestCertificates&) = delete;

  bool ok() const { return ok_; }
  std::string dir() const { return dir_; }

  // Absolute paths of PEM files.
  std::string ca_cert() const { return Path("ca.crt"); }
  std::string ca_key() const { return Path("ca.key"); }
  std::string other_ca_cert() const { return Path("other_ca.crt"); }
  std::string server_cert() const { return Path("server.crt"); }
  std::string server_key() const { return Path("server.key"); }
  std::string wrong_host_cert() const { return Path("wrong_host.crt"); }
  std::string wrong_host_key() const { return Path("wrong_host.key"); }
  std::string expired_cert() const { return Path("expired.crt"); }
  std::string expired_key() const { return Path("expired.key"); }
  std::string client_cert() const { return Path("client.crt"); }
  std::string client_key() const { return Path("client.key"); }
  std::string peer_cert() const { return Path("peer.crt"); }
  std::string peer_key() const { return Path("peer.key"); }
  std::string mismatched_key() const { return Path("mismatched.key"); }  // not client_cert's

 private:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // Runs openssl with args; false after ADD_FAILURE() when it fails.
  bool OpenSsl(const std::vector<std::string>& args);
  bool MakeCa(const std::string& name, const std::string& subject);
  // A key and a certificate `name`.key/.crt issued by ca.crt, with the extensions of the
  // config's section `extensions`; validity: {"-days", N} or {"-startdate", D, "-enddate", D}.
  bool Issue(const std::string& name, const std::string& subject, const std::string& extensions,
             const std::vector<std::string>& validity);

  std::string openssl_;
  std::string dir_;
  bool ok_ = false;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_TLS_CERTS_H_
