#include "redis/wire/sync_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>

#include "core/server_text.h"
#include "redis/wire/resp.h"

namespace dlock::redis {
namespace {

int MillisLeft(TimePoint deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left + 1, 1 << 30));  // round up: poll is in ms
}

// Waits for a non-blocking connect to finish; 0 or an errno value (ETIMEDOUT at the deadline).
int FinishConnect(int fd, TimePoint deadline) {
  while (true) {
    pollfd p{fd, POLLOUT, 0};
    int left = MillisLeft(deadline);
    if (left == 0) return ETIMEDOUT;
    int n = poll(&p, 1, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) continue;  // re-check the deadline
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
  }
}

// A connected non-blocking socket, or -1 with *why set.
int ConnectSocket(const RedisConfig& config, TimePoint deadline, std::string* why) {
  if (!config.socket_path.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (config.socket_path.size() >= sizeof addr.sun_path) {
      *why = "socket path too long";
      return -1;
    }
    std::memcpy(addr.sun_path, config.socket_path.data(), config.socket_path.size());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *why = std::strerror(errno);
      return -1;
    }
    int err = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EAGAIN) err = FinishConnect(fd, deadline);
    if (err == 0) return fd;
    close(fd);
    *why = err == ETIMEDOUT ? "timed out" : std::strerror(err);
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(config.port);
  if (int rc = getaddrinfo(config.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *why = std::strerror(errno);
      continue;
    }
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) err = FinishConnect(fd, deadline);
    if (err == 0) break;
    close(fd);
    fd = -1;
    *why = err == ETIMEDOUT ? "timed out" : std::strerror(err);
    if (err == ETIMEDOUT) break;  // the deadline is for the whole connect
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  return fd;
}

}  // namespace

std::vector<std::string> EvalShaArgv(const Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv{"EVALSHA", script.sha1, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> EvalBodyArgv(const Script& script, const std::vector<std::string>& keys,
                                      const std::vector<std::string>& args) {
  std::vector<std::string> argv = EvalShaArgv(script, keys, args);
  argv[0] = "EVAL";
  argv[1] = script.body;
  return argv;
}

SyncConnection::SyncConnection(int fd, std::string server, int timeout_ms)
    : fd_(fd), server_(std::move(server)), timeout_ms_(timeout_ms), reader_(redisReaderCreate()) {
  GuardReader(reader_);
}

SyncConnection::~SyncConnection() {
  if (reader_ != nullptr) redisReaderFree(reader_);
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: it could block, and Redis needs none
  close(fd_);
}

Status SyncConnection::Handshake(const RedisConfig& config, TimePoint deadline,
                                 const std::string& limit) {
  const std::string context = "cannot connect to " + server_ + ": ";
  std::string why;
  ssl_ = config.tls_context->NewSsl(config.host, &why);
  if (ssl_ == nullptr) return Status::IoError(context + why);
  if (!AttachSocket(ssl_, fd_)) return Status::IoError(context + "cannot start TLS on the socket");
  while (true) {
    if (!Arm(deadline)) {
      timed_out_ = true;
      // A plain Redis port reads a ClientHello as the start of a command and waits for more.
      return Status::IoError(context + "the TLS handshake did not finish within " + limit +
                             " (a plain Redis port never answers one: then no rediss:// nor tls=1; a "
                             "cluster without tls-cluster yes names its plain ports)");
    }
    ClearTlsErrors();
    const int ret = SSL_connect(ssl_);
    if (ret == 1) return Status::Ok();
    const int err = SSL_get_error(ssl_, ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) continue;  // the socket timeout
    if (err == SSL_ERROR_SYSCALL && errno == EINTR) continue;
    return TlsFailure(ssl_, ret, err, context + "TLS handshake failed: ");
  }
}

ssize_t SyncConnection::Send(const char* data, size_t len, bool* again, Status* error) {
  *again = false;
  if (ssl_ == nullptr) {
    ssize_t n = send(fd_, data, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) *again = true;
    if (n < 0 && !*again) *error = Status::IoError("talking to " + server_ + " failed: " + std::strerror(errno));
    return n;
  }
  ClearTlsErrors();
  const int ret = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(len, 1 << 30)));
  if (ret > 0) return ret;
  const int err = SSL_get_error(ssl_, ret);
  *again = err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ||
           (err == SSL_ERROR_SYSCALL && errno == EINTR);
  if (!*again) *error = TlsFailure(ssl_, ret, err, "talking to " + server_ + " failed: ");
  return -1;
}

