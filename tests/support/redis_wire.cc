#include "support/redis_wire.h"
#include "support/tls_certs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

namespace dlock_test::wire {

ScopedNoSigpipe::ScopedNoSigpipe() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

ScopedNoSigpipe::~ScopedNoSigpipe() {
  if (!was_pending_) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

timeval Tv(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

namespace {

// args as hiredis's binary-safe argv and argvlen arrays (pointing into args).
struct Argv {
  explicit Argv(const std::vector<std::string>& args) {
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
  }
  int argc() const { return static_cast<int>(argv.size()); }

  std::vector<const char*> argv;
  std::vector<size_t> lens;
};

}  // namespace

ReplyPtr Command(redisContext* c, const std::vector<std::string>& args) {
  Argv a(args);
  return ReplyPtr(
      static_cast<redisReply*>(redisCommandArgv(c, a.argc(), a.argv.data(), a.lens.data())));
}

std::string Render(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ERROR:
      return "ERR: " + std::string(r->str, r->len);
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) {
        if (i) out += '\n';
        out += Render(r->element[i]);
      }
      return out;
    }
    default:
      return "(reply type " + std::to_string(r->type) + ")";
  }
}

namespace {

// A TCP connection to ip:port within timeout_ms, left blocking with timeout_ms on every read and
// write; -1 and *why on failure.
int ConnectTcp(const std::string& ip, int port, int timeout_ms, std::string* why) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    *why = "not an IPv4 address: " + ip;
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + strerror(errno);
    return -1;
  }
  int err = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      if (poll(&p, 1, timeout_ms) != 1) {
        err = ETIMEDOUT;
      } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
  }
  timeval tv = Tv(timeout_ms);
  if (err == 0 && (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
                   setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
                   setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)) {
    err = errno;
  }
  if (err != 0) {
    *why = strerror(err);
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TlsConnection::TlsConnection(const std::string& ip, int port, const TlsClientOptions& options,
                             int timeout_ms) {
  ScopedNoSigpipe no_sigpipe;
  ERR_clear_error();
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (!ctx_) {
    Fail("CONNECT FAILED: ", "SSL_CTX_new");
    return;
  }
  if (!options.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx_, options.ca_file.c_str(), nullptr) != 1) {
      Fail("CONNECT FAILED: ", "loading CA file " + options.ca_file);
      return;
    }
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  }
  if (!options.cert_file.empty() &&
      (SSL_CTX_use_certificate_chain_file(ctx_, options.cert_file.c_str()) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx_, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
       SSL_CTX_check_private_key(ctx_) != 1)) {
    Fail("CONNECT FAILED: ", "client certificate " + options.cert_file + " with key " +
                                 options.key_file);
    return;
  }
  ssl_ = SSL_new(ctx_);
  if (!ssl_) {
    Fail("CONNECT FAILED: ", "SSL_new");
    return;
  }
  if (!options.ca_file.empty() && !options.verify_host.empty()) {
    in_addr unused;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    int set = inet_pton(AF_INET, options.verify_host.c_str(), &unused) == 1
                  ? X509_VERIFY_PARAM_set1_ip_asc(param, options.verify_host.c_str())
                  : X509_VERIFY_PARAM_set1_host(param, options.verify_host.c_str(), 0);
    if (set != 1) {
      Fail("CONNECT FAILED: ", "setting the name to verify, " + options.verify_host);
      return;
    }
  }
  std::string why;
  fd_ = ConnectTcp(ip, port, timeout_ms, &why);
  if (fd_ < 0) {
    error_ = "CONNECT FAILED: " + ip + ":" + std::to_string(port) + ": " + why;
    return;
  }
  SSL_set_fd(ssl_, fd_);
  errno = 0;
  if (int ret = SSL_connect(ssl_); ret != 1) {
    Fail("CONNECT FAILED: ", "TLS handshake", SSL_get_error(ssl_, ret));
    return;
  }
  reader_ = redisReaderCreate();
  connected_ = reader_ != nullptr;
  if (!connected_) error_ = "CONNECT FAILED: cannot allocate a hiredis reader";
}

TlsConnection::~TlsConnection() {
  if (reader_) redisReaderFree(reader_);
  if (ssl_) SSL_free(ssl_);  // no close_notify: like a client that just goes away
  if (ctx_) SSL_CTX_free(ctx_);
  if (fd_ >= 0) close(fd_);
}

