#include "redis/stream_connection.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "redis/reply.h"

namespace dlock::redis {

StreamConnection::StreamConnection(EventLoop* loop, const RedisConfig& config, Handler* handler)
    : loop_(loop), config_(config), handler_(handler), server_(config.Describe()) {}

StreamConnection::~StreamConnection() { Close(); }

bool StreamConnection::Open(std::string* why) {
  Close();
  addresses_.clear();
  next_address_ = 0;
  last_connect_error_.clear();
  if (!config_.socket_path.empty()) {
    Address a{};
    auto* un = reinterpret_cast<sockaddr_un*>(&a.addr);
    if (config_.socket_path.size() >= sizeof un->sun_path) {
      *why = "cannot connect to " + server_ + ": the socket path is too long";
      return false;
    }
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, config_.socket_path.data(), config_.socket_path.size());
    a.len = sizeof(sockaddr_un);
    addresses_.push_back(a);
  } else {
    // Blocking, as hiredis's own connect was: names are rare and /etc/hosts answers most.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(config_.port);
    int rc = getaddrinfo(config_.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
      *why = "cannot connect to " + server_ + ": " + gai_strerror(rc);
      return false;
    }
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
      Address a{};
      std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
      a.len = ai->ai_addrlen;
      addresses_.push_back(a);
    }
    freeaddrinfo(found);
  }
  connect_started_ = Now();
  if (ConnectNext()) return true;
  *why = "cannot connect to " + server_ + ": " +
         (last_connect_error_.empty() ? std::string("no address to try") : last_connect_error_);
  return false;
}

