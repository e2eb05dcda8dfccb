// Heartbeats and lost-lock reporting on Redis: the ways a Redis key can be taken from its
// holder, on_lost callbacks racing release, renewals batched across a SCRIPT FLUSH. (Leases,
// heartbeats and losses on every backend are in conformance/.)
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
using Clock = std::chrono::steady_clock;

class RedisHeartbeatTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

class LostTest : public RedisHeartbeatTest {
 protected:
  // Holds "victim" with lease 10 s and heartbeat 200 ms, then runs `behind_its_back` and
  // measures how long until on_lost runs: found by a renewal, long before the 10 s deadline.
  template <typename Fn>
  void ExpectLostWithin(Fn behind_its_back, std::chrono::milliseconds limit) {
    Client client(redis_.url());
    LostRecorder lost;
    Options opts;
    opts.lease(10000).heartbeat(200).on_lost(&LostRecorder::Fn, &lost);
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(client.get(), "victim", opts.get(), &l), DLOCK_OK);
    uint64_t token = dlock_lock_fencing_token(l);
    behind_its_back();
    auto start = Clock::now();
    ASSERT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, limit + 2000ms)) << "never reported";
    auto took = Clock::now() - start;
    EXPECT_LE(took, limit) << "reported after "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    EXPECT_EQ(lost.calls.load(), 1);
    EXPECT_EQ(lost.token.load(), token);
    EXPECT_FALSE(lost.on_caller_thread.load()) << "callbacks run on the client's thread";
    EXPECT_EQ(dlock_lock_is_valid(l), 0);
    EXPECT_EQ(dlock_lock_remaining_ms(l), 0);
    EXPECT_EQ(dlock_extend(l, 1000), DLOCK_NOT_HELD);
    EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
    EXPECT_NE(std::string(dlock_last_error()).find("lost"), std::string::npos) << dlock_last_error();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(lost.calls.load(), 1) << "reported more than once";
  }
};

TEST_F(LostTest, KeyOverwrittenByAnotherOwner) {
  ExpectLostWithin([&] { redis_.Cli({"SET", "dlock:{victim}", "someone-else"}); }, 200ms + kCallBoundMs * 1ms);
}

TEST_F(LostTest, KeyReplacedWithAnotherType) {
  ExpectLostWithin([&] {
    redis_.Cli({"DEL", "dlock:{victim}"});
    redis_.Cli({"HSET", "dlock:{victim}", "a", "b"});
  }, 200ms + kCallBoundMs * 1ms);
}

TEST_F(RedisHeartbeatTest, ReleaseWaitsForARunningLostCallback) {
  Client client(redis_.url());
  struct Ctx {
    std::atomic<bool> started{false}, finished{false};
  } ctx;
  Options opts;
  opts.lease(2000).heartbeat(100).on_lost(
      [](const char*, uint64_t, void* arg) {
        auto* c = static_cast<Ctx*>(arg);
        c->started = true;
        std::this_thread::sleep_for(300ms);
        c->finished = true;
      },
      &ctx);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "slowcb", opts.get(), &l), DLOCK_OK);
  redis_.Cli({"DEL", "dlock:{slowcb}"});
  ASSERT_TRUE(WaitFor([&] { return ctx.started.load(); }, 10000ms));
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  EXPECT_TRUE(ctx.finished.load()) << "release returned while on_lost was still running";
}

TEST_F(RedisHeartbeatTest, ReleaseFromInsideTheLostCallback) {
  Client client(redis_.url());
  struct Ctx {
    dlock_lock* lock = nullptr;
    std::atomic<int> status{-1};
  } ctx;
  Options opts;
  opts.lease(2000).heartbeat(100).on_lost(
      [](const char*, uint64_t, void* arg) {
        auto* c = static_cast<Ctx*>(arg);
        c->status = dlock_release(c->lock);
      },
      &ctx);
  ASSERT_EQ(dlock_acquire(client.get(), "cb", opts.get(), &ctx.lock), DLOCK_OK);
  redis_.Cli({"DEL", "dlock:{cb}"});
  ASSERT_TRUE(WaitFor([&] { return ctx.status.load() != -1; }, 10000ms));
  EXPECT_EQ(ctx.status.load(), DLOCK_NOT_HELD);
}

// Reads one counter from INFO commandstats, e.g. Stat(info, "evalsha", "calls").
long CommandCalls(const std::string& info, const std::string& command) {
  auto pos = info.find("cmdstat_" + command + ":calls=");
  if (pos == std::string::npos) return 0;
  return std::stol(info.substr(pos + command.size() + 15));
}

TEST_F(RedisHeartbeatTest, RenewalsOfManyLocksSurviveScriptFlushWithoutAReloadStorm) {
  Client client(redis_.url());
  Options opts;
  opts.lease(1500);  // heartbeat 500 ms
  std::vector<dlock_lock*> locks;
  for (int i = 0; i < 200; ++i) {
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(client.get(), ("many-" + std::to_string(i)).c_str(), opts.get(), &l), DLOCK_OK);
    locks.push_back(l);
  }
  redis_.Cli({"CONFIG", "RESETSTAT"});
  // A heartbeat round renews all 200 (counted by the server, not by the clock)...
  auto renewals = [&] { return CommandCalls(redis_.Cli({"INFO", "commandstats"}), "evalsha"); };
  ASSERT_TRUE(WaitFor([&] { return renewals() >= 200; }, 20000ms)) << renewals() << " renewals";
  ASSERT_EQ(redis_.Cli({"SCRIPT", "FLUSH"}), "OK");
  // ...and after the flush, two more rounds' worth.
  ASSERT_TRUE(WaitFor([&] { return renewals() >= 3 * 200; }, 20000ms)) << renewals() << " renewals";
  std::string stats = redis_.Cli({"INFO", "commandstats"});
  // All 200 stayed valid...
  for (auto* l : locks) EXPECT_EQ(dlock_lock_is_valid(l), 1);
  // ...and the flushed script was loaded again once, not once per lock.
  EXPECT_LE(CommandCalls(stats, "script|load") + CommandCalls(stats, "script"), 8) << stats;
  for (auto* l : locks) EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

}  // namespace
}  // namespace dlock_test