ssize_t SyncConnection::Recv(char* buf, size_t len, bool* again, Status* error) {
  *again = false;
  if (ssl_ == nullptr) {
    ssize_t n = recv(fd_, buf, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) *again = true;
    if (n < 0 && !*again) *error = Status::IoError("reading from " + server_ + " failed: " + std::strerror(errno));
    return n;
  }
  ClearTlsErrors();
  const int ret = SSL_read(ssl_, buf, static_cast<int>(len));
  if (ret > 0) return ret;
  const int err = SSL_get_error(ssl_, ret);
  if (err == SSL_ERROR_ZERO_RETURN) return 0;
  *again = err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ||
           (err == SSL_ERROR_SYSCALL && errno == EINTR);
  if (!*again) *error = TlsFailure(ssl_, ret, err, "reading from " + server_ + " failed: ");
  return -1;
}

std::string SyncConnection::ProtocolHint() const {
  if (answered_) return "";
  if (ssl_ == nullptr) return " (before any reply: if that port expects TLS, use rediss:// or tls=1)";
  // TLS 1.3: a server that wants a client certificate says so only after the handshake, and
  // may reset the connection before its alert is read.
  return " (before any reply over TLS: does the server require a client certificate? cert= and "
         "key=)";
}

Status SyncConnection::Connect(const RedisConfig& config, TimePoint deadline,
                               std::unique_ptr<SyncConnection>* out) {
  const std::string server = config.Describe();
  const std::string limit = "connect_timeout_ms=" + std::to_string(config.params.connect_timeout_ms);
  std::string why;
  int fd = ConnectSocket(config, deadline, &why);
  if (fd < 0) {
    if (why == "timed out") why = "no connection within " + limit;
    return Status::IoError("cannot connect to " + server + ": " + why);
  }
  // Connected: from now on the socket blocks, bounded by the timeouts Arm() sets.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::unique_ptr<SyncConnection> conn(new SyncConnection(fd, server, config.params.timeout_ms));
  if (conn->reader_ == nullptr) return Status(Code::kNoMemory, "out of memory connecting to " + server);
  if (config.tls_context != nullptr) {
    Status s = conn->Handshake(config, deadline, limit);
    if (!s.ok()) return s;
  }
  // Up, as the async connections count theirs (StreamConnection): counted out by the destructor,
  // also when the AUTH or SELECT below fails.
  conn->counted_ = CountedConnection(config.connections);
  auto handshake_failed = [&](const Status& s) {
    if (!conn->timed_out()) return s;
    return Status::IoError("cannot connect to " + server + ": the handshake did not finish within " + limit);
  };
  ReplyPtr reply;
  if (config.password.has_value()) {
    Status s = conn->Command(config.AuthCommand(), deadline, &reply);
    if (!s.ok()) return handshake_failed(s);
    if (reply->type == REDIS_REPLY_ERROR) {
      return Status::AuthError(server + " refused the credentials" +
                               (config.user ? " for user '" + *config.user + "'" : "") + ": " +
                               ServerText(std::string_view(reply->str, reply->len)));
    }
  }
  if (config.db != 0) {
    Status s = conn->Command({"SELECT", std::to_string(config.db)}, deadline, &reply);
    if (!s.ok()) return handshake_failed(s);
    if (reply->type == REDIS_REPLY_ERROR) {
      Status e = ErrorReplyStatus(reply.get(), server);
      if (e.code() == Code::kAuthError) return e;
      return Status::InvalidArgument(server + " cannot select database " +
                                     std::to_string(config.db) + ": " +
                                     ServerText(std::string_view(reply->str, reply->len)));
    }
  }
  *out = std::move(conn);
  return Status::Ok();
}

Status SyncConnection::Fail(Status s) {
  broken_ = true;
  pending_.clear();
  return s;
}

Status SyncConnection::TimedOut(const char* doing) {
  timed_out_ = true;
  return Fail(Status::IoError(std::string(doing) + " " + server_ +
                              " failed: timed out (no complete reply within timeout_ms=" +
                              std::to_string(timeout_ms_) + ")"));
}

