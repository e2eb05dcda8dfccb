#include "redis/wire/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dlock::redis {
namespace {

std::string LastOpenSslError() {
  unsigned long e = ERR_peek_last_error();
  std::string out = e == 0 ? "no detail" : ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "no detail";
  ERR_clear_error();
  return out;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string VerifyFailure(long result) {
  const std::string detail = X509_verify_cert_error_string(result);
  switch (result) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "host name mismatch: the server's certificate is not valid for the host it was "
             "reached as (sni= names another host to check)";
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "the server's certificate has expired";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "the server's certificate is not valid yet (is this machine's clock right?)";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return "the server's certificate is not trusted (" + detail +
             "; ca= names the CA that signed it)";
    default:
      return "the server's certificate was refused: " + detail;
  }
}

// OpenSSL's socket BIO, writing with MSG_NOSIGNAL: its own write() raises SIGPIPE on a
// connection the server closed, killing a process that did not ignore it (a library must not
// ask it to).
int SendNoSignal(BIO* bio, const char* data, int len) {
  int fd = -1;
  BIO_get_fd(bio, &fd);
  errno = 0;
  const int n = static_cast<int>(send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL));
  BIO_clear_retry_flags(bio);
  if (n <= 0 && BIO_sock_should_retry(n)) BIO_set_retry_write(bio);
  return n;
}

const BIO_METHOD* SocketWithoutSigpipe() {
  static const BIO_METHOD* method = []() -> const BIO_METHOD* {
    const BIO_METHOD* socket = BIO_s_socket();
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "socket without SIGPIPE");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, SendNoSignal);
    BIO_meth_set_read(m, BIO_meth_get_read(socket));
    BIO_meth_set_puts(m, BIO_meth_get_puts(socket));
    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(socket));
    BIO_meth_set_create(m, BIO_meth_get_create(socket));
    BIO_meth_set_destroy(m, BIO_meth_get_destroy(socket));
    return m;
  }();
  return method;
}

}  // namespace

bool AttachSocket(SSL* ssl, int fd) {
  const BIO_METHOD* method = SocketWithoutSigpipe();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) return false;
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
  return true;
}

Status TlsContext::Create(const TlsParams& params, std::shared_ptr<const TlsContext>* out) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return Status(Code::kNoMemory, "cannot make a TLS context: " + LastOpenSslError());
  std::shared_ptr<const TlsContext> made(new TlsContext(ctx, params));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // An encrypted key file must fail, not prompt on the terminal of whatever process this is.
  SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
  SSL_CTX_set_verify(ctx, params.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (!params.ca.empty()) {
    Status s = CheckReadableFile("ca", params.ca);
    if (!s.ok()) return s;
    if (SSL_CTX_load_verify_locations(ctx, params.ca.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("URL parameter ca=" + params.ca +
                                     ": no PEM certificate could be read from it (" +
                                     LastOpenSslError() + ")");
    }
  } else if (params.verify && SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return Status::InvalidArgument("cannot load the system's trusted CAs (" + LastOpenSslError() +
                                   "): name a CA file with ca=");
  }
  if (!params.cert.empty()) {
    Status s = CheckReadableFile("cert", params.cert);
    if (s.ok()) s = CheckReadableFile("key", params.key);
    if (!s.ok()) return s;
    if (SSL_CTX_use_certificate_chain_file(ctx, params.cert.c_str()) != 1) {
      return Status::InvalidArgument("URL parameter cert=" + params.cert +
                                     ": no PEM certificate could be read from it (" +
                                     LastOpenSslError() + ")");
    }
    // OpenSSL checks the key against the certificate already while loading it.
    ERR_clear_error();
    const bool loaded = SSL_CTX_use_PrivateKey_file(ctx, params.key.c_str(), SSL_FILETYPE_PEM) == 1;
    const bool mismatch =
        loaded ? SSL_CTX_check_private_key(ctx) != 1
               : ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
    if (mismatch) {
      ERR_clear_error();
      return Status::InvalidArgument("URL parameter key=" + params.key +
                                     " does not match the certificate in cert=" + params.cert);
    }
    if (!loaded) {
      return Status::InvalidArgument("URL parameter key=" + params.key +
                                     ": no unencrypted PEM private key could be read from it (" +
                                     LastOpenSslError() + ")");
    }
  }
  *out = std::move(made);
  return Status::Ok();
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

SSL* TlsContext::NewSsl(const std::string& host, std::string* why) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) {
    *why = "cannot start TLS: " + LastOpenSslError();
    return nullptr;
  }
  const std::string& name = params_.sni.empty() ? host : params_.sni;
  const bool ip = IsIpAddress(name);
  bool ok = ip || name.empty() || SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  if (ok && params_.verify && !name.empty()) {
    X509_VERIFY_PARAM* check = SSL_get0_param(ssl);
    if (ip) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(check, name.c_str()) == 1;
    } else {
      X509_VERIFY_PARAM_set_hostflags(check, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = X509_VERIFY_PARAM_set1_host(check, name.c_str(), name.size()) == 1;
    }
  }
  if (!ok) {
    SSL_free(ssl);
    *why = "cannot check the server's certificate against '" + name + "': " + LastOpenSslError();
    return nullptr;
  }
  return ssl;
}

Status TlsFailureFromCode(long verify_result, unsigned long code, const std::string& otherwise,
                          const std::string& context) {
  std::string out;
  bool refused = false;  // a certificate refused, one way or the other: DLOCK_EAUTH
  if (verify_result != X509_V_OK) {
    out = VerifyFailure(verify_result);
    refused = true;
  } else if (code == 0) {
    out = otherwise;
  } else {
    const char* reason = ERR_reason_error_string(code);
    switch (ERR_GET_REASON(code)) {
      case SSL_R_WRONG_VERSION_NUMBER:
      case SSL_R_PACKET_LENGTH_TOO_LONG:
        out = "the server did not answer in TLS (a plain Redis port? then no rediss:// nor tls=1)";
        break;
      case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
        out = "the server requires a client certificate (cert= and key=)";
        refused = true;
        break;
      case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        out = "the server refused the handshake (does it require a client certificate? cert= and "
              "key=)";
        refused = true;
        break;
      case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
      case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        out = std::string("the server refused the client certificate (") + reason + ")";
        refused = true;
        break;
      case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        out = "the server closed the connection during TLS (does it require a client "
              "certificate? cert= and key=)";
        break;
      default:
        out = std::string("TLS failed: ") + (reason != nullptr ? reason : "no detail");
    }
  }
  ERR_clear_error();
  return refused ? Status::AuthError(context + out) : Status::IoError(context + out);
}

Status TlsFailure(const SSL* ssl, int ret, int err, const std::string& context) {
  const int saved_errno = errno;
  std::string otherwise = "TLS failed (no detail from OpenSSL)";
  if (err == SSL_ERROR_ZERO_RETURN) {
    otherwise = "the server closed the TLS connection";
  } else if (err == SSL_ERROR_SYSCALL) {
    otherwise = ret == 0 || saved_errno == 0 ? "the server closed the connection"
                                             : std::string(std::strerror(saved_errno));
  }
  const long verify_result = ssl != nullptr ? SSL_get_verify_result(ssl) : X509_V_OK;
  return TlsFailureFromCode(verify_result, ERR_peek_last_error(), otherwise, context);
}

void ClearTlsErrors() { ERR_clear_error(); }

}  // namespace dlock::redis
