#include "loop/stream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace dlock {

bool Stream::Connect(std::vector<StreamAddress> addresses, TimePoint deadline, NewTls tls,
                     std::string* why) {
  Close();
  addresses_ = std::move(addresses);
  next_address_ = 0;
  deadline_ = deadline;
  tls_ = std::move(tls);
  why->clear();
  if (ConnectNext(why)) return true;
  if (why->empty()) *why = "no address to try";
  return false;
}

// Starts connecting to the next address; false (*why: the last address's failure) when none
// is left, or the deadline has passed.
bool Stream::ConnectNext(std::string* why) {
  while (next_address_ < addresses_.size() && Now() < deadline_) {
    const StreamAddress& a = addresses_[next_address_++];
    const int family = a.addr.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *why = std::strerror(errno);
      continue;
    }
    if (family == AF_INET || family == AF_INET6) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    bufferevent* bev = nullptr;
    if (tls_) {
      SSL* ssl = tls_(fd, why);
      if (ssl != nullptr) {
        // BEV_OPT_CLOSE_ON_FREE frees the SSL and closes the socket with the bufferevent.
        bev = bufferevent_openssl_socket_new(loop_->base(), fd, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (bev == nullptr) SSL_free(ssl);
        // Servers that close without close_notify (Redis does): an EOF, not an error.
        if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
      }
    } else {
      bev = bufferevent_socket_new(loop_->base(), fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (bev == nullptr) {
      close(fd);
      if (why->empty()) *why = "out of memory";
      continue;
    }
    bufferevent_setcb(bev, &Stream::OnRead, nullptr, &Stream::OnEvent, this);
    // A refused connect is reported later, through OnEvent; other failures right here.
    if (bufferevent_socket_connect(bev, reinterpret_cast<const sockaddr*>(&a.addr),
                                   static_cast<int>(a.len)) != 0 ||
        bufferevent_enable(bev, EV_READ) != 0) {
      *why = std::strerror(errno);
      bufferevent_free(bev);
      continue;
    }
    bev_ = bev;
    connected_ = false;
    ++generation_;
    return true;
  }
  return false;
}

// A plain socket's bytes are gathered and sent with one send() once the loop has run what is
// due this turn (event_active: no system call), so that a turn that writes many commands
// (replies that start new ones, a heartbeat round) still sends them together. The bufferevent
// alone would register for writability, wait a loop turn for it, write and unregister: two
// epoll_ctl and an epoll_wait more per turn (async_bench, 64 in flight: +7 %). What the kernel
// does not take, and every error, goes on through the bufferevent, which writes it when it can
// and reports failures as it always did.
bool Stream::Write(const char* data, size_t len) {
  if (bev_ == nullptr) return false;
  if (!connected_ || tls_) return bufferevent_write(bev_, data, len) == 0;
  if (flush_ == nullptr) {
    flush_ = event_new(loop_->base(), -1, 0, &Stream::OnFlush, this);
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

void Stream::OnFlush(int, short, void* arg) { static_cast<Stream*>(arg)->Flush(); }

void Stream::Flush() {
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
  // Out of memory here would lose bytes whose answers are awaited: the stream fails.
  const bool kept = len == 0 || bufferevent_write(bev_, data, len) == 0;
  // A turn that wrote a big round (a heartbeat of thousands of locks) gives its memory back;
  // a turn of a few commands keeps the buffer for the next.
  constexpr size_t kKeptCapacity = 64 * 1024;
  if (outgoing_.capacity() > kKeptCapacity) {
    std::string().swap(outgoing_);
  } else {
    outgoing_.clear();
  }
  if (!kept) {
    StreamFailure failure;
    failure.was_connected = connected_;
    failure.out_of_memory = true;
    Fail(failure);
  }
}

void Stream::Close() {
  if (flush_ != nullptr) event_free(flush_);  // nothing of ours stays on the base
  flush_ = nullptr;
  outgoing_.clear();
  if (bev_ != nullptr) bufferevent_free(bev_);  // no callback runs after this
  bev_ = nullptr;
  connected_ = false;
}

void Stream::Fail(const StreamFailure& failure) {
  Close();
  handler_->OnStreamFailed(failure, /*trying_next=*/false);
}

StreamFailure Stream::Failure(short events) {
  StreamFailure failure;
  failure.error_number = errno;
  failure.was_connected = connected_;
  failure.eof = (events & BEV_EVENT_EOF) != 0;
  if (tls_) {
    while (unsigned long e = bufferevent_get_openssl_error(bev_)) failure.tls_error = e;
    const SSL* ssl = bufferevent_openssl_get_ssl(bev_);
    if (ssl != nullptr) failure.tls_verify_result = SSL_get_verify_result(ssl);
  }
  return failure;
}

void Stream::OnEvent(bufferevent*, short events, void* arg) {
  auto* self = static_cast<Stream*>(arg);
  if ((events & BEV_EVENT_CONNECTED) != 0) {
    self->connected_ = true;
    self->handler_->OnStreamConnected();
    return;
  }
  if ((events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) == 0) return;
  const StreamFailure failure = self->Failure(events);
  if (!failure.was_connected) {  // this address failed: the next one, within the same deadline
    self->Close();
    std::string ignored;  // the failure above is the one to tell
    const bool next = self->ConnectNext(&ignored);
    self->handler_->OnStreamFailed(failure, next);
    return;
  }
  self->Fail(failure);
}

void Stream::OnRead(bufferevent*, void* arg) {
  auto* self = static_cast<Stream*>(arg);
  const uint64_t generation = self->generation_;
  char buf[16384];
  while (self->generation_ == generation && self->bev_ != nullptr) {
    const int n = evbuffer_remove(bufferevent_get_input(self->bev_), buf, sizeof buf);
    if (n <= 0) return;
    self->handler_->OnStreamData(buf, static_cast<size_t>(n));
  }
}

}  // namespace dlock
