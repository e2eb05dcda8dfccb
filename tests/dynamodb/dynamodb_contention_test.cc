// Takeover of a dead holder's lock the DynamoDB way: by its recordVersion standing unchanged for
// a whole lease, or (trust_local_time=1) by the stored lease running out on the wall clock.
// (Contention and takeover on every backend are in conformance/.)
#include <chrono>
#include <thread>

#include "ddb_test_util.h"
#include "worker_process.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class DynamoContentionTest : public DynamoTest {};

TEST_F(DynamoContentionTest, DeadHoldersLockIsTakenOverAfterAWholeLease) {
  auto holder = StartWorker({url(), "victim", "hold", "1200"});
  uint64_t victim_token = AwaitAcquired(*holder);
  ASSERT_GT(victim_token, 0u) << holder->output();
  // Alive, it heartbeats: a waiter cannot take over even after two leases.
  Client waiter(url());
  Options brief;
  brief.wait(2400).retry(50, 200);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(waiter.get(), "victim", brief.get(), &l), DLOCK_NOT_ACQUIRED);
  holder->Kill();
  auto killed = Clock::now();
  // A client that first looks after the crash: it takes over once it has seen the same
  // recordVersion for a whole lease on its own clock. (The waiter above already saw the last
  // heartbeat while the holder lived, so its whole lease may have begun before the kill.)
  Client latecomer(url());
  Options patient;
  patient.wait(10000).retry(50, 200);
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(latecomer.get(), "victim", patient.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 1200 - 5);  // - 5: the lease is measured from the read's send
  EXPECT_LT(ElapsedMs(killed), 4000);
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoContentionTest, TrustLocalTimeTakesOverWhenTheStoredLeaseRunsOut) {
  auto holder = StartWorker({url(), "trusted", "hold", "3000"});
  uint64_t victim_token = AwaitAcquired(*holder);
  ASSERT_GT(victim_token, 0u) << holder->output();
  holder->Kill();
  // Its stored lease runs out at renewedAtMs + leaseMs on the wall clock: the waiter starts
  // half a second before that, whenever the holder last wrote.
  const nlohmann::json item = Item("trusted");
  const int64_t ends_at = static_cast<int64_t>(N(item, "renewedAtMs") + N(item, "leaseMs"));
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  if (ends_at - 500 > now_ms) std::this_thread::sleep_for(std::chrono::milliseconds(ends_at - 500 - now_ms));
  Client waiter(url("trust_local_time=1"));
  Options patient;
  patient.wait(10000).retry(50, 200);
  auto start = Clock::now();
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(waiter.get(), "trusted", patient.get(), &l), DLOCK_OK) << dlock_last_error();
  // renewedAtMs + leaseMs is at most 0.5 s away; without trust_local_time it would be 3 s.
  EXPECT_LT(ElapsedMs(start), 2300);
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

}  // namespace
}  // namespace dlock_test
