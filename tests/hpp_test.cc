// dlock.hpp, the header-only C++ layer, against a real redis-server.
#include "dlock/dlock.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include <gtest/gtest.h>

#include "support/redis_server.h"

namespace {

using namespace std::chrono_literals;
using dlock_test::RedisServer;

static_assert(!std::is_copy_constructible_v<dlock::Lock> && !std::is_copy_assignable_v<dlock::Lock>);
static_assert(!std::is_copy_constructible_v<dlock::Client> && !std::is_copy_assignable_v<dlock::Client>);
static_assert(std::is_nothrow_move_constructible_v<dlock::Lock> &&
              std::is_nothrow_move_assignable_v<dlock::Lock>);
static_assert(std::is_nothrow_move_constructible_v<dlock::Client> &&
              std::is_nothrow_move_assignable_v<dlock::Client>);
static_assert(std::is_base_of_v<std::runtime_error, dlock::Error>);
static_assert(!std::is_convertible_v<dlock::Lock, bool>, "operator bool must be explicit");

// Runs f, which must throw dlock::Error; returns its code (DLOCK_OK if nothing was thrown).
template <typename F>
dlock_status CodeOf(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const dlock::Error& e) {
    if (message) *message = e.message();
    return e.code();
  }
  return DLOCK_OK;
}

class HppTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.running()); }
  std::string Key(const std::string& name) { return "dlock:{" + name + "}"; }

  RedisServer redis_;
};

TEST_F(HppTest, AcquireAndRelease) {
  dlock::Client client(redis_.url());
  EXPECT_TRUE(client);
  dlock::Lock lock = client.acquire("orders", dlock::Options().lease(5s).owner("hpp-test"));
  ASSERT_TRUE(lock);
  EXPECT_EQ(lock.name(), "orders");
  EXPECT_GT(lock.fencing_token(), 0u);
  EXPECT_TRUE(lock.valid());
  EXPECT_GT(lock.remaining(), 0ms);
  EXPECT_LE(lock.remaining(), 5000ms);
  EXPECT_EQ(lock.attempts(), 1u);
  EXPECT_NE(lock.native_handle(), nullptr);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("orders")}), "1");
  EXPECT_NE(redis_.Cli({"GET", Key("orders")}).find("hpp-test"), std::string::npos);

  lock.release();
  EXPECT_FALSE(lock);
  EXPECT_FALSE(lock.valid());
  EXPECT_EQ(lock.fencing_token(), 0u);
  EXPECT_EQ(lock.name(), "");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("orders")}), "0");
  // Releasing an empty Lock is an error, not a crash.
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_EINVAL);
  EXPECT_EQ(lock.release(std::nothrow), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { lock.extend(1s); }), DLOCK_EINVAL);
}

TEST_F(HppTest, InspectShowsTheHolderThenFree) {
  dlock::Client holder(redis_.url());
  dlock::Client observer(redis_.url());
  dlock::Lock lock = holder.acquire("hpp/inspect", dlock::Options().lease(5s).owner("hpp-owner"));
  dlock::Info info = observer.inspect("hpp/inspect");
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.kind, DLOCK_EXCLUSIVE);
  EXPECT_EQ(info.holders[0].owner, "hpp-owner");
  EXPECT_EQ(info.holders[0].fencing_token, lock.fencing_token());
  ASSERT_TRUE(info.holders[0].remaining.has_value());
  EXPECT_GT(info.holders[0].remaining->count(), 0);
  EXPECT_LE(info.holders[0].remaining->count(), 5000);
  lock.release();
  EXPECT_TRUE(observer.inspect("hpp/inspect").is_free());

  dlock::Lock forever = holder.acquire("hpp/inspect", dlock::Options().no_expiry());
  info = observer.inspect("hpp/inspect");
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_FALSE(info.holders[0].remaining.has_value());
  EXPECT_EQ(info.holders[0].owner, "");
  EXPECT_EQ(CodeOf([&] { observer.inspect(""); }), DLOCK_EINVAL);
}

