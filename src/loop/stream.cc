#include "loop/stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

namespace dlock {

namespace {

// A turn that wrote a big round (a heartbeat of thousands of locks) gives its memory back once
// sent; a turn of a few commands keeps the buffer for the next.
constexpr size_t kKeptCapacity = 64 * 1024;

void Release(std::string* buffer) {
  if (buffer->capacity() > kKeptCapacity) {
    std::string().swap(*buffer);
  } else {
    buffer->clear();
  }
}

bool WouldBlock(int e) { return e == EAGAIN || e == EWOULDBLOCK; }

}  // namespace

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
    const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *why = std::strerror(errno);
      continue;
    }
    if (family == AF_INET || family == AF_INET6) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    SSL* ssl = nullptr;
    if (tls_) {
      ssl = tls_(fd, why);
      if (ssl == nullptr) {
        close(fd);
        if (why->empty()) *why = "cannot start TLS";
        continue;
      }
      // What is left of a write that would block is offered again from wherever outgoing_
      // then is (it grows meanwhile), and long writes go a record at a time.
      SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
      SSL_set_connect_state(ssl);
    }
    std::unique_ptr<FdWatch> watch;
    std::unique_ptr<TurnEnd> flush;
    try {
      watch = std::make_unique<FdWatch>(loop_, fd, &Stream::OnReady, this);
      flush = std::make_unique<TurnEnd>(loop_, [this] { Flush(); });
    } catch (const std::bad_alloc&) {
      watch.reset();
      if (ssl != nullptr) SSL_free(ssl);
      close(fd);
      *why = "out of memory";
      continue;
    }
    // A refused connect is told later, through the handler, as a failure of this address;
    // other failures right here.
    int connect_error = 0;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) != 0 &&
        errno != EINPROGRESS && errno != EINTR) {
      if (errno != ECONNREFUSED) {
        *why = std::strerror(errno);
        watch.reset();
        if (ssl != nullptr) SSL_free(ssl);
        close(fd);
        continue;
      }
      connect_error = errno;  // the socket is ready (hung up) at once: told from there
    }
    fd_ = fd;
    ssl_ = ssl;
    watch_ = std::move(watch);
    flush_ = std::move(flush);
    state_ = State::kConnecting;
    connect_error_ = connect_error;
    ++generation_;
    UpdateWatch();
    return true;
  }
  return false;
}

void Stream::Close() {
  watch_.reset();  // before the socket closes; no callback runs after this
  flush_.reset();  // nothing of ours stays on the loop
  if (ssl_ != nullptr) SSL_free(ssl_);  // its socket BIO does not close the socket
  ssl_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  state_ = State::kClosed;
  flush_scheduled_ = false;
  watching_read_ = false;
  watching_write_ = false;
  write_blocked_ = false;
  tls_write_wants_read_ = false;
  tls_read_wants_write_ = false;
  handshake_wants_write_ = false;
  connect_error_ = 0;
  send_failed_ = false;
  Release(&outgoing_);
  sent_ = 0;
}

// Asks the loop for what the state needs, and only when that changes (each change may be a
// system call). Write interest only while something waits for writability: left on, it would
// wake every turn.
void Stream::UpdateWatch() {
  if (watch_ == nullptr) return;
  bool read = false;
  bool write = false;
  switch (state_) {
    case State::kClosed:
      break;
    case State::kConnecting:
      write = true;
      break;
    case State::kHandshaking:
      read = !handshake_wants_write_;
      write = handshake_wants_write_;
      break;
    case State::kConnected:
      read = true;
      write = (write_blocked_ && !tls_write_wants_read_) || tls_read_wants_write_ || send_failed_;
      break;
  }
  if (read == watching_read_ && write == watching_write_) return;
  watching_read_ = read;
  watching_write_ = write;
  watch_->Want(read, write);
}

void Stream::OnReady(void* arg, bool readable, bool writable) {
  auto* self = static_cast<Stream*>(arg);
  switch (self->state_) {
    case State::kConnecting:
      self->OnConnectDone(writable);
      return;
    case State::kHandshaking:
      self->Handshake();
      return;
    case State::kConnected:
      self->OnIo(readable, writable);
      return;
    case State::kClosed:
      return;
  }
}

void Stream::OnConnectDone(bool writable) {
  int error = connect_error_;
  if (error == 0) {
    socklen_t len = sizeof error;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
  }
  if (error != 0) return Lose(SocketFailure(error, /*eof=*/false));
  if (!writable) return;  // not connected yet
  if (ssl_ == nullptr) return BecomeConnected();
  state_ = State::kHandshaking;
  Handshake();
}

