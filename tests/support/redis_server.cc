#include "redis_server.h"
#include "support/harness_util.h"
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

using wire::Connection;
using wire::Render;
using wire::ReplyPtr;
using wire::ScopedNoSigpipe;

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr auto kReadyTimeout = std::chrono::seconds(5);
constexpr int kStartAttempts = 5;


}  // namespace

std::vector<std::pair<std::string, std::string>> RedisTls::ServerConfig() const {
  std::string cert = certs->server_cert(), key = certs->server_key();
  if (server_cert == Cert::kWrongHost) {
    cert = certs->wrong_host_cert();
    key = certs->wrong_host_key();
  } else if (server_cert == Cert::kExpired) {
    cert = certs->expired_cert();
    key = certs->expired_key();
  }
  return {{"tls-cert-file", cert},
          {"tls-key-file", key},
          {"tls-ca-cert-file", certs->ca_cert()},
          {"tls-auth-clients", require_client_cert ? "yes" : "no"},
          // What it presents when it connects to another server (a replica to its master, a
          // cluster node to another's bus, a sentinel to anyone): the server certificate is
          // for serverAuth only, which a peer that checks client certificates refuses.
          {"tls-client-cert-file", certs->client_cert()},
          {"tls-client-key-file", certs->client_key()}};
}

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
    args.insert(args.end(), {"--tls-port", std::to_string(port_)});
    for (const auto& [name, value] : tls_->ServerConfig()) {
      args.insert(args.end(), {"--" + name, value});
    }
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
    Connection c(port_, "", wire::HarnessTls(tls_ ? tls_->certs : nullptr), password_, 200, 1000);
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
  Connection c(port_, "", wire::HarnessTls(tls_ ? tls_->certs : nullptr), password_, 2000, 10000);
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

long ErrorCount(const RedisServer& node, const std::string& kind) {
  // No std::regex: GCC 12 warns about its insides under the sanitizers.
  const std::string stats = node.Cli({"INFO", "errorstats"});
  const std::string field = "errorstat_" + kind + ":count=";
  const size_t at = stats.find(field);
  return at == std::string::npos ? 0 : atol(stats.c_str() + at + field.size());
}

}  // namespace dlock_test
