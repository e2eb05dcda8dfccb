#include "support/fake_redis.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

namespace dlock_test {
namespace {

std::string Bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

std::string Sha1Hex(const std::string& s) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
  char hex[2 * SHA_DIGEST_LENGTH + 1];
  for (int i = 0; i < SHA_DIGEST_LENGTH; ++i) std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return hex;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

FakeRedis::FakeRedis(Responder respond) : respond_(std::move(respond)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  listen(listen_fd_, 64);
  acceptor_ = std::thread([this] { Accept(); });
}

FakeRedis::~FakeRedis() {
  stop_ = true;
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : workers_) t.join();
  for (int fd : fds_) close(fd);
  close(listen_fd_);
}

int FakeRedis::count(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(name);
  return it == counts_.end() ? 0 : it->second;
}

bool FakeRedis::Handshake(const std::vector<std::string>& argv, FakeReply* out) {
  const std::string cmd = Upper(argv[0]);
  if (cmd == "PING") {
    *out = {"+PONG\r\n"};
  } else if (cmd == "AUTH" || cmd == "SELECT") {
    *out = {"+OK\r\n"};
  } else if (cmd == "SCRIPT" && argv.size() == 3 && Upper(argv[1]) == "LOAD") {
    *out = {Bulk(Sha1Hex(argv[2]))};
  } else if ((cmd == "SUBSCRIBE" || cmd == "UNSUBSCRIBE") && argv.size() >= 2) {
    std::string bytes;
    for (size_t i = 1; i < argv.size(); ++i) {
      bytes += "*3\r\n" + Bulk(cmd == "SUBSCRIBE" ? "subscribe" : "unsubscribe") + Bulk(argv[i]) +
               ":" + std::to_string(cmd == "SUBSCRIBE" ? i : argv.size() - 1 - i) + "\r\n";
    }
    *out = {bytes};
  } else {
    return false;
  }
  return true;
}

std::string FakeRedis::Acquired(uint64_t token) { return "*2\r\n:1\r\n" + Bulk(std::to_string(token)); }
std::string FakeRedis::HeldFor(long long pttl_ms) { return "*2\r\n:0\r\n:" + std::to_string(pttl_ms) + "\r\n"; }

void FakeRedis::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeRedis::Serve(int fd) {
  redisReader* reader = redisReaderCreate();
  char buf[16384];
  bool open = true;
  while (open && !stop_) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    redisReaderFeed(reader, buf, static_cast<size_t>(n));
    void* parsed = nullptr;
    while (open && redisReaderGetReply(reader, &parsed) == REDIS_OK && parsed != nullptr) {
      auto* r = static_cast<redisReply*>(parsed);
      std::vector<std::string> argv;
      if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements; ++i) argv.emplace_back(r->element[i]->str, r->element[i]->len);
      }
      freeReplyObject(r);
      if (argv.empty()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counts_[Upper(argv[0])];
      }
      FakeReply reply = respond_(argv);
      if (reply.silent) continue;
      if (reply.trickle_ms > 0) {
        for (size_t i = 0; i < reply.bytes.size() && !stop_; ++i) {
          if (send(fd, &reply.bytes[i], 1, MSG_NOSIGNAL) != 1) {
            open = false;
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(reply.trickle_ms));
        }
      } else if (!reply.bytes.empty()) {
        (void)!send(fd, reply.bytes.data(), reply.bytes.size(), MSG_NOSIGNAL);
      }
      // A reply as large as a test likes, never built whole: ends early when the client hangs up.
      const std::string chunk(64 * 1024, 'x');
      for (size_t sent = 0; sent < reply.flood && !stop_;) {
        const size_t n = std::min(chunk.size(), reply.flood - sent);
        ssize_t k = send(fd, chunk.data(), n, MSG_NOSIGNAL);
        if (k <= 0) {
          open = false;
          break;
        }
        sent += static_cast<size_t>(k);
      }
      if (reply.hang_up) open = false;
    }
  }
  redisReaderFree(reader);
  shutdown(fd, SHUT_RDWR);
}

}  // namespace dlock_test