TEST_F(HppTest, SharedHoldsAndPermitsThroughTheWrapper) {
  dlock::Client client(redis_.url()), observer(redis_.url());
  EXPECT_EQ(client.capabilities() & (DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS),
            DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS);
  dlock::Lock r1 = client.acquire("hpp/kinds", dlock::Options().shared().owner("r1"));
  dlock::Lock r2 = observer.acquire("hpp/kinds", dlock::Options().shared().owner("r2"));
  EXPECT_GT(r2.fencing_token(), r1.fencing_token());
  dlock::Info info = observer.inspect("hpp/kinds");
  EXPECT_EQ(info.kind, DLOCK_SHARED);
  EXPECT_EQ(info.permits, 0u);
  EXPECT_EQ(info.holders.size(), 2u);
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire("hpp/kinds", dlock::Options().permits(3)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("a lock"), std::string::npos) << message;
  dlock::Client writer(redis_.url());
  EXPECT_FALSE(writer.try_acquire("hpp/kinds"));  // no exclusive hold beside readers
  // No upgrade: the reader's own exclusive acquire would wait for itself.
  EXPECT_EQ(CodeOf([&] { observer.try_acquire("hpp/kinds"); }), DLOCK_EINVAL);
  r1.release();
  r2.release();
  dlock::Lock permit = client.acquire("hpp/kinds", dlock::Options().permits(3));
  info = observer.inspect("hpp/kinds");
  EXPECT_EQ(info.kind, DLOCK_EXCLUSIVE);
  EXPECT_EQ(info.permits, 3u);
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].fencing_token, permit.fencing_token());
}

TEST_F(HppTest, TokensIncreaseAcrossAcquisitions) {
  dlock::Client client(redis_.url());
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    dlock::Lock lock = client.acquire("counter");
    EXPECT_GT(lock.fencing_token(), last);
    last = lock.fencing_token();
  }
}

TEST_F(HppTest, MoveSemantics) {
  dlock::Client client(redis_.url());
  dlock::Lock a = client.acquire("move-a");
  const uint64_t token = a.fencing_token();

  dlock::Lock b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is documented as empty
  EXPECT_EQ(a.fencing_token(), 0u);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.fencing_token(), token);
  EXPECT_EQ(b.name(), "move-a");

  // Move-assigning over a held lock releases the old one.
  dlock::Lock c = client.acquire("move-c");
  ASSERT_EQ(redis_.Cli({"EXISTS", Key("move-c")}), "1");
  c = std::move(b);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("move-c")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("move-a")}), "1");
  EXPECT_EQ(c.fencing_token(), token);
  c = std::move(c);  // self-move leaves it alone
  EXPECT_EQ(c.fencing_token(), token);

  // Clients move too; the moved-from one is empty and refuses to acquire.
  dlock::Client other(std::move(client));
  EXPECT_FALSE(client);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(CodeOf([&] { client.acquire("x"); }), DLOCK_EINVAL);
  dlock::Lock d = other.acquire("move-d");
  EXPECT_TRUE(d);
  c.release();
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("move-a")}), "0");
}

TEST_F(HppTest, DestructorReleases) {
  dlock::Client first(redis_.url());
  dlock::Client second(redis_.url());
  uint64_t token = 0;
  {
    dlock::Lock lock = first.acquire("scoped");
    token = lock.fencing_token();
    EXPECT_FALSE(second.try_acquire("scoped"));
  }
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("scoped")}), "0");
  dlock::Lock again = second.try_acquire("scoped");  // one try, no wait
  ASSERT_TRUE(again);
  EXPECT_GT(again.fencing_token(), token);
}

TEST_F(HppTest, TryAcquireOnHeldLockIsEmptyAndAcquireThrows) {
  dlock::Client holder(redis_.url());
  dlock::Client contender(redis_.url());
  dlock::Lock held = holder.acquire("busy");

  dlock::Lock nothing = contender.try_acquire("busy");
  EXPECT_FALSE(nothing);
  EXPECT_EQ(nothing.fencing_token(), 0u);
  EXPECT_EQ(nothing.attempts(), 0u);

  std::string message;
  EXPECT_EQ(CodeOf([&] { contender.acquire("busy"); }, &message), DLOCK_NOT_ACQUIRED);
  EXPECT_FALSE(message.empty());
  // A bounded wait also runs out.
  EXPECT_FALSE(contender.try_acquire("busy", dlock::Options().wait(200ms)));
  EXPECT_TRUE(held.valid());
}

TEST_F(HppTest, WaitingTryAcquireGetsTheLockWhenReleased) {
  dlock::Client holder(redis_.url());
  dlock::Client waiter(redis_.url());
  dlock::Lock held = holder.acquire("handoff");
  const uint64_t first = held.fencing_token();
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    held.release();
  });
  dlock::Lock got = waiter.try_acquire("handoff", dlock::Options().wait(10s).retry(10ms, 100ms));
  releaser.join();
  ASSERT_TRUE(got);
  EXPECT_GT(got.fencing_token(), first);
  EXPECT_GE(got.attempts(), 1u);  // 1: handed the lock by the release (fair waiting)
}

