// Concurrent callers on the Redis backend (contention and waiting on every backend are in
// conformance/).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <functional>
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
  // Scripts the server ran since its stats were last reset (INFO commandstats).
  long ScriptCalls() {
    const std::string stats = redis_.Cli({"INFO", "commandstats"});
    long n = 0;
    for (const char* command : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
      const size_t at = stats.find(command);
      if (at != std::string::npos) n += std::stol(stats.substr(at + strlen(command)));
    }
    return n;
  }
  RedisServer redis_;
};

TEST_F(RedisContentionTest, ThreadsDoNotSerializeOnOneConnection) {
  // Threads calling at once must not queue behind one blocking connection: the server sees
  // several connections from this one client while six threads acquire and release. The
  // threads meet at a barrier before each round of calls, and the rounds go on until the
  // server shows the connections (a client with one connection never does, and fails here).
  Client client(redis_.url());
  auto connected = [&] {
    const std::string info = redis_.Cli({"INFO", "clients"});
    return std::stoi(info.substr(info.find("connected_clients:") + 18));
  };
  const int before = connected();
  constexpr int kThreads = 6;
  std::atomic<int> ok{0}, calls{0};
  std::atomic<bool> seen{false};
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  std::barrier round(kThreads, [&]() noexcept {
    // Between rounds, while every thread waits: enough connections, or 30 s of rounds, ends it.
    if (connected() - before >= 2 || std::chrono::steady_clock::now() > give_up) seen = true;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !seen; ++i) {
        for (int k = 0; k < 5; ++k) {
          dlock_lock* l;
          std::string name = "par-" + std::to_string(t) + "-" + std::to_string(i) + "-" + std::to_string(k);
          calls++;
          if (dlock_acquire(client.get(), name.c_str(), nullptr, &l) == DLOCK_OK &&
              dlock_release(l) == DLOCK_OK) {
            ok++;
          }
        }
        round.arrive_and_wait();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), calls.load()) << "every acquire and release succeeded";
  EXPECT_GE(connected() - before, 2) << "concurrent callers should have used several connections";
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
  // The waiter takes its place behind the lapsed one.
  EXPECT_TRUE(WaitFor([&] { return redis_.Cli({"ZCARD", "dlock:{skip}:line"}) == "2"; }, 20000ms))
      << redis_.Cli({"ZCARD", "dlock:{skip}:line"}) << " in line";
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  // Its retries are 20 s apart: only the release, skipping the lapsed place, serves it sooner.
  EXPECT_TRUE(WaitFor([&] { return got.load(); }, 10000ms)) << "the lapsed place held up the line";
  t.join();
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{skip}", "dlock:{skip}:line", "dlock:{skip}:linedata"}), "0");
}