void Stream::Handshake() {
  ERR_clear_error();
  const int r = SSL_connect(ssl_);
  if (r == 1) return BecomeConnected();
  const int saved_errno = errno;
  const int err = SSL_get_error(ssl_, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    handshake_wants_write_ = err == SSL_ERROR_WANT_WRITE;
    UpdateWatch();
    return;
  }
  Lose(TlsFailure(err, r, saved_errno));
}

void Stream::BecomeConnected() {
  state_ = State::kConnected;
  const uint64_t generation = generation_;
  // What was written while connecting leaves at the end of this turn, with what the handler
  // writes now.
  if (!outgoing_.empty() && !flush_scheduled_) {
    flush_scheduled_ = true;
    flush_->Schedule();
  }
  UpdateWatch();
  // Bytes that came with the end of the handshake wait in OpenSSL, where the socket's
  // readiness does not show them. (Else nothing here touches the stream after the handler.)
  const bool pending = ssl_ != nullptr && SSL_has_pending(ssl_) == 1;
  handler_->OnStreamConnected();
  if (pending && Current(generation) && ReadTls(generation)) UpdateWatch();
}

// Writes are gathered and sent with one send() once the loop has run what is due this turn
// (TurnEnd: no system call to arrange), so that a turn that writes many commands (replies that
// start new ones, a heartbeat round) still sends them together. Asking for writability instead
// would cost, each turn, two changes of the socket's watch and a wait more (async_bench, 64 in
// flight: +7 %). What the kernel does not take leaves when the socket is writable.
bool Stream::Write(const char* data, size_t len) {
  if (fd_ < 0) return false;
  try {
    outgoing_.append(data, len);
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (state_ == State::kConnected && !write_blocked_ && !flush_scheduled_) {
    flush_scheduled_ = true;
    flush_->Schedule();
  }
  return true;
}

// The end of the turn. Calls no handler (TurnEnd's call must not see its TurnEnd destroyed): a
// failure here is told from the socket's next readiness, which a failed socket has at once.
void Stream::Flush() {
  flush_scheduled_ = false;
  if (state_ != State::kConnected || write_blocked_ || send_failed_) return;
  if (!Send(&send_failure_)) send_failed_ = true;
  UpdateWatch();
}

// Sends what it can of outgoing_; false, with *failure, when the stream failed.
bool Stream::Send(StreamFailure* failure) {
  const bool ok = ssl_ != nullptr ? SendTls(failure) : SendPlain(failure);
  if (!ok) return false;
  Sent();
  return true;
}

bool Stream::SendPlain(StreamFailure* failure) {
  while (sent_ < outgoing_.size()) {
    const ssize_t n = send(fd_, outgoing_.data() + sent_, outgoing_.size() - sent_,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      if (sent_ < outgoing_.size()) {  // the kernel's buffer is full
        write_blocked_ = true;
        return true;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (WouldBlock(errno) || errno == ENOBUFS)) {
      write_blocked_ = true;
      return true;
    }
    *failure = SocketFailure(n < 0 ? errno : 0, /*eof=*/false);
    return false;
  }
  write_blocked_ = false;
  return true;
}

bool Stream::SendTls(StreamFailure* failure) {
  while (sent_ < outgoing_.size()) {
    const int len = static_cast<int>(std::min<size_t>(outgoing_.size() - sent_, INT_MAX));
    ERR_clear_error();
    const int n = SSL_write(ssl_, outgoing_.data() + sent_, len);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      tls_write_wants_read_ = false;
      continue;
    }
    const int saved_errno = errno;
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
      write_blocked_ = true;
      tls_write_wants_read_ = err == SSL_ERROR_WANT_READ;
      return true;
    }
    *failure = TlsFailure(err, n, saved_errno);
    return false;
  }
  write_blocked_ = false;
  tls_write_wants_read_ = false;
  return true;
}

// After a send: all of it gone, the buffer is emptied (and its memory given back when it grew
// big); else what was sent is dropped once it is half the buffer, so that a connection that
// keeps writing while the kernel is full does not keep what left long ago.
void Stream::Sent() {
  if (sent_ == outgoing_.size()) {
    Release(&outgoing_);
    sent_ = 0;
  } else if (sent_ >= outgoing_.size() / 2) {
    outgoing_.erase(0, sent_);  // OpenSSL may be offered it again from elsewhere (see above)
    sent_ = 0;
  }
}