TEST_F(HppTest, ErrorCarriesStatusAndMessage) {
  for (const char* url : {"", "not-a-url", "bogus://127.0.0.1:6379", "redis://127.0.0.1:99999"}) {
    std::string message;
    EXPECT_EQ(CodeOf([&] { dlock::Client c(url); }, &message), DLOCK_EINVAL) << url;
    EXPECT_FALSE(message.empty()) << url;
  }
  EXPECT_EQ(CodeOf([&] { dlock::Client c(redis_.url() + "?no_such_param=1"); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { dlock::Client c(std::string("redis://127.0.0.1\0x", 19)); }), DLOCK_EINVAL);

  try {
    dlock::Client c("bogus://x");
    FAIL() << "no exception";
  } catch (const dlock::Error& e) {
    EXPECT_EQ(e.code(), DLOCK_EINVAL);
    EXPECT_EQ(std::string(e.what()).rfind("DLOCK_EINVAL: ", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()), std::string("DLOCK_EINVAL: ") + e.message());
  }
}

TEST_F(HppTest, UnreachableServerIsEio) {
  RedisServer gone;
  ASSERT_TRUE(gone.running());
  const std::string url = gone.url() + "?connect_timeout_ms=500";
  gone.Stop();
  EXPECT_EQ(CodeOf([&] { dlock::Client c(url); }), DLOCK_EIO);
}

TEST_F(HppTest, BadNamesAndOptionsAreEinval) {
  dlock::Client client(redis_.url());
  EXPECT_EQ(CodeOf([&] { client.acquire(""); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire(std::string("a\0b", 3)); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire(std::string(DLOCK_MAX_NAME_BYTES + 1, 'n')); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().lease(-1ms)); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().lease(1s).heartbeat(2s)); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().retry(0ms, 0ms)); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().retry(50ms, 10ms)); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().owner(std::string("a\0b", 3))); }),
            DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire("x", dlock::Options().owner(std::string(300, 'o'))); }),
            DLOCK_EINVAL);
  // Nothing was left behind.
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("x")}), "0");
  // try_acquire reports errors other than "held" too.
  EXPECT_EQ(CodeOf([&] { client.try_acquire(""); }), DLOCK_EINVAL);
}

TEST_F(HppTest, ExtendAndNoExpiry) {
  dlock::Client client(redis_.url());
  dlock::Lock lock = client.acquire("extend", dlock::Options().lease(1s).no_heartbeat());
  EXPECT_LE(lock.remaining(), 1000ms);
  lock.extend(60s);
  EXPECT_GT(lock.remaining(), 30s);
  lock.extend(0ms);
  EXPECT_EQ(lock.remaining(), std::chrono::milliseconds::max());
  EXPECT_EQ(redis_.Cli({"PTTL", Key("extend")}), "-1");
  EXPECT_EQ(CodeOf([&] { lock.extend(-5ms); }), DLOCK_EINVAL);

  dlock::Lock forever = client.acquire("forever", dlock::Options().no_expiry());
  EXPECT_EQ(forever.remaining(), std::chrono::milliseconds::max());
  EXPECT_TRUE(forever.valid());
}

TEST_F(HppTest, ReleaseOfALostLockThrowsNotHeld) {
  dlock::Client client(redis_.url());
  dlock::Lock lock = client.acquire("stolen", dlock::Options().lease(10s).no_heartbeat());
  ASSERT_EQ(redis_.Cli({"DEL", Key("stolen")}), "1");
  std::string message;
  EXPECT_EQ(CodeOf([&] { lock.release(); }, &message), DLOCK_NOT_HELD);
  EXPECT_FALSE(message.empty());
  EXPECT_FALSE(lock);  // empty whatever the outcome
}

TEST_F(HppTest, LockMayOutliveItsClient) {
  dlock::Lock lock;
  {
    dlock::Client client(redis_.url());
    lock = client.acquire("orphan");
    ASSERT_TRUE(lock);
  }  // closing the client releases the lock on the server
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("orphan")}), "0");
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
}

