#include "redis_server.h"
#include "support/redis_wire.h"
#include "support/tls_certs.h"

#include "support/child_process.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

namespace dlock_test {
namespace {

using wire::Command;
using wire::ContextPtr;
using wire::Render;
using wire::ReplyPtr;
using wire::ScopedNoSigpipe;
using wire::Tv;

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr auto kReadyTimeout = std::chrono::seconds(5);
constexpr int kStartAttempts = 5;

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A connection to the server under test, authenticated when password is set: hiredis over TCP
// (or the unix socket when unix_path is set), or a wire::TlsConnection when tls is given. On
// failure ok() is false and error() says why ("CONNECT FAILED: ...", "IO FAILED: ...", or the
// AUTH error).
class Connection {
 public:
  Connection(int port, const std::string& unix_path,
             const std::optional<wire::TlsClientOptions>& tls, const std::string& password,
             int connect_timeout_ms, int io_timeout_ms) {
    if (tls) {
      // One timeout for all: the TCP connect is quick on loopback, the handshake is I/O.
      tls_ = std::make_unique<wire::TlsConnection>("127.0.0.1", port, *tls, io_timeout_ms);
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

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // One command; null when it failed (error() says why).
  ReplyPtr Command(const std::vector<std::string>& args) {
    ReplyPtr r = tls_ ? tls_->Command(args) : wire::Command(plain_.get(), args);
    if (!r) error_ = tls_ ? tls_->error() : std::string("IO FAILED: ") + plain_->errstr;
    return r;
  }

 private:
  ContextPtr plain_;
  std::unique_ptr<wire::TlsConnection> tls_;
  std::string error_;
};

// How Cli() and the readiness check meet a TLS server: any server certificate will do (the
// wrong-host and expired ones too: it is our own server, as its pid shows), and client.crt for
// a server that wants one. None (plain TCP) for a server without TLS.
std::optional<wire::TlsClientOptions> ClientTls(const std::optional<RedisTls>& tls) {
  if (!tls) return std::nullopt;
  return wire::TlsClientOptions{.cert_file = tls->certs->client_cert(),
                                .key_file = tls->certs->client_key()};
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
  Start();
}

RedisServer::RedisServer(const RedisTls& tls, std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {
  if (!tls.certs || !tls.certs->ok()) {
    ADD_FAILURE() << "RedisServer: RedisTls.certs must be certificates that were made (ok())";
    return;
  }
  tls_ = tls;
  Start();
}

void RedisServer::Start() {
  for (size_t i = 0; i < extra_args_.size(); ++i) {
    const std::string& a = extra_args_[i];
    if (a == "--requirepass" && i + 1 < extra_args_.size()) {
      password_ = extra_args_[i + 1];
    } else if (a.rfind("--requirepass ", 0) == 0) {
      password_ = a.substr(strlen("--requirepass "));
    }
  }
  redis_path_ = FindOnPath("redis-server", "DLOCK_REDIS_SERVER");
  if (redis_path_.empty()) {
    ADD_FAILURE() << "RedisServer: redis-server not found on PATH";
    return;
  }
  std::string why;
  dir_ = MakeTempDir("redis", &why);
  if (dir_.empty()) {
    ADD_FAILURE() << "RedisServer: " << why;
    return;
  }
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    port_ = FreeTcpPort();
    if (tls_ && tls_->plain_port_too) {
      do {
        plain_port_ = FreeTcpPort();
      } while (plain_port_ > 0 && plain_port_ == port_);
    }
    if (port_ <= 0 || (tls_ && tls_->plain_port_too && plain_port_ <= 0)) {
      why = std::string("no free TCP port on 127.0.0.1: ") + strerror(errno);
      continue;
    }
    Spawn();
    if (WaitReady(&why)) return;
    Kill();
    // Only a port taken between FreeTcpPort() and the bind is worth another try.
    std::string log = ReadTail(dir_ + "/redis.log", 4096) + ReadTail(dir_ + "/stdout.log", 4096);
    if (log.find("Address already in use") == std::string::npos &&
        log.find("another process is listening") == std::string::npos) {
      break;
    }
  }
  ADD_FAILURE() << "RedisServer: could not start " << redis_path_ << " on port " << port_ << ": "
                << why << "\n--- server log ---\n"
                << LogTail();
}

RedisServer::~RedisServer() {
  if (::testing::Test::HasFailure() && !dir_.empty() && running()) {
    fprintf(stderr, "--- redis-server on port %d (pid %d), end of its log ---\n%s\n", port_,
            static_cast<int>(pid()), LogTail().c_str());
  }
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string RedisServer::address() const { return host() + ":" + std::to_string(port_); }
std::string RedisServer::url() const { return (tls_ ? "rediss://" : "redis://") + address(); }
std::string RedisServer::unix_socket() const {
  return dir_.empty() || tls_ ? "" : dir_ + "/redis.sock";
}

void RedisServer::Spawn() {
  // A TLS server gets --port 0 (no plain port) unless it has a plain_port_, and no unix socket.
  const int plain_port = tls_ ? std::max(plain_port_, 0) : port_;
  std::vector<std::string> args = {redis_path_,
                                   "--port", std::to_string(plain_port),
                                   "--bind", "127.0.0.1",
                                   "--save", "",
                                   "--appendonly", "no",
                                   "--dir", dir_,
                                   "--daemonize", "no",
                                   "--logfile", dir_ + "/redis.log"};
  if (tls_) {
    const TestCertificates& certs = *tls_->certs;
    std::string cert = certs.server_cert(), key = certs.server_key();
    if (tls_->server_cert == RedisTls::Cert::kWrongHost) {
      cert = certs.wrong_host_cert();
      key = certs.wrong_host_key();
    } else if (tls_->server_cert == RedisTls::Cert::kExpired) {
      cert = certs.expired_cert();
      key = certs.expired_key();
    }
    args.insert(args.end(), {"--tls-port", std::to_string(port_), "--tls-cert-file", cert,
                             "--tls-key-file", key, "--tls-ca-cert-file", certs.ca_cert(),
                             "--tls-auth-clients", tls_->require_client_cert ? "yes" : "no"});
  } else {
    args.insert(args.end(), {"--unixsocket", unix_socket(), "--unixsocketperm", "700"});
  }
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  process_ = std::make_unique<ChildProcess>(args, ChildOptions::LogTo(dir_ + "/stdout.log"));
}

bool RedisServer::WaitReady(std::string* why) {
  ScopedNoSigpipe no_sigpipe;
  if (!process_->started()) {
    *why = process_->error();
    return false;
  }
  const auto deadline = Clock::now() + kReadyTimeout;
  std::string last = "no answer yet";
  while (Clock::now() < deadline) {
    if (int code = process_->Wait(std::chrono::milliseconds(0)); code != -1 || !running()) {
      *why = "redis-server " + DescribeExitCode(code) + " before answering PING";
      return false;
    }
    Connection c(port_, "", ClientTls(tls_), password_, 200, 1000);
    ReplyPtr pong = c.ok() ? c.Command({"PING"}) : nullptr;
    ReplyPtr info = pong ? c.Command({"INFO", "server"}) : nullptr;
    if (pong && info && pong->type == REDIS_REPLY_STATUS && Render(pong.get()) == "PONG" &&
        info->type == REDIS_REPLY_STRING) {
      // Make sure it is our server that answers, not another test's that raced us to the port.
      std::string text = Render(info.get());
      std::string want = "process_id:" + std::to_string(pid()) + "\r";
      if (text.find(want) == std::string::npos) {
        last = "port " + std::to_string(port_) + " answered by another redis-server";
      } else if (tls_ && plain_port_ <= 0) {
        return true;
      } else {
        // Its other listener (the unix socket, or a TLS server's plain port) must answer too.
        Connection other(std::max(plain_port_, 0), unix_socket(), std::nullopt, password_, 200,
                         1000);
        ReplyPtr other_pong = other.ok() ? other.Command({"PING"}) : nullptr;
        if (other_pong && other_pong->type == REDIS_REPLY_STATUS) return true;
        last = (tls_ ? "plain port " + std::to_string(plain_port_) : "unix socket " +
                unix_socket()) + ": " + other.error();
      }
    } else {
      last = pong ? "PING/INFO answered: " + Render(pong.get()) : "PING failed: " + c.error();
    }
    SleepMs(20);
  }
  *why = "no PING answer within 5 s (" + last + ")";
  return false;
}

void RedisServer::Kill() {
  if (process_) process_->Kill();
}

void RedisServer::Stop() {
  if (process_) process_->Stop(SIGTERM, std::chrono::milliseconds(2000));
}

bool RedisServer::Restart() {
  Stop();
  if (dir_.empty() || port_ <= 0 || redis_path_.empty()) {
    ADD_FAILURE() << "RedisServer::Restart: the server was never started";
    return false;
  }
  // Empty data: drop anything a test may have saved (SAVE, BGREWRITEAOF...), keep the logs.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name != "redis.log" && name != "stdout.log") fs::remove_all(entry.path(), ec);
  }
  std::string why;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    Spawn();
    if (WaitReady(&why)) return true;
    Kill();
    SleepMs(200);  // the port may be briefly taken by someone else; try the same port again
  }
  ADD_FAILURE() << "RedisServer::Restart on port " << port_ << ": " << why
                << "\n--- server log ---\n"
                << LogTail();
  return false;
}

std::string RedisServer::Cli(const std::vector<std::string>& args) const {
  if (port_ <= 0) return "CONNECT FAILED: the server was never started";
  ScopedNoSigpipe no_sigpipe;
  Connection c(port_, "", ClientTls(tls_), password_, 2000, 10000);
  ReplyPtr r = c.ok() ? c.Command(args) : nullptr;
  return r ? Render(r.get()) : c.error();
}

std::string RedisServer::LogTail() const {
  if (dir_.empty()) return "";
  std::string s = ReadTail(dir_ + "/redis.log", 3000);
  std::string out = ReadTail(dir_ + "/stdout.log", 1000);
  if (!out.empty()) s += "\n--- stdout/stderr ---\n" + out;
  return s;
}

}  // namespace dlock_test