// Sets error_ to prefix + what + OpenSSL's reasons: its error queue, the certificate check's
// result, or (ssl_error being SSL_get_error() of a failed read, write or handshake) errno.
void TlsConnection::Fail(const std::string& prefix, const std::string& what, int ssl_error) {
  const int saved_errno = errno;
  std::string reasons;
  char buf[256];
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    ERR_error_string_n(e, buf, sizeof buf);
    reasons += (reasons.empty() ? "" : "; ") + std::string(buf);
  }
  if (ssl_ && fd_ >= 0) {
    if (long v = SSL_get_verify_result(ssl_); v != X509_V_OK) {
      reasons += std::string(reasons.empty() ? "" : "; ") + "certificate: " +
                 X509_verify_cert_error_string(v);
    }
  }
  if (reasons.empty()) {
    if (ssl_error == SSL_ERROR_ZERO_RETURN) {
      reasons = "the server closed the TLS session";
    } else if (ssl_error == SSL_ERROR_WANT_READ || ssl_error == SSL_ERROR_WANT_WRITE ||
               saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) {
      reasons = "timed out";  // SO_RCVTIMEO/SO_SNDTIMEO ran out (OpenSSL takes it as "retry")
    } else if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0) {
      reasons = strerror(saved_errno);
    } else {
      reasons = "the server closed the connection";
    }
  }
  error_ = prefix + what + ": " + reasons;
  connected_ = false;
}

ReplyPtr TlsConnection::Command(const std::vector<std::string>& args) {
  if (!connected_) {
    if (error_.empty()) error_ = "IO FAILED: not connected";
    return nullptr;
  }
  ScopedNoSigpipe no_sigpipe;
  Argv a(args);
  char* cmd = nullptr;
  int len = redisFormatCommandArgv(&cmd, a.argc(), a.argv.data(), a.lens.data());
  if (len < 0) {
    error_ = "IO FAILED: cannot format the command";
    return nullptr;
  }
  ERR_clear_error();
  errno = 0;
  int ret = SSL_write(ssl_, cmd, len);
  if (ret != len) Fail("IO FAILED: ", "write", SSL_get_error(ssl_, ret));  // before free: errno
  redisFreeCommand(cmd);
  if (!connected_) return nullptr;
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
      error_ = std::string("IO FAILED: protocol error: ") + reader_->errstr;
      connected_ = false;
      return nullptr;
    }
    if (reply) return ReplyPtr(static_cast<redisReply*>(reply));
    char buf[16384];
    errno = 0;
    ret = SSL_read(ssl_, buf, sizeof buf);
    if (ret <= 0) {
      Fail("IO FAILED: ", "read", SSL_get_error(ssl_, ret));
      return nullptr;
    }
    redisReaderFeed(reader_, buf, static_cast<size_t>(ret));
  }
}

std::optional<TlsClientOptions> HarnessTls(const TestCertificates* certs) {
  if (certs == nullptr) return std::nullopt;
  return TlsClientOptions{.cert_file = certs->client_cert(), .key_file = certs->client_key()};
}

Connection::Connection(int port, const std::string& unix_path,
                       const std::optional<TlsClientOptions>& tls, const std::string& password,
                       int connect_timeout_ms, int io_timeout_ms) {
  if (tls) {
    // One timeout for all: the TCP connect is quick on loopback, the handshake is I/O.
    tls_ = std::make_unique<TlsConnection>("127.0.0.1", port, *tls, io_timeout_ms);
    if (!tls_->connected()) {
      error_ = tls_->error();
      return;
    }
  } else {
    plain_.reset(unix_path.empty()
                     ? redisConnectWithTimeout("127.0.0.1", port, Tv(connect_timeout_ms))
                     : redisConnectUnixWithTimeout(unix_path.c_str(), Tv(connect_timeout_ms)));
    if (!plain_) {
      error_ = "CONNECT FAILED: cannot allocate a hiredis context";
      return;
    }
    if (plain_->err) {
      error_ = std::string("CONNECT FAILED: ") + plain_->errstr;
      return;
    }
    redisSetTimeout(plain_.get(), Tv(io_timeout_ms));
  }
  if (!password.empty()) {
    ReplyPtr r = Command({"AUTH", password});
    if (r && r->type == REDIS_REPLY_ERROR) error_ = Render(r.get());
  }
}

ReplyPtr Connection::Command(const std::vector<std::string>& args) {
  if (!tls_ && !plain_) {
    if (error_.empty()) error_ = "IO FAILED: not connected";
    return nullptr;
  }
  ReplyPtr r = tls_ ? tls_->Command(args) : wire::Command(plain_.get(), args);
  if (!r) error_ = tls_ ? tls_->error() : std::string("IO FAILED: ") + plain_->errstr;
  return r;
}

}  // namespace dlock_test::wire
