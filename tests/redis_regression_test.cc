// Regressions found in review, each once proven against a real redis-server: lease changes
// racing heartbeats, close with work in flight, stale connections at close, option extremes.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "event_loop_util.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;

struct Done {
  std::atomic<int> calls{0};
  std::atomic<int> status{-1};
  static void Fn(dlock_status s, void* arg) {
    auto* d = static_cast<Done*>(arg);
    d->status = s;
    d->calls++;
  }
};

// An extend and a heartbeat renewal of one lock must not both be out: if the server applied
// the renewal (old lease) after the extend (new lease) while the client trusted the extend, the
// lock would expire on the server while the holder still believed it valid.
void ExpectExtendRacingHeartbeatIsSafe(uint64_t new_lease) {
  RedisServer redis({"--enable-debug-command", "yes"});
  ASSERT_TRUE(redis.running());
  Client client(redis.url());
  Options opts;
  opts.lease(3000);  // heartbeat every 1000 ms (its timer fires at ~875 ms)
  dlock_lock* l = nullptr;
  auto t0 = Clock::now();
  ASSERT_EQ(dlock_acquire(client.get(), "x", opts.get(), &l), DLOCK_OK);
  // Stall the server from ~600 to ~1300 ms so that the extend (sent at ~700 ms) and the
  // renewal (due at ~875 ms) would sit in its input together.
  std::this_thread::sleep_until(t0 + 600ms);
  std::thread sleeper([&] { redis.Cli({"DEBUG", "SLEEP", "0.7"}); });
  std::this_thread::sleep_until(t0 + 700ms);
  Done d;
  ASSERT_EQ(dlock_extend_async(l, new_lease, &Done::Fn, &d), DLOCK_OK);
  sleeper.join();
  ASSERT_TRUE(WaitFor([&] { return d.calls.load() == 1; }, 5000ms));
  EXPECT_EQ(d.status.load(), DLOCK_OK);
  std::this_thread::sleep_until(t0 + 5000ms);  // past the old lease
  Client other(redis.url());
  dlock_lock* l2 = nullptr;
  dlock_status s2 = dlock_acquire(other.get(), "x", nullptr, &l2);
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  EXPECT_EQ(s2, DLOCK_NOT_ACQUIRED) << "two holders: server PTTL " << redis.Cli({"PTTL", "dlock:{x}"});
  if (new_lease == 0) {
    EXPECT_EQ(redis.Cli({"PTTL", "dlock:{x}"}), "-1");
  }
  if (l2 != nullptr) dlock_release(l2);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST(RegressionTest, ExtendRacingAHeartbeatKeepsTheServerLease) { ExpectExtendRacingHeartbeatIsSafe(60000); }

TEST(RegressionTest, ExtendToNoExpiryRacingAHeartbeatKeepsNoExpiry) { ExpectExtendRacingHeartbeatIsSafe(0); }

// (That the in-flight acquire is given back, on every backend: conformance/event_loop_test.cc.)
TEST(RegressionTest, CloseWithAnAcquireInFlightClosesEveryConnection) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  Loop loop;
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open_evbase(redis.url().c_str(), loop.base(), &c), DLOCK_OK);
  // The acquire is in flight for sure: the server holds its answer (writes paused) until the
  // client is closing.
  ASSERT_EQ(redis.Cli(RedisPauseWritesCommand()), "OK");
  AcquireResult stuck;
  const bool held = SendAcquireWhileHeld(loop, c, "stuck", nullptr, &stuck, [&] {
    return RedisPausedScripts(redis.Cli(RedisClientListCommand())) > 0;
  });
  if (held) dlock_client_close(c);
  EXPECT_EQ(redis.Cli(RedisUnpauseCommand()), "OK");
  ASSERT_TRUE(held) << "the acquire never showed as waiting on the server";
  EXPECT_TRUE(loop.Drain(10000ms)) << "the close did not finish";
  EXPECT_EQ(stuck.calls, 1);
  auto connections = [&] {  // counting the one Cli itself opens
    std::string list = redis.Cli({"CLIENT", "LIST"});
    int n = 0;
    for (size_t p = list.find("id="); p != std::string::npos; p = list.find("id=", p + 1)) ++n;
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return connections() == 1; }, 10000ms)) << redis.Cli({"CLIENT", "LIST"});
  EXPECT_TRUE(WaitFor([&] { return redis.Cli({"EXISTS", "dlock:{stuck}"}) == "0"; }, 10000ms))
      << "the acquire granted after the close was not given back";
}

TEST(RegressionTest, CloseRetriesAConnectionTheServerDroppedWhileIdle) {
  RedisServer redis({"--timeout", "1"});
  ASSERT_TRUE(redis.running());
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open(redis.url().c_str(), &c), DLOCK_OK);
  Options no_expiry;
  no_expiry.lease(0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c, "idle", no_expiry.get(), &l), DLOCK_OK);
  // The server drops the idle connections (--timeout 1: after 1 to 2 s): only redis-cli's own
  // is left.
  auto connected = [&] {
    const std::string info = redis.Cli({"INFO", "clients"});
    const size_t at = info.find("connected_clients:");
    return at == std::string::npos ? -1 : std::stoi(info.substr(at + 18));
  };
  EXPECT_TRUE(WaitFor([&] { return connected() == 1; }, 20000ms)) << redis.Cli({"CLIENT", "LIST"});
  dlock_client_close(c);
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{idle}"}), "0") << "left behind by close";
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

