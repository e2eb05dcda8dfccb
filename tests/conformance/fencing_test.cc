// Mutual exclusion and fencing tokens: tokens strictly rising across release, expiry and
// takeover; threads of one client and separate processes never inside at once (no lost update
// to a shared counter); a killed holder taken over once its lease ran out.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "conformance/conformance.h"
#include "worker_process.h"

namespace dlock_test {
namespace {

class Fencing : public BackendTest {};

void ExpectStrictlyRising(const std::vector<uint64_t>& tokens) {
  for (size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_GT(tokens[i], tokens[i - 1]) << "token " << i << " of " << tokens.size();
  }
}

TEST_P(Fencing, TokensRiseAcrossReleaseExpiryAndTakeover) {
  Client a(url()), b(url());
  const std::string name = Name("t");
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 10; ++i) {  // released, then taken by the other client
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire((i % 2 ? a : b).get(), name.c_str(), nullptr, &l), DLOCK_OK)
        << dlock_last_error();
    tokens.push_back(dlock_lock_fencing_token(l));
    ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  }
  // a holds it without renewals; it expires and b takes it over.
  Options brief, patient;
  brief.lease(300).heartbeat(0);
  patient.wait(20000);  // its lease, and etcd's whole seconds after it
  dlock_lock *expired = nullptr, *taker = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), name.c_str(), brief.get(), &expired), DLOCK_OK) << dlock_last_error();
  tokens.push_back(dlock_lock_fencing_token(expired));
  ASSERT_EQ(dlock_acquire(b.get(), name.c_str(), patient.get(), &taker), DLOCK_OK) << dlock_last_error();
  tokens.push_back(dlock_lock_fencing_token(taker));
  EXPECT_EQ(dlock_release(expired), DLOCK_NOT_HELD);
  ASSERT_EQ(dlock_release(taker), DLOCK_OK) << dlock_last_error();
  dlock_lock* after = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), name.c_str(), nullptr, &after), DLOCK_OK) << dlock_last_error();
  tokens.push_back(dlock_lock_fencing_token(after));
  EXPECT_EQ(dlock_release(after), DLOCK_OK) << dlock_last_error();
  ExpectStrictlyRising(tokens);
}

TEST_P(Fencing, ThreadsSharingOneClientNeverOverlap) {
  Client client(url());
  const std::string name = Name("shared");
  Options opts;
  opts.wait(-1).lease(5000).retry(5, 50);  // a short retry for backends without notifications
  std::atomic<int> inside{0}, overlaps{0};
  long counter = 0;  // protected by the lock alone
  std::mutex tokens_mu;
  std::vector<uint64_t> tokens;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        dlock_lock* l = nullptr;
        ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), opts.get(), &l), DLOCK_OK) << dlock_last_error();
        if (inside.fetch_add(1) != 0) overlaps++;
        long v = counter;
        std::this_thread::sleep_for(1ms);  // widen the window an overlap would need
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
  ExpectStrictlyRising(tokens);  // in the order the lock was held
}

TEST_P(Fencing, ProcessesIncrementingOneCounterLoseNoUpdate) {
  char dir[] = "/tmp/dlock-conformance-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/tokens";  // the counter is log + ".count"
  constexpr int kProcesses = 4, kEach = 20;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int p = 0; p < kProcesses; ++p) {
    workers.push_back(StartWorker({url(), Name("counter"), "increment", std::to_string(kEach), log}));
  }
  for (auto& w : workers) EXPECT_EQ(w->Wait(120s), 0) << w->output();
  long count = 0;
  std::ifstream(log + ".count") >> count;
  EXPECT_EQ(count, kProcesses * kEach) << "an update was lost: two processes held the lock at once";
  std::ifstream tokens_file(log);
  std::vector<uint64_t> tokens;
  for (uint64_t t; tokens_file >> t;) tokens.push_back(t);
  EXPECT_EQ(tokens.size(), static_cast<size_t>(kProcesses * kEach));
  ExpectStrictlyRising(tokens);  // in the order the workers held the lock
  std::filesystem::remove_all(dir);
}

TEST_P(Fencing, KilledHolderIsTakenOverOnceItsLeaseRanOut) {
  const std::string name = Name("victim");
  constexpr int kLeaseMs = 600;
  auto holder = StartWorker({url(), name, "hold", std::to_string(kLeaseMs), "doomed-worker"});
  const uint64_t victim_token = AwaitAcquired(*holder);
  ASSERT_GT(victim_token, 0u) << holder->output();
  Client waiter(url());
  Snapshot held = Inspect(waiter.get(), name);
  ASSERT_EQ(held.holders.size(), 1u) << held;
  EXPECT_EQ(held.holders[0].owner, "doomed-worker");
  EXPECT_EQ(held.holders[0].token, Shown(victim_token));

  // Alive, it renews its lease: a waiter gets nothing, however many leases go by.
  Options brief;
  brief.wait(2 * kLeaseMs + 300).retry(50, 200);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(waiter.get(), name.c_str(), brief.get(), &l), DLOCK_NOT_ACQUIRED);

  // What is left of its lease, as the server shows it just before the kill: nobody may take it
  // before that ran out.
  const auto inspected_at = Clock::now();
  const int64_t left = LeaseLeft(Inspect(waiter.get(), name));
  holder->Kill();  // SIGKILL: no release, no more renewals
  const auto killed_at = Clock::now();
  Options patient;
  patient.wait(20000).retry(50, 200);
  ASSERT_EQ(dlock_acquire(waiter.get(), name.c_str(), patient.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(MsSince(inspected_at), left)
      << "taken before the dead holder's lease, as the server showed it, could have run out";
  EXPECT_LT(MsSince(killed_at), kTakeoverBoundMs(kLeaseMs)) << "taken over long after the dead holder's lease";
  EXPECT_GT(dlock_lock_fencing_token(l), victim_token);
  Snapshot taken = Inspect(waiter.get(), name);
  ASSERT_EQ(taken.holders.size(), 1u) << taken;
  EXPECT_EQ(taken.holders[0].token, Shown(dlock_lock_fencing_token(l)));
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

INSTANTIATE_TEST_SUITE_P(Conformance, Fencing, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
