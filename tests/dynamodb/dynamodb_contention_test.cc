// Contention between threads and processes, and takeover of a dead holder's lock.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class DynamoContentionTest : public DynamoTest {};

TEST_F(DynamoContentionTest, ThreadsSharingOneClientNeverOverlap) {
  Client client(url());
  Options opts;
  opts.wait(-1).lease(5000).retry(5, 50);
  std::atomic<int> inside{0}, overlaps{0};
  long counter = 0;
  std::mutex tokens_mu;
  std::vector<uint64_t> tokens;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        dlock_lock* l;
        ASSERT_EQ(dlock_acquire(client.get(), "shared", opts.get(), &l), DLOCK_OK) << dlock_last_error();
        if (inside.fetch_add(1) != 0) overlaps++;
        long v = counter;
        std::this_thread::sleep_for(1ms);
        counter = v + 1;
        {
          std::lock_guard<std::mutex> lock(tokens_mu);
          tokens.push_back(dlock_lock_fencing_token(l));
        }
        inside.fetch_sub(1);
        ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 60);
  ASSERT_EQ(tokens.size(), 60u);
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end())) << "tokens follow the order of holding";
  EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end()) << "strictly rising";
}

TEST_F(DynamoContentionTest, ProcessesIncrementACounterWithoutLostUpdates) {
  char dir_template[] = "/tmp/dlock-ddb-counter-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string file = std::string(dir_template) + "/tokens";
  constexpr int kWorkers = 3, kEach = 15;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(std::make_unique<Worker>(
        std::vector<std::string>{url(), "counter", "increment", std::to_string(kEach), file}));
  }
  for (auto& w : workers) EXPECT_EQ(w->Wait(), 0);
  std::ifstream count(file + ".count");
  long value = 0;
  count >> value;
  EXPECT_EQ(value, kWorkers * kEach) << "an update was lost: the lock let two holders in";
  std::ifstream log(file);
  std::vector<uint64_t> tokens;
  for (uint64_t t; log >> t;) tokens.push_back(t);
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kWorkers * kEach));
  for (size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << "at " << i;
  std::filesystem::remove_all(dir_template);
}

TEST_F(DynamoContentionTest, DeadHoldersLockIsTakenOverAfterAWholeLease) {
  Worker holder({url(), "victim", "hold", "1200"});
  uint64_t victim_token = holder.AwaitAcquired();
  ASSERT_GT(victim_token, 0u);
  // Alive, it heartbeats: a waiter cannot take over even after two leases.
  Client waiter(url());
  Options brief;
  brief.wait(2400).retry(50, 200);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(waiter.get(), "victim", brief.get(), &l), DLOCK_NOT_ACQUIRED);
  holder.Kill();
  auto killed = Clock::now();
  Options patient;
  patient.wait(10000).retry(50, 200);
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(waiter.get(), "victim", patient.get(), &l), DLOCK_OK) << dlock_last_error();
  // A whole lease of unchanged recordVersion on the waiter's clock, counted from its first
  // look after the holder's last heartbeat.
  EXPECT_GE(ElapsedMs(start), 1100);
  EXPECT_LT(ElapsedMs(killed), 4000);
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoContentionTest, TrustLocalTimeTakesOverWhenTheStoredLeaseRunsOut) {
  Worker holder({url(), "trusted", "hold", "3000"});
  uint64_t victim_token = holder.AwaitAcquired();
  ASSERT_GT(victim_token, 0u);
  holder.Kill();
  std::this_thread::sleep_for(1500ms);  // the holder's last write is 1.5 to 2.5 s old by now
  Client waiter(url("trust_local_time=1"));
  Options patient;
  patient.wait(10000).retry(50, 200);
  auto start = Clock::now();
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(waiter.get(), "trusted", patient.get(), &l), DLOCK_OK) << dlock_last_error();
  // renewedAtMs + leaseMs is at most 1.5 s away; without trust_local_time it would be 3 s.
  EXPECT_LT(ElapsedMs(start), 2300);
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoContentionTest, WaiterWakesWhenTheHoldersLeaseMayHaveRunOut) {
  Client holder(url()), waiter(url());
  Options short_lease;
  short_lease.lease(600).heartbeat(0);
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "expiring", short_lease.get(), &held), DLOCK_OK);
  Options opts;
  opts.wait(20000).retry(5000, 10000);  // only the holder's lease can wake the waiter early
  auto start = Clock::now();
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(waiter.get(), "expiring", opts.get(), &l), DLOCK_OK) << dlock_last_error();
  int64_t waited = ElapsedMs(start);
  EXPECT_GE(waited, 550);
  EXPECT_LT(waited, 2500);
  EXPECT_LE(dlock_lock_attempts(l), 3u) << "waiting costs a few attempts, not a poll loop";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(held), DLOCK_NOT_HELD);
}

}  // namespace
}  // namespace dlock_test