bool SyncConnection::Arm(TimePoint deadline) {
  // The socket blocks, with SO_RCVTIMEO/SO_SNDTIMEO as the bound of each call: the common
  // round trip is one send() and one recv(), as with hiredis's blocking context. The timeouts
  // are changed only when the deadline is more than a few ms nearer than what is armed (a
  // trickling server, a call's last command) or much further (the next command): the whole
  // command still ends within kArmSlackMs of its deadline.
  constexpr int kArmSlackMs = 5;
  auto left = std::chrono::duration_cast<Millis>(deadline - Now()).count();
  if (left <= 0) return false;
  if (left + kArmSlackMs < armed_ms_ || left > armed_ms_ + 50) {
    timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>((left % 1000) * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    armed_ms_ = left;
  }
  return true;
}

Status SyncConnection::Flush(TimePoint deadline) {
  size_t sent = 0;
  while (sent < pending_.size()) {
    if (!Arm(deadline)) return TimedOut("talking to");
    bool again;
    Status error;
    ssize_t n = Send(pending_.data() + sent, pending_.size() - sent, &again, &error);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (again) continue;
    if (n == 0) error = Status::IoError("talking to " + server_ + " failed: the server closed the connection");
    if (error.code() == Code::kIoError) error = Status::IoError(error.message() + ProtocolHint());
    return Fail(error);
  }
  pending_.clear();
  return Status::Ok();
}

void SyncConnection::Append(const std::vector<std::string>& argv) {
  try {
    resp::AppendCommand(&pending_, argv);
  } catch (const std::bad_alloc&) {
    broken_ = true;  // out of memory: the next read reports it
  }
}

void SyncConnection::AppendScriptCall(const Script& script, bool body,
                                      const std::vector<std::string>& keys,
                                      const std::vector<std::string>& args) {
  try {
    resp::AppendScriptCall(&pending_, script, body, keys, args);
  } catch (const std::bad_alloc&) {
    broken_ = true;  // out of memory: the next read reports it
  }
}

Status SyncConnection::ReadReply(TimePoint deadline, ReplyPtr* reply) {
  if (broken_) return Status::IoError("connection to " + server_ + " is broken");
  Status s = Flush(deadline);
  if (!s.ok()) return s;
  char buf[16384];
  while (true) {
    void* r = nullptr;
    if (TakeReply(reader_, &r) != REDIS_OK) {
      // Bytes that are not RESP: nothing more on this connection can be trusted.
      return Fail(NotRedisProtocol(server_, reader_, !answered_ && ssl_ == nullptr));
    }
    if (r != nullptr) {
      reply->reset(static_cast<redisReply*>(r));
      answered_ = true;
      return Status::Ok();
    }
    if (!Arm(deadline)) return TimedOut("reading from");
    bool again;
    Status error;
    ssize_t n = Recv(buf, sizeof buf, &again, &error);
    if (n > 0) {
      if (FeedReader(reader_, buf, static_cast<size_t>(n)) != REDIS_OK) {
        if (reader_->err == REDIS_ERR_OOM) {
          return Fail(Status(Code::kNoMemory, "out of memory reading from " + server_));
        }
        return Fail(NotRedisProtocol(server_, reader_, false));  // over a limit (reply.h)
      }
      continue;
    }
    if (again) continue;
    if (n == 0) {
      return Fail(Status::IoError("reading from " + server_ +
                                  " failed: the server closed the connection" + ProtocolHint()));
    }
    if (error.code() == Code::kIoError) error = Status::IoError(error.message() + ProtocolHint());
    return Fail(error);
  }
}

Status SyncConnection::Command(const std::vector<std::string>& argv, TimePoint deadline,
                               ReplyPtr* reply) {
  Status s = ReadyForCommand();
  if (!s.ok()) return s;
  Append(argv);
  return ReadReply(deadline, reply);
}

Status SyncConnection::ReadyForCommand() {
  if (broken_) return Status::IoError("connection to " + server_ + " is broken");
  // Between round trips nothing may be left over: bytes here are a reply nobody asked for,
  // and the next one would be read as this command's.
  if (reader_->pos < reader_->len) {
    return Fail(Status::IoError(server_ + " sent bytes nobody asked for"));
  }
  return Status::Ok();
}

Status SyncConnection::LoadScript(const Script& script, TimePoint deadline) {
  ReplyPtr reply;
  Status s = Command({"SCRIPT", "LOAD", script.body}, deadline, &reply);
  if (!s.ok()) return s;
  if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(reply.get(), server_);
  if (reply->type != REDIS_REPLY_STRING || std::string(reply->str, reply->len) != script.sha1) {
    return Status::BackendError(server_ + " loaded script " + script.name +
                                " under an unexpected SHA1");
  }
  return Status::Ok();
}

Status SyncConnection::Eval(const Script& script, const std::vector<std::string>& keys,
                            const std::vector<std::string>& args, TimePoint deadline,
                            ReplyPtr* reply) {
  // EVALSHA formatted straight into the send buffer (no argv), again after a NOSCRIPT.
  auto send = [&] {
    Status s = ReadyForCommand();
    if (!s.ok()) return s;
    AppendScriptCall(script, false, keys, args);
    return ReadReply(deadline, reply);
  };
  Status s = send();
  if (!s.ok() || !IsNoScript(reply->get())) return s;
  s = LoadScript(script, deadline);
  if (!s.ok()) return s;
  return send();
}

}  // namespace dlock::redis