// A grant on the lock's channel ("grant:ID:TOKEN") is a claim anyone who may PUBLISH there can
// make, and a waiter's id can be read from the line. The waiter confirms it with the server
// before it returns: a forged grant while another holds the lock changes nothing, and the real
// hand-over, when the holder releases, still serves it. Blocking and async waiters alike (in
// RedisContentionTest, so that the TSan set runs them too).
void ForgedGrantIsConfirmedWithTheServer(RedisServer& redis_, const std::function<long()>& ScriptCalls, bool async) {
  // Declared before the clients: closing the waiter's client cancels an async acquire, whose
  // callback writes here.
  struct Outcome {
    std::atomic<bool> done{false};
    dlock_status status = DLOCK_EINTERNAL;
    dlock_lock* lock = nullptr;
  } got;
  Client holder(redis_.url()), waiter(redis_.url());
  Options hold;
  hold.lease(60000).heartbeat(0);  // no renewals: the holder runs no script meanwhile
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "forged", hold.get(), &held), DLOCK_OK) << dlock_last_error();
  const uint64_t holder_token = dlock_lock_fencing_token(held);

  Options o;
  o.wait(60000).retry(20000, 30000).lease(60000);  // its own retries seconds apart
  std::thread blocking;
  struct Joiner {  // an ASSERT that returns early must not leave the thread joinable
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{blocking};
  if (async) {
    ASSERT_EQ(dlock_acquire_async(
                  waiter.get(), "forged", o.get(),
                  [](dlock_status s, dlock_lock* l, void* arg) {
                    auto* out = static_cast<Outcome*>(arg);
                    out->status = s;
                    out->lock = l;
                    out->done = true;
                  },
                  &got),
              DLOCK_OK);
  } else {
    blocking = std::thread([&] {
      got.status = dlock_acquire(waiter.get(), "forged", o.get(), &got.lock);
      got.done = true;
    });
  }
  // In line (its first attempt refused) and listening.
  ASSERT_TRUE(WaitFor([&] { return redis_.Cli({"ZCARD", "dlock:{forged}:line"}) == "1"; }, 20000ms));
  ASSERT_TRUE(WaitFor([&] {
    return redis_.Cli({"PUBSUB", "NUMSUB", "dlock:{forged}:released"}) == "dlock:{forged}:released\n1";
  }, 20000ms));
  const std::string id = redis_.Cli({"ZRANGE", "dlock:{forged}:line", "0", "0"});
  ASSERT_EQ(id.size(), 16u) << id;
  ASSERT_EQ(redis_.Cli({"CONFIG", "RESETSTAT"}), "OK");
  EXPECT_EQ(redis_.Cli({"PUBLISH", "dlock:{forged}:released", "grant:" + id + ":" + std::to_string(holder_token + 1)}),
            "1");
  // The waiter asks the server (a script call), which refuses it: the holder still holds.
  EXPECT_TRUE(WaitFor([&] { return got.done.load() || ScriptCalls() >= 1; }, 20000ms));
  EXPECT_FALSE(got.done.load()) << "returned " << dlock_status_str(got.status)
                                << " on a forged grant while another owner holds the lock";
  EXPECT_EQ(dlock_lock_is_valid(held), 1);
  EXPECT_EQ(redis_.Cli({"ZCARD", "dlock:{forged}:line"}), "1") << "the waiter left the line";

  // The real hand-over serves it.
  ASSERT_EQ(dlock_release(held), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(WaitFor([&] { return got.done.load(); }, 20000ms)) << "the real hand-over did not serve it";
  if (blocking.joinable()) blocking.join();
  ASSERT_EQ(got.status, DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(got.lock), holder_token);
  // Its first try, and one more if it was not listening yet when that one left: the two
  // confirmations are not tries.
  EXPECT_LE(dlock_lock_attempts(got.lock), 2u) << "a confirmation is not a try";
  EXPECT_EQ(dlock_release(got.lock), DLOCK_OK) << dlock_last_error();
}

TEST_F(RedisContentionTest, AForgedGrantDoesNotMakeABlockingWaiterAHolder) {
  ForgedGrantIsConfirmedWithTheServer(redis_, [this] { return ScriptCalls(); }, false);
}

TEST_F(RedisContentionTest, AForgedGrantDoesNotMakeAnAsyncWaiterAHolder) {
  ForgedGrantIsConfirmedWithTheServer(redis_, [this] { return ScriptCalls(); }, true);
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
  EXPECT_TRUE(WaitFor([&] { return redis_.Cli({"EXISTS", "dlock:{quit}:line"}) == "0"; }, 10000ms));
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{quit}"}), "0") << "handed to a waiter that left";
}

// Unfair waiters (dlock_options_set_fair 0) take no place in line and are all woken by a
// release: the same lock, the old way.
TEST_F(RedisContentionTest, UnfairWaitersTakeNoPlaceInLine) {
  Client holder(redis_.url()), waiter(redis_.url());
  dlock_lock* held;
  Options no_heartbeats;
  no_heartbeats.lease(0);  // no renewals: every script after the reset is the waiter's
  ASSERT_EQ(dlock_acquire(holder.get(), "unfair", no_heartbeats.get(), &held), DLOCK_OK);
  redis_.Cli({"CONFIG", "RESETSTAT"});
  std::thread t([&] {
    Options o;
    o.wait(20000);
    ASSERT_EQ(dlock_options_set_fair(o.mutable_get(), 0), DLOCK_OK);
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(waiter.get(), "unfair", o.get(), &l), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  });
  // Its first attempt refused (the only script run since the reset), it waits: a fair waiter
  // would be in line by now.
  EXPECT_TRUE(WaitFor([&] { return ScriptCalls() >= 1; }, 20000ms)) << "the waiter never tried";
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{unfair}:line"}), "0");
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  t.join();
  Options bad;
  EXPECT_EQ(dlock_options_set_fair(bad.mutable_get(), 2), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_fair(nullptr, 1), DLOCK_EINVAL);
}

}  // namespace
}  // namespace dlock_test
