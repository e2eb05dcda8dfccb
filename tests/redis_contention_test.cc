// Concurrent callers on the Redis backend (contention and waiting on every backend are in
// conformance/).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

class RedisContentionTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisContentionTest, ThreadsDoNotSerializeOnOneConnection) {
  // Threads calling at once must not queue behind one blocking connection: the server sees
  // several connections from this one client while six threads acquire and release.
  Client client(redis_.url());
  int before = std::stoi(redis_.Cli({"INFO", "clients"}).substr(
      redis_.Cli({"INFO", "clients"}).find("connected_clients:") + 18));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        dlock_lock* l;
        std::string name = "par-" + std::to_string(t) + "-" + std::to_string(i);
        if (dlock_acquire(client.get(), name.c_str(), nullptr, &l) == DLOCK_OK &&
            dlock_release(l) == DLOCK_OK) {
          ok++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 600);
  std::string info = redis_.Cli({"INFO", "clients"});
  int after = std::stoi(info.substr(info.find("connected_clients:") + 18));
  EXPECT_GE(after - before, 2) << "concurrent callers should have used several connections";
}

// The line of fair waiters (lua/acquire.lua, lua/release.lua): a place whose time ran out (a
// waiter that crashed) is skipped by the release, which hands the lock to the next live one.
TEST_F(RedisContentionTest, AReleaseSkipsAPlaceInLineThatLapsed) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "skip", nullptr, &held), DLOCK_OK);
  // First in line: a waiter last seen long ago, whose place lasted 300 ms.
  ASSERT_EQ(redis_.Cli({"ZADD", "dlock:{skip}:line", "1", "deadbeefdeadbeef"}), "1");
  ASSERT_EQ(redis_.Cli({"HSET", "dlock:{skip}:linedata", "deadbeefdeadbeef",
                        "1000 300 10000 00000000000000000000000000000000|crashed"}),
            "1");
  std::atomic<bool> got{false};
  std::thread t([&] {
    Options o;
    o.wait(30000).retry(20000, 30000).owner("alive");
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(waiter.get(), "skip", o.get(), &l), DLOCK_OK) << dlock_last_error();
    got = true;
    EXPECT_EQ(redis_.Cli({"GET", "dlock:{skip}"}).substr(32), "|alive");
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  });
  std::this_thread::sleep_for(kUnderSanitizer ? 800ms : 400ms);  // the waiter is in line now
  EXPECT_EQ(redis_.Cli({"ZCARD", "dlock:{skip}:line"}), "2");
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  EXPECT_TRUE(WaitFor([&] { return got.load(); }, 5000ms)) << "the lapsed place held up the line";
  t.join();
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{skip}", "dlock:{skip}:line", "dlock:{skip}:linedata"}), "0");
}

// A fair waiter that gives up leaves the line: the next release frees the lock instead of
// handing it to nobody.
TEST_F(RedisContentionTest, AWaiterThatGivesUpLeavesTheLine) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "quit", nullptr, &held), DLOCK_OK);
  Options o;
  o.wait(300);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(waiter.get(), "quit", o.get(), &l), DLOCK_NOT_ACQUIRED);
  EXPECT_TRUE(WaitFor([&] { return redis_.Cli({"EXISTS", "dlock:{quit}:line"}) == "0"; }, 3000ms));
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{quit}"}), "0") << "handed to a waiter that left";
}

// Unfair waiters (dlock_options_set_fair 0) take no place in line and are all woken by a
// release: the same lock, the old way.
TEST_F(RedisContentionTest, UnfairWaitersTakeNoPlaceInLine) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "unfair", nullptr, &held), DLOCK_OK);
  std::thread t([&] {
    Options o;
    o.wait(20000);
    ASSERT_EQ(dlock_options_set_fair(o.mutable_get(), 0), DLOCK_OK);
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(waiter.get(), "unfair", o.get(), &l), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{unfair}:line"}), "0");
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  t.join();
  Options bad;
  EXPECT_EQ(dlock_options_set_fair(bad.mutable_get(), 2), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_fair(nullptr, 1), DLOCK_EINVAL);
}

}  // namespace
}  // namespace dlock_test
