// Servers that are not there, vanish, hang or answer garbage: clear errors naming the server.
// The hung and garbage servers are a fake on loopback (support/fake_redis.h): a real Redis
// cannot misbehave like that. redis_bad_server_test.cc takes every reply path through worse.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/fake_redis.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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
  // Not the 10 s wait: the first retry after the kill fails (a refused connect, at most C + T).
  EXPECT_LT(Clock::now() - start, 300ms + 100ms + (kCallBoundMs + kSlackMs) * 1ms);
  killer.join();
  dlock_release(held);
}

TEST(RedisFailureTest, HungServerTimesOut) {
  FakeRedis hung([](const std::vector<std::string>&) { return FakeReply{"", 0, /*silent=*/true}; });
  dlock_client* c = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_client_open(("redis://" + hung.address() + "?timeout_ms=200").c_str(), &c), DLOCK_EIO);
  // connect_timeout_ms (2 s by default) + timeout_ms bound an open (dlock.h), with slack.
  EXPECT_LT(Clock::now() - start, 2000ms + 200ms + kSlackMs * 1ms);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find(hung.address()), std::string::npos) << error;
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
}

TEST(RedisFailureTest, GarbageSpeakingServerIsEbackend) {
  FakeRedis garbage([](const std::vector<std::string>&) { return FakeReply{"this is not RESP\r\n"}; });
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(("redis://" + garbage.address()).c_str(), &c), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("protocol"), std::string::npos) << dlock_last_error();
}

TEST(RedisFailureTest, WellFormedButWrongRepliesAreEbackend) {
  // Answers OK to everything, including the scripts.
  FakeRedis liar([](const std::vector<std::string>&) { return FakeReply{"+OK\r\n"}; });
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