void Stream::OnIo(bool readable, bool writable) {
  const uint64_t generation = generation_;
  if (send_failed_) {
    const StreamFailure failure = send_failure_;
    return Lose(failure);
  }
  // Reading first: what the server said before it failed is delivered before the failure.
  if (readable || (tls_read_wants_write_ && writable)) {
    const bool ok = ssl_ != nullptr ? ReadTls(generation) : ReadPlain(generation);
    if (!ok) return;  // failed (the handler was told), or the handler closed or reconnected
  }
  if (write_blocked_ && (tls_write_wants_read_ ? readable : writable)) {
    StreamFailure failure;
    if (!Send(&failure)) return Lose(failure);
  }
  UpdateWatch();
}

// Reads until the socket has no more (a short read says so), delivering each piece; false
// when the stream failed or the handler closed or reconnected it.
bool Stream::ReadPlain(uint64_t generation) {
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      handler_->OnStreamData(buf, static_cast<size_t>(n));
      if (!Current(generation)) return false;
      if (static_cast<size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n == 0) {
      Lose(SocketFailure(0, /*eof=*/true));
      return false;
    }
    if (errno == EINTR) continue;
    if (WouldBlock(errno)) return true;
    Lose(SocketFailure(errno, /*eof=*/false));
    return false;
  }
}

// Reads until OpenSSL would block: what it has decrypted and kept does not show as the
// socket's readiness.
bool Stream::ReadTls(uint64_t generation) {
  char buf[16384];
  for (;;) {
    ERR_clear_error();
    const int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      tls_read_wants_write_ = false;
      handler_->OnStreamData(buf, static_cast<size_t>(n));
      if (!Current(generation)) return false;
      continue;
    }
    const int saved_errno = errno;
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      tls_read_wants_write_ = err == SSL_ERROR_WANT_WRITE;
      return true;
    }
    Lose(TlsFailure(err, n, saved_errno));
    return false;
  }
}

StreamFailure Stream::SocketFailure(int error_number, bool eof) const {
  StreamFailure failure;
  failure.was_connected = state_ == State::kConnected;
  failure.eof = eof;
  failure.error_number = error_number;
  if (ssl_ != nullptr && !failure.was_connected) {
    failure.tls_verify_result = SSL_get_verify_result(ssl_);
  }
  return failure;
}

// Why an SSL call failed (SSL_get_error's err, the call's ret, errno right after it). A server
// that closes without close_notify (Redis does) is an end of stream, not an error.
StreamFailure Stream::TlsFailure(int err, int ret, int error_number) {
  unsigned long last = 0;
  while (unsigned long e = ERR_get_error()) last = e;
  const bool connected = state_ == State::kConnected;
  bool eof = false;
  int saved = 0;
  switch (err) {
    case SSL_ERROR_ZERO_RETURN:  // close_notify
      eof = true;
      break;
    case SSL_ERROR_SYSCALL:  // the socket failed, or (OpenSSL 1.1) ended
      if (last == 0 && (ret == 0 || error_number == 0)) {
        eof = true;
      } else {
        saved = error_number;
      }
      break;
    case SSL_ERROR_SSL:
      // OpenSSL 3: the socket ended without close_notify. During the handshake that says
      // something (a server that wanted a client certificate): the error is kept.
      if (ERR_GET_LIB(last) == ERR_LIB_SSL &&
          ERR_GET_REASON(last) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        eof = true;
        if (connected) last = 0;
      }
      break;
    default:
      saved = error_number;
  }
  StreamFailure failure = SocketFailure(saved, eof);
  failure.tls_error = last;
  return failure;
}

// A failure while connecting (the socket or the TLS handshake) moves on to the next address,
// within the same deadline; once connected, it closes the stream.
void Stream::Lose(const StreamFailure& failure) {
  if (failure.was_connected) {
    Close();
    handler_->OnStreamFailed(failure, /*trying_next=*/false);
    return;
  }
  // What was written while connecting (none of it sent) waits for the next address.
  std::string unsent;
  unsent.swap(outgoing_);
  Close();
  std::string ignored;  // the failure above is the one to tell
  const bool next = ConnectNext(&ignored);
  if (next) outgoing_.swap(unsent);
  handler_->OnStreamFailed(failure, next);
}

}  // namespace dlock
