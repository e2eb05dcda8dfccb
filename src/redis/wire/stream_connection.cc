#include "redis/wire/stream_connection.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <new>

#include "redis/wire/reply.h"
#include "redis/wire/resp.h"

namespace dlock::redis {

StreamConnection::StreamConnection(EventLoop* loop, const RedisConfig& config, Handler* handler)
    : config_(config), handler_(handler), server_(config.Describe()), stream_(loop, this) {}

StreamConnection::~StreamConnection() { Close(); }

// The server's addresses: its unix socket, or what its host name resolves to.
bool StreamConnection::Addresses(std::vector<StreamAddress>* out, std::string* why) const {
  if (!config_.socket_path.empty()) {
    StreamAddress a{};
    auto* un = reinterpret_cast<sockaddr_un*>(&a.addr);
    if (config_.socket_path.size() >= sizeof un->sun_path) {
      *why = "the socket path is too long";
      return false;
    }
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, config_.socket_path.data(), config_.socket_path.size());
    a.len = sizeof(sockaddr_un);
    out->push_back(a);
    return true;
  }
  // Blocking, as hiredis's own connect was: names are rare and /etc/hosts answers most.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(config_.port);
  int rc = getaddrinfo(config_.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    *why = gai_strerror(rc);
    return false;
  }
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    StreamAddress a{};
    std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    out->push_back(a);
  }
  freeaddrinfo(found);
  return true;
}

bool StreamConnection::Open(std::string* why) {
  Close();
  std::vector<StreamAddress> addresses;
  std::string cause;
  Stream::NewTls tls;
  if (config_.tls_context != nullptr) {
    tls = [context = config_.tls_context, host = config_.host](int fd, std::string* failed) {
      SSL* ssl = context->NewSsl(host, failed);
      if (ssl != nullptr && !AttachSocket(ssl, fd)) {
        SSL_free(ssl);
        *failed = "cannot start TLS on the socket";
        return static_cast<SSL*>(nullptr);
      }
      return ssl;
    };
  }
  reader_ = redisReaderCreate();
  if (reader_ == nullptr) {
    *why = "cannot connect to " + server_ + ": out of memory";
    return false;
  }
  GuardReader(reader_);
  answered_ = false;
  if (!Addresses(&addresses, &cause) ||
      !stream_.Connect(std::move(addresses), Now() + Millis(config_.params.connect_timeout_ms),
                       std::move(tls), &cause)) {
    Close();
    *why = "cannot connect to " + server_ + ": " + cause;
    return false;
  }
  return true;
}

bool StreamConnection::Write(const std::vector<std::string>& argv) {
  if (!stream_.open()) return false;
  try {
    scratch_.clear();
    resp::AppendCommand(&scratch_, argv);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return stream_.Write(scratch_.data(), scratch_.size());
}

bool StreamConnection::WriteFormatted(std::string_view command) {
  return stream_.open() && stream_.Write(command.data(), command.size());
}

void StreamConnection::OnStreamConnected() {
  counted_ = CountedConnection(config_.connections);
  handler_->OnStreamConnected();
}

void StreamConnection::Close() {
  counted_.Reset();
  stream_.Close();
  if (reader_ != nullptr) redisReaderFree(reader_);
  reader_ = nullptr;
}

void StreamConnection::Lost(const Status& why) {
  Close();
  handler_->OnStreamLost(why);
}

Status StreamConnection::Describe(const StreamFailure& failure) const {
  if (failure.out_of_memory) return Status(Code::kNoMemory, "out of memory writing to " + server_);
  const std::string context =
      failure.was_connected ? server_ + ": " : "cannot connect to " + server_ + ": ";
  std::string otherwise;
  if (failure.eof) {
    otherwise = "the server closed the connection";
    // A plain client at a TLS port: the server drops what is not a TLS handshake.
    if (!answered_ && config_.tls_context == nullptr) {
      otherwise += " (before any reply: if that port expects TLS, use rediss:// or tls=1)";
    }
  } else {
    otherwise = failure.error_number != 0 ? std::strerror(failure.error_number) : "connection error";
  }
  if (config_.tls_context == nullptr) return Status::IoError(context + otherwise);
  return TlsFailureFromCode(failure.tls_verify_result, failure.tls_error, otherwise, context);
}

void StreamConnection::OnStreamFailed(const StreamFailure& failure, bool trying_next) {
  if (trying_next) return;  // the next address answers for itself
  Lost(Describe(failure));
}

void StreamConnection::OnStreamData(const char* data, size_t len) {
  const uint64_t generation = stream_.generation();
  if (FeedReader(reader_, data, len) != REDIS_OK) {
    if (reader_->err == REDIS_ERR_OOM) {
      return Lost(Status(Code::kNoMemory, "out of memory reading from " + server_));
    }
    return Lost(NotRedisProtocol(server_, reader_, false));  // over a limit (reply.h)
  }
  while (stream_.generation() == generation && stream_.open()) {
    void* r = nullptr;
    if (TakeReply(reader_, &r) != REDIS_OK) {
      // Bytes that are not RESP: nothing more can be trusted.
      return Lost(NotRedisProtocol(server_, reader_, !answered_ && config_.tls_context == nullptr));
    }
    if (r == nullptr) break;
    answered_ = true;
    ReplyPtr reply(static_cast<redisReply*>(r));
    handler_->OnStreamReply(reply.get());
  }
}

}  // namespace dlock::redis