TEST_F(HppTest, OnLostIsCalledWhenTheKeyIsDeleted) {
  dlock::Client client(redis_.url());
  std::promise<std::pair<std::string, uint64_t>> lost;
  auto lost_future = lost.get_future();
  std::atomic<int> calls{0};
  dlock::Lock lock = client.acquire(
      "fragile", dlock::Options().lease(600ms).heartbeat(150ms).on_lost(
                     [&](const std::string& name, uint64_t token) {
                       if (calls.fetch_add(1) == 0) lost.set_value({name, token});
                     }));
  ASSERT_TRUE(lock);
  ASSERT_EQ(redis_.Cli({"DEL", Key("fragile")}), "1");

  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready) << "on_lost was not called";
  auto [name, token] = lost_future.get();
  EXPECT_EQ(name, "fragile");
  EXPECT_EQ(token, lock.fencing_token());
  EXPECT_FALSE(lock.valid());
  EXPECT_EQ(lock.remaining(), 0ms);
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(HppTest, OnLostHandlerIsOwnedByTheLock) {
  dlock::Client client(redis_.url());
  auto sentinel = std::make_shared<int>(0);
  std::promise<void> lost;
  auto lost_future = lost.get_future();
  dlock::Lock lock;
  {
    // The Options (and the caller's function object) die right after acquire.
    auto handler = [sentinel, &lost](const std::string&, uint64_t) { lost.set_value(); };
    dlock::Options options;
    options.lease(600ms).heartbeat(150ms).on_lost(handler);
    lock = client.acquire("owned", options);
  }
  EXPECT_EQ(sentinel.use_count(), 2);  // ours + the Lock's copy
  ASSERT_EQ(redis_.Cli({"DEL", Key("owned")}), "1");
  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(lock.release(std::nothrow), DLOCK_NOT_HELD);
  EXPECT_EQ(sentinel.use_count(), 1);  // the Lock's copy went with it

  // A lock released normally frees its handler too, and never calls it.
  std::atomic<int> calls{0};
  {
    dlock::Lock quiet = client.acquire(
        "quiet", dlock::Options().lease(600ms).heartbeat(150ms).on_lost(
                     [sentinel, &calls](const std::string&, uint64_t) { ++calls; }));
    EXPECT_EQ(sentinel.use_count(), 2);
  }
  EXPECT_EQ(sentinel.use_count(), 1);
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(HppTest, OnLostHandlerMayReleaseItsOwnLock) {
  // The handler drops the Lock (and so its own heap copy) while it is still running; the
  // copy must stay alive until the handler returns (ASan would catch a use after free).
  dlock::Client client(redis_.url());
  std::mutex mu;
  std::optional<dlock::Lock> holder;
  std::promise<dlock_status> done;
  auto done_future = done.get_future();
  auto big_capture = std::make_shared<std::string>(1000, 'x');
  {
    std::lock_guard<std::mutex> guard(mu);
    holder = client.acquire(
        "self-release",
        dlock::Options().lease(600ms).heartbeat(150ms).on_lost(
            [&mu, &holder, &done, big_capture](const std::string&, uint64_t) {
              dlock_status s;
              {
                std::lock_guard<std::mutex> guard(mu);
                s = holder->release(std::nothrow);
                holder.reset();
              }
              // Still running, with the captures still in use, after the Lock is gone.
              EXPECT_EQ(big_capture->size(), 1000u);
              done.set_value(s);
            }));
  }
  ASSERT_EQ(redis_.Cli({"DEL", Key("self-release")}), "1");
  ASSERT_EQ(done_future.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(done_future.get(), DLOCK_NOT_HELD);
  std::lock_guard<std::mutex> guard(mu);
  EXPECT_FALSE(holder.has_value());
}

TEST_F(HppTest, ThrowingOnLostHandlerDoesNotCrash) {
  dlock::Client client(redis_.url());
  std::promise<void> entered;
  auto entered_future = entered.get_future();
  dlock::Lock lock = client.acquire(
      "throws", dlock::Options().lease(600ms).heartbeat(150ms).on_lost(
                    [&entered](const std::string&, uint64_t) {
                      entered.set_value();
                      throw std::runtime_error("handler failure");
                    }));
  ASSERT_EQ(redis_.Cli({"DEL", Key("throws")}), "1");
  ASSERT_EQ(entered_future.wait_for(10s), std::future_status::ready);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(lock.valid());
  // The client still works.
  dlock::Lock other = client.acquire("after-throw");
  EXPECT_TRUE(other);
}

TEST_F(HppTest, ClientIsSharedBetweenThreads) {
  dlock::Client client(redis_.url());
  std::atomic<int> inside{0}, max_inside{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        dlock::Lock lock = client.acquire("shared", dlock::Options().wait(10s).retry(1ms, 20ms));
        int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(1ms);
        --inside;
        lock.release();
        ++done;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 40);
  EXPECT_EQ(max_inside.load(), 1);
}

TEST(HppVersionTest, MatchesTheHeader) {
  EXPECT_EQ(dlock::version(), std::to_string(DLOCK_VERSION_MAJOR) + "." +
                                  std::to_string(DLOCK_VERSION_MINOR) + "." +
                                  std::to_string(DLOCK_VERSION_PATCH));
}

}  // namespace
