// Servers that are not there, vanish, hang or answer garbage: clear errors naming the server.
// The hung and garbage servers are a fake on loopback: a real Redis cannot misbehave like that.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Accepts connections on a free loopback port and answers every read with `reply` (or never,
// when reply is empty), until destroyed.
class FakeServer {
 public:
  explicit FakeServer(std::string reply) : reply_(std::move(reply)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listen_fd_, 16);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    std::vector<int> clients;
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) clients.push_back(accept(listen_fd_, nullptr, nullptr));
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & POLLIN)) continue;
        char buf[4096];
        if (read(fds[i].fd, buf, sizeof buf) <= 0) continue;
        if (!reply_.empty()) (void)!write(fds[i].fd, reply_.data(), reply_.size());
      }
    }
    for (int c : clients) close(c);
  }
  std::string reply_;
  int listen_fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(RedisFailureTest, NothingListeningAtOpenIsEio) {
  int port = FreeTcpPort();
  std::string address = "127.0.0.1:" + std::to_string(port);
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(("redis://" + address).c_str(), &c), DLOCK_EIO);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(dlock_last_error()).find(address), std::string::npos) << dlock_last_error();
}

TEST(RedisFailureTest, MissingUnixSocketIsEio) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open("redis+unix:///nonexistent/dlock.sock", &c), DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find("/nonexistent/dlock.sock"), std::string::npos);
}

TEST(RedisFailureTest, RedisKilledMidUseIsEioNamingTheServer) {
  RedisServer redis;
  Client client(redis.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(client.get(), "k", nullptr, &held), DLOCK_OK);
  redis.Kill();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "other", nullptr, &l), DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find(redis.address()), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_extend(held, 5000), DLOCK_EIO);
  EXPECT_EQ(dlock_release(held), DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find(redis.address()), std::string::npos) << dlock_last_error();
  // It comes back: the same client works again.
  ASSERT_TRUE(redis.Restart());
  ASSERT_EQ(dlock_acquire(client.get(), "k", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST(RedisFailureTest, WaiterSeesEioWhenRedisDiesWhileWaiting) {
  RedisServer redis;
  Client holder(redis.url()), waiter(redis.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "w", nullptr, &held), DLOCK_OK);
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    redis.Kill();
  });
  Options opts;
  opts.wait(10000).retry(20, 100);
  dlock_lock* l = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_acquire(waiter.get(), "w", opts.get(), &l), DLOCK_EIO) << dlock_last_error();
  EXPECT_LT(Clock::now() - start, 5000ms);
  killer.join();
  dlock_release(held);
}

TEST(RedisFailureTest, HungServerTimesOut) {
  FakeServer hung("");  // accepts, never answers
  dlock_client* c = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_client_open(("redis://" + hung.address() + "?timeout_ms=200").c_str(), &c), DLOCK_EIO);
  EXPECT_LT(Clock::now() - start, 2000ms);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find(hung.address()), std::string::npos) << error;
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
}

TEST(RedisFailureTest, GarbageSpeakingServerIsEbackend) {
  FakeServer garbage("this is not RESP\r\n");
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(("redis://" + garbage.address()).c_str(), &c), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("protocol"), std::string::npos) << dlock_last_error();
}

TEST(RedisFailureTest, WellFormedButWrongRepliesAreEbackend) {
  FakeServer liar("+OK\r\n");  // answers OK to everything, including the scripts
  Client client("redis://" + liar.address());
  ASSERT_NE(client.get(), nullptr);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "x", nullptr, &l), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("unexpected reply"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(l, nullptr);
}

TEST(RedisFailureTest, ErrorRepliesAreEbackendWithTheServersMessage) {
  RedisServer redis;
  Client client(redis.url());
  redis.Cli({"SET", "dlock:{n}:fence", "not-a-number"});  // INCR fails in the script
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "n", nullptr, &l), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("not an integer"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{n}"}), "0") << "a failed acquire left a lock behind";
}

}  // namespace
}  // namespace dlock_test
