#include "redis_server.h"
#include "support/redis_wire.h"

#include "support/child_process.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

// Connects over TCP (or the unix socket when unix_path is set), authenticating when password is
// set. On failure returns null and says why.
ContextPtr Connect(int port, const std::string& unix_path, const std::string& password,
                   int connect_timeout_ms, int io_timeout_ms, std::string* why) {
  ContextPtr c(unix_path.empty()
                   ? redisConnectWithTimeout("127.0.0.1", port, Tv(connect_timeout_ms))
                   : redisConnectUnixWithTimeout(unix_path.c_str(), Tv(connect_timeout_ms)));
  if (!c) {
    *why = "CONNECT FAILED: cannot allocate a hiredis context";
    return nullptr;
  }
  if (c->err) {
    *why = std::string("CONNECT FAILED: ") + c->errstr;
    return nullptr;
  }
  redisSetTimeout(c.get(), Tv(io_timeout_ms));
  if (!password.empty()) {
    ReplyPtr r = Command(c.get(), {"AUTH", password});
    if (!r) {
      *why = std::string("IO FAILED: ") + c->errstr;
      return nullptr;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      *why = Render(r.get());
      return nullptr;
    }
  }
  return c;
}

std::string MakeTempDir(std::string* why) {
  // The unix socket path must fit in sun_path (108 bytes): fall back to /tmp for a long TMPDIR.
  std::string base = "/tmp";
  if (const char* t = getenv("TMPDIR"); t && *t && strlen(t) < 60) base = t;
  std::string tmpl = base + "/dlock-redis-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    *why = "mkdtemp(" + tmpl + ") failed: " + strerror(errno);
    return "";
  }
  std::error_code ec;
  fs::path abs = fs::absolute(buf.data(), ec);
  return ec ? std::string(buf.data()) : abs.string();
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
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
  dir_ = MakeTempDir(&why);
  if (dir_.empty()) {
    ADD_FAILURE() << "RedisServer: " << why;
    return;
  }
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    port_ = FreeTcpPort();
    if (port_ <= 0) {
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
std::string RedisServer::url() const { return "redis://" + address(); }
std::string RedisServer::unix_socket() const { return dir_.empty() ? "" : dir_ + "/redis.sock"; }

void RedisServer::Spawn() {
  std::vector<std::string> args = {redis_path_,
                                   "--port", std::to_string(port_),
                                   "--bind", "127.0.0.1",
                                   "--unixsocket", unix_socket(),
                                   "--unixsocketperm", "700",
                                   "--save", "",
                                   "--appendonly", "no",
                                   "--dir", dir_,
                                   "--daemonize", "no",
                                   "--logfile", dir_ + "/redis.log"};
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
    std::string err;
    if (ContextPtr c = Connect(port_, "", password_, 200, 1000, &err)) {
      ReplyPtr pong = Command(c.get(), {"PING"});
      ReplyPtr info = pong ? Command(c.get(), {"INFO", "server"}) : nullptr;
      if (pong && info && pong->type == REDIS_REPLY_STATUS && Render(pong.get()) == "PONG" &&
          info->type == REDIS_REPLY_STRING) {
        // Make sure it is our server that answers, not another test's that raced us to the port.
        std::string text = Render(info.get());
        std::string want = "process_id:" + std::to_string(pid()) + "\r";
        if (text.find(want) != std::string::npos) {
          if (ContextPtr u = Connect(0, unix_socket(), password_, 200, 1000, &err)) {
            ReplyPtr upong = Command(u.get(), {"PING"});
            if (upong && upong->type == REDIS_REPLY_STATUS) return true;
          }
          last = "unix socket " + unix_socket() + ": " + err;
        } else {
          last = "port " + std::to_string(port_) + " answered by another redis-server";
        }
      } else {
        last = pong ? "PING/INFO answered: " + Render(pong.get()) : "PING failed: " +
                                                                        std::string(c->errstr);
      }
    } else {
      last = err;
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
  std::string why;
  ContextPtr c = Connect(port_, "", password_, 2000, 10000, &why);
  if (!c) return why;
  ReplyPtr r = Command(c.get(), args);
  if (!r) return std::string("IO FAILED: ") + c->errstr;
  return Render(r.get());
}

std::string RedisServer::LogTail() const {
  if (dir_.empty()) return "";
  std::string s = ReadTail(dir_ + "/redis.log", 3000);
  std::string out = ReadTail(dir_ + "/stdout.log", 1000);
  if (!out.empty()) s += "\n--- stdout/stderr ---\n" + out;
  return s;
}

}  // namespace dlock_test