TEST(RegressionTest, AHugeWaitMeansNoLimit) {
  RedisServer redis;
  Client client(redis.url());
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "w", nullptr, &l), DLOCK_OK);
  Options opts;
  opts.wait(INT64_MAX);
  std::thread releaser([&] {
    // Released once the waiter waits: its first attempt refused, it is in line. (A huge wait
    // taken for none would have given up by then.)
    EXPECT_TRUE(WaitFor([&] { return redis.Cli({"ZCARD", "dlock:{w}:line"}) == "1"; }, 20000ms))
        << "the waiter never took its place in line";
    dlock_release(l);
  });
  dlock_lock* l2 = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "w", opts.get(), &l2), DLOCK_OK) << dlock_last_error();
  releaser.join();
  if (l2 != nullptr) dlock_release(l2);
}

TEST(RegressionTest, HeartbeatLongerThanAnyLeaseIsRefused) {
  Options opts;
  EXPECT_EQ(dlock_options_set_heartbeat_ms(opts.mutable_get(), UINT64_MAX), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("heartbeat_ms"), std::string::npos);
}

TEST(RegressionTest, LockHandlesOutliveAClosedEvbaseClientAndItsBase) {
  RedisServer redis;
  dlock_lock* survivor = nullptr;
  {
    Loop loop;
    dlock_client* c = nullptr;
    ASSERT_EQ(dlock_client_open_evbase(redis.url().c_str(), loop.base(), &c), DLOCK_OK);
    ASSERT_EQ(dlock_acquire_async(c, "uaf", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
      EXPECT_EQ(s, DLOCK_OK);
      *static_cast<dlock_lock**>(arg) = l;
    }, &survivor), DLOCK_OK);
    while (survivor == nullptr) event_base_loop(loop.base(), EVLOOP_ONCE);
    dlock_client_close(c);
    event_base_dispatch(loop.base());
  }  // the base is freed here; the lock handle (and through it the client) lives on
  EXPECT_EQ(dlock_release(survivor), DLOCK_NOT_HELD);  // valgrind/ASan: no touch of the base
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{uaf}"}), "0");
}

// Review finding (issue 34): every exclusive release named the value key, held value or not. It
// now names it only when its hold has a value; when the fair waiter it hands the lock to stored
// one, the script asks for the key ({3}) and the call is made again with it. The waiter gets the
// lock with its own value, in every style of release.
TEST(RegressionTest, AHoldWithoutAValueHandsItsLockToAWaiterWithOne) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "dlock_release_async" : "dlock_release");
    const std::string name = async ? "handover-async" : "handover";
    const std::string holder_key = "dlock:{" + name + "}";
    Client holder(redis.url()), waiter(redis.url());
    dlock_lock* first = nullptr;
    ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), nullptr, &first), DLOCK_OK) << dlock_last_error();
    dlock_lock* second = nullptr;
    dlock_status second_status = DLOCK_EINTERNAL;
    std::thread t([&] {
      Options o;
      o.value("second's").wait(30000).retry(20000, 30000);  // served by the hand-over, not a retry
      second_status = dlock_acquire(waiter.get(), name.c_str(), o.get(), &second);
    });
    EXPECT_TRUE(WaitFor([&] { return redis.Cli({"ZCARD", holder_key + ":line"}) == "1"; }, 20000ms))
        << "the waiter never took its place in line";
    if (async) {
      Done d;
      ASSERT_EQ(dlock_release_async(first, &Done::Fn, &d), DLOCK_OK);
      ASSERT_TRUE(WaitFor([&] { return d.calls.load() == 1; }, 5000ms));
      EXPECT_EQ(d.status.load(), DLOCK_OK);
    } else {
      EXPECT_EQ(dlock_release(first), DLOCK_OK) << dlock_last_error();
    }
    t.join();
    ASSERT_EQ(second_status, DLOCK_OK) << dlock_last_error();
    dlock_info* info = nullptr;
    ASSERT_EQ(dlock_inspect(holder.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
    ASSERT_EQ(dlock_info_holders(info), 1u);
    EXPECT_EQ(dlock_info_fencing_token(info, 0), dlock_lock_fencing_token(second));
    size_t len = 0;
    const void* value = dlock_info_value(info, 0, &len);
    EXPECT_EQ(std::string(value != nullptr ? static_cast<const char*>(value) : "", len), "second's");
    dlock_info_free(info);
    EXPECT_EQ(dlock_release(second), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(redis.Cli({"EXISTS", holder_key, holder_key + ":value", holder_key + ":line"}), "0");
  }
}

}  // namespace
}  // namespace dlock_test
