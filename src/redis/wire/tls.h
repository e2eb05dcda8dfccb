// TLS to Redis (rediss://, tls=1): the settings from the URL, and the client's OpenSSL context
// made from them once at open. Debian's hiredis (0.14) has no TLS, so the connections do their
// own I/O over OpenSSL: the blocking ones with SSL_read/SSL_write on their socket, the ones on
// the loop through loop/stream.h.
#ifndef DLOCK_REDIS_WIRE_TLS_H_
#define DLOCK_REDIS_WIRE_TLS_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "core/status.h"
#include "core/url.h"

namespace dlock::redis {

// The URL's settings are TlsParams (core/url.h); tls_verify=0 means anyone on the path can
// read and change the traffic.

class TlsContext {
 public:
  // Reads the files now: a missing or unreadable file, a file that holds no certificate or
  // key, or a key that does not match its certificate is DLOCK_EINVAL naming the file.
  static Status Create(const TlsParams& params, std::shared_ptr<const TlsContext>* out);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A new SSL (client mode) for a connection to host: SNI is sni= or else host when it is a
  // name; when verifying, the certificate must be valid for sni= or else host (a DNS name or
  // an IP address). Null, with *why set, when OpenSSL cannot make one.
  SSL* NewSsl(const std::string& host, std::string* why) const;

 private:
  TlsContext(SSL_CTX* ctx, TlsParams params) : ctx_(ctx), params_(std::move(params)) {}
  SSL_CTX* ctx_;
  TlsParams params_;
};

// Why a TLS handshake, read or write on ssl failed (ret and SSL_get_error's err), in words a
// user can act on, after `context` ("cannot connect to redis H:P: "): the certificate not
// trusted, expired, or for another host, or the client's refused (DLOCK_EAUTH); a server that
// does not speak TLS, or closed the connection (DLOCK_EIO). Clears OpenSSL's error queue.
Status TlsFailure(const SSL* ssl, int ret, int err, const std::string& context);

// The same for a connection on the loop (loop/stream.h's StreamFailure): verify_result is
// SSL_get_verify_result's (X509_V_OK for none), code OpenSSL's last error on it, 0 for none;
// with no certificate failure either, the words are `otherwise`.
Status TlsFailureFromCode(long verify_result, unsigned long code, const std::string& otherwise,
                          const std::string& context);

// Makes ssl read and write socket fd (which it does not close), never raising SIGPIPE.
bool AttachSocket(SSL* ssl, int fd);

// Empties this thread's OpenSSL error queue (before an SSL call whose errors are read after).
void ClearTlsErrors();

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_TLS_H_
