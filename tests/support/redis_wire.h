// Plain hiredis helpers the test harnesses share to talk to the servers they start (not the
// library's own I/O): one command, its reply as text, and no SIGPIPE from a server that died;
// and, as hiredis 0.14 has no TLS, a small blocking TLS client (OpenSSL) for TLS servers.
#ifndef DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_
#define DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/time.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock_test {
class TestCertificates;
}

namespace dlock_test::wire {

// Blocks SIGPIPE on this thread for the scope, and swallows one raised meanwhile: hiredis 0.14
// writes with write(2), and a server that dies mid-command must not kill the test process.
class ScopedNoSigpipe {
 public:
  ScopedNoSigpipe();
  ~ScopedNoSigpipe();
  ScopedNoSigpipe(const ScopedNoSigpipe&) = delete;
  ScopedNoSigpipe& operator=(const ScopedNoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval Tv(int ms);
// One command; null when the connection failed (c->errstr says why).
ReplyPtr Command(redisContext* c, const std::vector<std::string>& args);
// status/string -> its text, integer -> decimal, nil -> "(nil)", error -> "ERR: <message>",
// array -> elements rendered the same way and joined by "\n".
std::string Render(const redisReply* r);

// How a TlsConnection connects. (The `= {}`s let designated initializers leave fields out
// without GCC 12's -Wmissing-field-initializers.)
struct TlsClientOptions {
  // Verify the server's certificate chain against this CA file; "" = accept any certificate
  // (the harness talks to servers it started itself, whatever certificate they were given).
  std::string ca_file = {};
  // With ca_file: the host name or IP address the certificate must be for; "" = not checked.
  std::string verify_host = {};
  // A client certificate and its key, for a server that asks for one; "" = none.
  std::string cert_file = {};
  std::string key_file = {};
};

// A blocking TLS connection to a redis-server, for the harness and the tests of it. Replies
// are parsed by hiredis's reader, so Render() shows them as it shows plain ones.
//
//   TlsConnection c("127.0.0.1", port, {.ca_file = certs.ca_cert()}, 2000);
//   if (!c.connected()) ... c.error() ...            // "CONNECT FAILED: <OpenSSL's reason>"
//   ReplyPtr r = c.Command({"PING"});                // null: c.error() is "IO FAILED: ..."
//
// Callers need no ScopedNoSigpipe: it holds one around every write.
class TlsConnection {
 public:
  // Connects to ip:port (numeric IPv4) and completes the handshake; the TCP connect, and then
  // every read and write, may take up to timeout_ms.
  TlsConnection(const std::string& ip, int port, const TlsClientOptions& options,
                int timeout_ms);
  ~TlsConnection();
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  bool connected() const { return connected_; }
  // Why the connection or the last command failed; "" when nothing failed.
  const std::string& error() const { return error_; }
  // One command; null when it could not be sent or its reply not read (error() says why).
  ReplyPtr Command(const std::vector<std::string>& args);

 private:
  void Fail(const std::string& prefix, const std::string& what, int ssl_error = SSL_ERROR_SSL);

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  redisReader* reader_ = nullptr;
  bool connected_ = false;
  std::string error_;
};

// How the harness meets a TLS server (or sentinel) that it started itself with certs: any
// server certificate will do (the wrong-host and expired ones too: it is our own server, as its
// pid shows), and certs->client_cert() for a server that wants one. None (plain TCP) when certs
// is null: a server without TLS.
std::optional<TlsClientOptions> HarnessTls(const TestCertificates* certs);

// One connection to a server on 127.0.0.1 that the harness started, AUTHenticated when password
// is set: hiredis over TCP (or the unix socket when unix_path is set), or a TlsConnection when
// tls is given. On failure ok() is false and error() says why ("CONNECT FAILED: ...",
// "IO FAILED: ...", or the AUTH error, rendered as Render() does).
//
//   Connection c(port, "", HarnessTls(&certs), "", 1000, 2000);
//   ReplyPtr r = c.ok() ? c.Command({"PING"}) : nullptr;   // null: c.error() says why
class Connection {
 public:
  Connection(int port, const std::string& unix_path, const std::optional<TlsClientOptions>& tls,
             const std::string& password, int connect_timeout_ms, int io_timeout_ms);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // One command; null when it failed (error() says why).
  ReplyPtr Command(const std::vector<std::string>& args);

 private:
  ScopedNoSigpipe no_sigpipe_;  // hiredis writes with write(2)
  ContextPtr plain_;
  std::unique_ptr<TlsConnection> tls_;
  std::string error_;
};

}  // namespace dlock_test::wire

#endif  // DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_
