// Contention between threads of one client and between processes, and the waiting policy.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.h"
#include "test_util.h"

extern char** environ;

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;

class RedisContentionTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisContentionTest, ThreadsSharingOneClientNeverOverlap) {
  Client client(redis_.url());
  Options opts;
  opts.wait(-1).lease(5000);
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  long counter = 0;  // unprotected but for the lock
  std::vector<uint64_t> tokens;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        dlock_lock* l;
        ASSERT_EQ(dlock_acquire(client.get(), "shared", opts.get(), &l), DLOCK_OK) << dlock_last_error();
        if (inside.fetch_add(1) != 0) overlaps++;
        long v = counter;
        std::this_thread::yield();
        counter = v + 1;
        tokens.push_back(dlock_lock_fencing_token(l));
        inside.fetch_sub(1);
        ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 400);
  ASSERT_EQ(tokens.size(), 400u);
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
  EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end());  // strictly rising
}

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

TEST_F(RedisContentionTest, WaiterWakesOnReleaseNotOnRetryTimer) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "handoff", nullptr, &held), DLOCK_OK);
  // A fallback retry of 5-10 s: only the pub/sub wake-up can make the handoff quick.
  Options opts;
  opts.wait(20000).retry(5000, 10000);
  std::atomic<int64_t> waited_ms{-1};
  std::atomic<uint32_t> attempts{0};
  std::thread t([&] {
    dlock_lock* l;
    auto start = Clock::now();
    ASSERT_EQ(dlock_acquire(waiter.get(), "handoff", opts.get(), &l), DLOCK_OK) << dlock_last_error();
    waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    attempts = dlock_lock_attempts(l);
    dlock_release(l);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto released_at = Clock::now();
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  t.join();
  auto since_release = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released_at).count();
  EXPECT_LT(since_release, 2000) << "the waiter slept through the release";
  EXPECT_GE(waited_ms.load(), 250);
  EXPECT_GE(attempts.load(), 2u);
  EXPECT_LE(attempts.load(), 4u) << "waiting should cost a few attempts, not a poll loop";
}

TEST_F(RedisContentionTest, WaiterWakesWhenTheHoldersLeaseRunsOut) {
  Client holder(redis_.url()), waiter(redis_.url());
  Options short_lease;
  short_lease.lease(400).heartbeat(0);
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "expiring", short_lease.get(), &held), DLOCK_OK);
  Options opts;
  opts.wait(20000).retry(5000, 10000);  // only the holder's remaining lease can wake us early
  auto start = Clock::now();
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(waiter.get(), "expiring", opts.get(), &l), DLOCK_OK) << dlock_last_error();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_GE(waited, 300);
  EXPECT_LT(waited, 2500);
  EXPECT_LE(dlock_lock_attempts(l), 4u);
  dlock_release(l);
  EXPECT_EQ(dlock_release(held), DLOCK_NOT_HELD);
}

TEST_F(RedisContentionTest, WaitLimitsAreExact) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK);
  dlock_lock* l = nullptr;
  // wait 0: one try, no waiting.
  auto start = Clock::now();
  EXPECT_EQ(dlock_acquire(waiter.get(), "busy", nullptr, &l), DLOCK_NOT_ACQUIRED);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(200));
  // wait N: gives up after about N.
  Options opts;
  opts.wait(300);
  start = Clock::now();
  EXPECT_EQ(dlock_acquire(waiter.get(), "busy", opts.get(), &l), DLOCK_NOT_ACQUIRED);
  auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  EXPECT_NE(std::string(dlock_last_error()).find("attempts"), std::string::npos) << dlock_last_error();
  // wait -1: until it is free, however long.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    dlock_release(held);
  });
  Options forever;
  forever.wait(-1);
  EXPECT_EQ(dlock_acquire(waiter.get(), "busy", forever.get(), &l), DLOCK_OK);
  releaser.join();
  dlock_release(l);
}

TEST_F(RedisContentionTest, ProcessesIncrementingOneCounterLoseNothing) {
  char dir_template[] = "/tmp/dlock-count-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string log = std::string(dir_template) + "/tokens";
  const int kProcesses = 4, kEach = 50;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    std::vector<std::string> args{DLOCK_TEST_WORKER, redis_.url(), "counter", "increment",
                                  std::to_string(kEach), log};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker failed";
  }
  std::ifstream count_file(log + ".count");
  long count = 0;
  count_file >> count;
  EXPECT_EQ(count, kProcesses * kEach);
  std::ifstream tokens_file(log);
  std::vector<uint64_t> tokens;
  for (uint64_t t; tokens_file >> t;) tokens.push_back(t);
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kProcesses * kEach));
  for (size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_GT(tokens[i], tokens[i - 1]) << "token order broken at " << i;
  }
  std::system(("rm -rf " + std::string(dir_template)).c_str());
}

}  // namespace
}  // namespace dlock_test
