// Leases, heartbeats and lost-lock reporting (README, Guarantees, 3 and 4).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "support/redis_server.h"
#include "test_util.h"

extern char** environ;

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class RedisHeartbeatTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisHeartbeatTest, HeartbeatingHolderKeepsItsLockWellPastItsLease) {
  Client client(redis_.url());
  Options opts;
  opts.lease(300);  // heartbeat every 100 ms by default
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "kept", opts.get(), &l), DLOCK_OK);
  std::this_thread::sleep_for(1500ms);  // five leases
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  EXPECT_GT(dlock_lock_remaining_ms(l), 0);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{kept}"}), "1");
  Client other(redis_.url());
  dlock_lock* o;
  EXPECT_EQ(dlock_acquire(other.get(), "kept", nullptr, &o), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(RedisHeartbeatTest, WithoutHeartbeatsTheLeaseRunsOut) {
  Client client(redis_.url());
  Options opts;
  opts.lease(200).heartbeat(0);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "brief", opts.get(), &l), DLOCK_OK);
  EXPECT_TRUE(WaitFor([&] { return dlock_lock_is_valid(l) == 0; }, 1000ms));
  EXPECT_EQ(dlock_lock_remaining_ms(l), 0);
  EXPECT_TRUE(WaitFor([&] { return redis_.Cli({"EXISTS", "dlock:{brief}"}) == "0"; }, 1000ms));
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

TEST_F(RedisHeartbeatTest, LeaseOfAKilledHolderExpiresAndTheTokenRises) {
  std::vector<std::string> args{DLOCK_TEST_WORKER, redis_.url(), "victim", "hold", "600"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  FILE* from_worker = fdopen(out[0], "r");
  unsigned long long victim_token = 0;
  ASSERT_EQ(fscanf(from_worker, "ACQUIRED %llu", &victim_token), 1);
  fclose(from_worker);
  // Alive, it heartbeats: the lock outlives its 600 ms lease.
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{victim}"}), "1");
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto killed = Clock::now();
  Client client(redis_.url());
  Options opts;
  opts.wait(5000);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "victim", opts.get(), &l), DLOCK_OK) << dlock_last_error();
  auto waited = Clock::now() - killed;
  EXPECT_LT(waited, 1500ms) << "took over long after the dead holder's lease";
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  dlock_release(l);
}

class LostTest : public RedisHeartbeatTest {
 protected:
  // Holds "victim" with lease 3000 and heartbeat 200, then runs `behind_its_back` and measures
  // how long until on_lost runs.
  template <typename Fn>
  void ExpectLostWithin(Fn behind_its_back, std::chrono::milliseconds limit) {
    Client client(redis_.url());
    LostRecorder lost;
    Options opts;
    opts.lease(3000).heartbeat(200).on_lost(&LostRecorder::Fn, &lost);
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

TEST_F(LostTest, KeyDeletedBehindTheHoldersBack) {
  ExpectLostWithin([&] { redis_.Cli({"DEL", "dlock:{victim}"}); }, 300ms);
}

TEST_F(LostTest, KeyOverwrittenByAnotherOwner) {
  ExpectLostWithin([&] { redis_.Cli({"SET", "dlock:{victim}", "someone-else"}); }, 300ms);
}

TEST_F(LostTest, KeyReplacedWithAnotherType) {
  ExpectLostWithin([&] {
    redis_.Cli({"DEL", "dlock:{victim}"});
    redis_.Cli({"HSET", "dlock:{victim}", "a", "b"});
  }, 300ms);
}

TEST_F(LostTest, RedisKilledLosesTheLockByItsLocalDeadline) {
  // A dead server is a transient error (it may come back with the key): renewals are retried
  // until the local deadline, lease - drift after the last successful renewal, so at most
  // 3000 ms after the kill; then the lock is lost and reported.
  ExpectLostWithin([&] { redis_.Kill(); }, 3200ms);
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
  ASSERT_TRUE(WaitFor([&] { return ctx.started.load(); }, 2000ms));
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
  ASSERT_TRUE(WaitFor([&] { return ctx.status.load() != -1; }, 2000ms));
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
  std::this_thread::sleep_for(700ms);  // one heartbeat round
  ASSERT_EQ(redis_.Cli({"SCRIPT", "FLUSH"}), "OK");
  std::this_thread::sleep_for(1100ms);  // two more
  std::string stats = redis_.Cli({"INFO", "commandstats"});
  // Every lock was renewed in every round, and all 200 stayed valid...
  EXPECT_GE(CommandCalls(stats, "evalsha"), 3 * 200) << stats;
  for (auto* l : locks) EXPECT_EQ(dlock_lock_is_valid(l), 1);
  // ...and the flushed script was loaded again once, not once per lock.
  EXPECT_LE(CommandCalls(stats, "script|load") + CommandCalls(stats, "script"), 8) << stats;
  for (auto* l : locks) EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

}  // namespace
}  // namespace dlock_test