// Starts connecting to the next address; false when none is left. One deadline for them all.
bool StreamConnection::ConnectNext() {
  const TimePoint deadline = connect_started_ + Millis(config_.params.connect_timeout_ms);
  while (next_address_ < addresses_.size() && Now() < deadline) {
    const Address& a = addresses_[next_address_++];
    const int family = a.addr.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_connect_error_ = std::strerror(errno);
      continue;
    }
    if (family == AF_INET || family == AF_INET6) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    bufferevent* bev = nullptr;
    if (config_.tls_context != nullptr) {
      SSL* ssl = config_.tls_context->NewSsl(config_.host, &last_connect_error_);
      if (ssl != nullptr && !AttachSocket(ssl, fd)) {
        SSL_free(ssl);
        ssl = nullptr;
        last_connect_error_ = "cannot start TLS on the socket";
      }
      if (ssl != nullptr) {
        // BEV_OPT_CLOSE_ON_FREE frees the SSL and closes the socket with the bufferevent.
        bev = bufferevent_openssl_socket_new(loop_->base(), fd, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (bev == nullptr) SSL_free(ssl);
        // Redis closes without close_notify: an EOF, not an error.
        if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
      }
    } else {
      bev = bufferevent_socket_new(loop_->base(), fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (bev == nullptr) {
      close(fd);
      if (last_connect_error_.empty()) last_connect_error_ = "out of memory";
      continue;
    }
    bufferevent_setcb(bev, &StreamConnection::OnRead, nullptr, &StreamConnection::OnEvent, this);
    // A refused connect is reported later, through OnEvent; other failures right here.
    if (bufferevent_socket_connect(bev, reinterpret_cast<const sockaddr*>(&a.addr),
                                   static_cast<int>(a.len)) != 0 ||
        bufferevent_enable(bev, EV_READ) != 0) {
      last_connect_error_ = std::strerror(errno);
      bufferevent_free(bev);
      continue;
    }
    reader_ = redisReaderCreate();
    if (reader_ == nullptr) {
      bufferevent_free(bev);
      last_connect_error_ = "out of memory";
      return false;
    }
    GuardReader(reader_);
    bev_ = bev;
    connected_ = false;
    answered_ = false;
    ++generation_;
    return true;
  }
  return false;
}

bool StreamConnection::Write(const std::vector<std::string>& argv) {
  if (bev_ == nullptr) return false;
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* formatted = nullptr;
  int len = redisFormatCommandArgv(&formatted, static_cast<int>(ptrs.size()), ptrs.data(),
                                   lens.data());
  bool written = len > 0 && formatted != nullptr && Send(formatted, static_cast<size_t>(len));
  if (formatted != nullptr) redisFreeCommand(formatted);
  return written;
}

// A plain socket's commands are gathered and sent with one send() once the loop has run what
// is due this turn (event_active: no system call), so that a turn that writes many commands
// (replies that start new ones, a heartbeat round) still sends them together. The bufferevent
// alone would register for writability, wait a loop turn for it, write and unregister: two
// epoll_ctl and an epoll_wait more per turn (async_bench, 64 in flight: +7 %). What the kernel
// does not take, and every error, goes on through the bufferevent, which writes it when it can
// and reports failures as it always did.
bool StreamConnection::Send(const char* data, size_t len) {
  if (!connected_ || config_.tls_context != nullptr) return bufferevent_write(bev_, data, len) == 0;
  if (flush_ == nullptr) {
    flush_ = event_new(bufferevent_get_base(bev_), -1, 0, &StreamConnection::OnFlush, this);
    if (flush_ == nullptr) return bufferevent_write(bev_, data, len) == 0;
  }
  if (outgoing_.empty()) event_active(flush_, EV_WRITE, 0);
  try {
    outgoing_.append(data, len);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

void StreamConnection::OnFlush(int, short, void* arg) { static_cast<StreamConnection*>(arg)->Flush(); }

void StreamConnection::Flush() {
  if (bev_ == nullptr || outgoing_.empty()) return;
  const char* data = outgoing_.data();
  size_t len = outgoing_.size();
  if (evbuffer_get_length(bufferevent_get_output(bev_)) == 0) {  // else it goes after what waits
    const ssize_t n = send(bufferevent_getfd(bev_), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
    }
  }
  // Out of memory here would lose commands whose replies are awaited: the connection goes.
  const bool kept = len == 0 || bufferevent_write(bev_, data, len) == 0;
  // A turn that wrote a big round (a heartbeat of thousands of locks) gives its memory back;
  // a turn of a few commands keeps the buffer for the next.
  constexpr size_t kKeptCapacity = 64 * 1024;
  if (outgoing_.capacity() > kKeptCapacity) {
    std::string().swap(outgoing_);
  } else {
    outgoing_.clear();
  }
  if (!kept) Lost(Status(Code::kNoMemory, "out of memory writing to " + server_));
}

void StreamConnection::Close() {
  if (flush_ != nullptr) event_free(flush_);  // nothing of ours stays on the base
  flush_ = nullptr;
  outgoing_.clear();
  if (bev_ != nullptr) bufferevent_free(bev_);  // no callback runs after this
  bev_ = nullptr;
  if (reader_ != nullptr) redisReaderFree(reader_);
  reader_ = nullptr;
  connected_ = false;
}

void StreamConnection::Lost(const Status& why) {
  Close();
  handler_->OnStreamLost(why);
}

Status StreamConnection::DescribeFailure(short events) const {
  const int saved_errno = errno;
  const std::string context = connected_ ? server_ + ": " : "cannot connect to " + server_ + ": ";
  std::string otherwise;
  if ((events & BEV_EVENT_EOF) != 0) {
    otherwise = "the server closed the connection";
    // A plain client at a TLS port: the server drops what is not a TLS handshake.
    if (!answered_ && config_.tls_context == nullptr) {
      otherwise += " (before any reply: if that port expects TLS, use rediss:// or tls=1)";
    }
  } else {
    otherwise = saved_errno != 0 ? std::strerror(saved_errno) : "connection error";
  }
  if (config_.tls_context == nullptr) return Status::IoError(context + otherwise);
  unsigned long code = 0;
  while (unsigned long e = bufferevent_get_openssl_error(bev_)) code = e;
  return TlsFailureFromCode(bufferevent_openssl_get_ssl(bev_), code, otherwise, context);
}

void StreamConnection::OnEvent(bufferevent*, short events, void* arg) {
  auto* self = static_cast<StreamConnection*>(arg);
  if ((events & BEV_EVENT_CONNECTED) != 0) {
    self->connected_ = true;
    self->handler_->OnStreamConnected();
    return;
  }
  if ((events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) == 0) return;
  const Status why = self->DescribeFailure(events);
  if (!self->connected_) {  // this address failed: the next one, within the same deadline
    self->Close();
    self->last_connect_error_ = why.message();
    if (self->ConnectNext()) return;
  }
  self->Lost(why);
}

void StreamConnection::OnRead(bufferevent*, void* arg) {
  static_cast<StreamConnection*>(arg)->ReadReplies();
}

void StreamConnection::ReadReplies() {
  const uint64_t generation = generation_;
  evbuffer* input = bufferevent_get_input(bev_);
  char buf[16384];
  while (generation_ == generation && bev_ != nullptr) {
    int n = evbuffer_remove(input, buf, sizeof buf);
    if (n <= 0) return;
    if (FeedReader(reader_, buf, static_cast<size_t>(n)) != REDIS_OK) {
      if (reader_->err == REDIS_ERR_OOM) {
        return Lost(Status(Code::kNoMemory, "out of memory reading from " + server_));
      }
      return Lost(NotRedisProtocol(server_, reader_, false));  // over a limit (reply.h)
    }
    while (generation_ == generation && bev_ != nullptr) {
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
}

}  // namespace dlock::redis
