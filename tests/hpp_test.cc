// dlock.hpp, the header-only C++ layer, against a real redis-server.
#include "dlock/dlock.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "hpp_noexceptions.h"
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
static_assert(std::is_base_of_v<std::system_error, dlock::Error>);
static_assert(std::is_error_code_enum_v<dlock_status>);
static_assert(!std::is_copy_constructible_v<dlock::Mutex> && !std::is_move_constructible_v<dlock::Mutex>);
static_assert(noexcept(std::declval<dlock::Mutex&>().unlock()));
static_assert(noexcept(std::declval<dlock::SharedMutex&>().unlock_shared()));
static_assert(noexcept(std::declval<dlock::Mutex&>().try_lock(std::declval<std::error_code&>())));
static_assert(noexcept(std::declval<dlock::Client&>().acquire(std::declval<const std::string&>(), std::declval<std::error_code&>())));
static_assert(noexcept(dlock::Client(std::declval<const std::string&>(), std::declval<std::error_code&>())));
static_assert(!std::is_convertible_v<dlock::Lock, bool>, "operator bool must be explicit");
static_assert(!std::is_copy_constructible_v<dlock::Observer> && !std::is_copy_assignable_v<dlock::Observer>);
static_assert(std::is_nothrow_move_constructible_v<dlock::Observer> &&
              std::is_nothrow_move_assignable_v<dlock::Observer>);
static_assert(!std::is_convertible_v<dlock::Observer, bool>, "operator bool must be explicit");
static_assert(noexcept(std::declval<dlock::Observer&>().cancel()));
static_assert(!std::is_copy_constructible_v<dlock::LockGroup> && !std::is_copy_assignable_v<dlock::LockGroup>);
static_assert(std::is_nothrow_move_constructible_v<dlock::LockGroup> &&
              std::is_nothrow_move_assignable_v<dlock::LockGroup>);
static_assert(!std::is_convertible_v<dlock::LockGroup, bool>, "operator bool must be explicit");
static_assert(std::is_same_v<decltype(std::declval<dlock::LockGroup&>()[0]), dlock::Lock&>);
static_assert(noexcept(std::declval<dlock::Client&>().acquire_many(
    std::declval<const std::vector<std::string>&>(), std::declval<std::error_code&>())));
static_assert(noexcept(std::declval<dlock::Client&>().try_acquire_many(
    std::declval<const std::vector<std::string>&>(), std::declval<const dlock::Options&>(),
    std::declval<std::error_code&>())));
static_assert(noexcept(std::declval<dlock::LockGroup&>().release(std::declval<std::error_code&>())));
static_assert(noexcept(std::declval<dlock::Client&>().observe(
    std::declval<const std::string&>(), std::declval<dlock::LeaderHandler>(), std::declval<std::error_code&>())));

// Runs f, which must throw dlock::Error; returns its code (DLOCK_OK if nothing was thrown).
template <typename F>
dlock_status CodeOf(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const dlock::Error& e) {
    if (message) *message = e.message();
    return e.status();
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

TEST_F(HppTest, TakeSeveralPermitsThroughTheWrapper) {
  dlock::Client client(redis_.url()), other(redis_.url()), observer(redis_.url());
  const auto of4 = [] { return dlock::Options().permits(4); };
  dlock::Lock three = client.acquire("hpp/take", of4().take(3).owner("three"));
  dlock::Info info = observer.inspect("hpp/take");
  EXPECT_EQ(info.permits, 4u);
  ASSERT_EQ(info.holders.size(), 1u);  // one hold for the 3
  EXPECT_EQ(info.holders[0].owner, "three");
  EXPECT_FALSE(other.try_acquire("hpp/take", of4().take(2)));  // 2 do not fit in the 1 left
  dlock::Lock one = other.try_acquire("hpp/take", of4().take(1));
  ASSERT_TRUE(one);
  EXPECT_FALSE(observer.try_acquire("hpp/take", of4()));  // none left
  three.release();  // frees all 3
  dlock::Lock again = observer.try_acquire("hpp/take", of4().take(3));
  ASSERT_TRUE(again);
  EXPECT_GT(again.fencing_token(), one.fencing_token());
  again.release();
  one.release();
  EXPECT_TRUE(observer.inspect("hpp/take").is_free());

  // 0 at the setter, more than the permits or more than 1 without any at acquire: DLOCK_EINVAL,
  // naming take (and permits); nothing taken.
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire("hpp/take", of4().take(0)); }, &message), DLOCK_EINVAL);
  EXPECT_NE(message.find("take"), std::string::npos) << message;
  for (const dlock::Options& bad : {of4().take(5), dlock::Options().take(2)}) {
    EXPECT_EQ(CodeOf([&] { client.acquire("hpp/take", bad); }, &message), DLOCK_EINVAL);
    EXPECT_NE(message.find("take"), std::string::npos) << message;
    EXPECT_NE(message.find("permits"), std::string::npos) << message;
  }
  std::error_code ec;
  EXPECT_FALSE(client.acquire("hpp/take", of4().take(5), ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_TRUE(observer.inspect("hpp/take").is_free());
  // take(1) alone builds options (no fast path past it) and is the default said aloud.
  client.acquire("hpp/take", dlock::Options().take(1)).release();

  // A re-entry asks the same take.
  dlock::Lock held = client.acquire("hpp/take", of4().take(2).reentrant("job"));
  dlock::Lock inner = client.acquire("hpp/take", of4().take(2).reentrant("job"));
  EXPECT_EQ(inner.fencing_token(), held.fencing_token());
  EXPECT_EQ(CodeOf([&] { client.acquire("hpp/take", of4().take(3).reentrant("job")); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("take"), std::string::npos) << message;
  inner.release();
  held.release();

  // Several names, each taking 3.
  dlock::LockGroup group = client.acquire_many({"hpp/take-a", "hpp/take-b"}, of4().take(3));
  EXPECT_FALSE(other.try_acquire("hpp/take-a", of4().take(2)));
  EXPECT_TRUE(other.try_acquire("hpp/take-b", of4()));
  group.release();
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
    EXPECT_EQ(e.status(), DLOCK_EINVAL);
    EXPECT_EQ(e.code(), DLOCK_EINVAL);  // a std::error_code in dlock::category()
    EXPECT_EQ(&e.code().category(), &dlock::category());
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
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

// ----- several names at once (acquire_many, LockGroup) ---------------------------------------

TEST_F(HppTest, AcquireManyGivesEachNameItsOwnLockAndToken) {
  dlock::Client client(redis_.url());
  // Given out of order: the group keeps the order given, whatever order they were taken in.
  dlock::LockGroup group = client.acquire_many({"hpp/many-b", "hpp/many-a", "hpp/many-c"},
                                               dlock::Options().lease(5s).owner("hpp-many"));
  ASSERT_TRUE(group);
  ASSERT_EQ(group.size(), 3u);
  EXPECT_EQ(group[0].name(), "hpp/many-b");
  EXPECT_EQ(group[1].name(), "hpp/many-a");
  EXPECT_EQ(group[2].name(), "hpp/many-c");
  std::vector<uint64_t> tokens;
  for (const dlock::Lock& lock : group) {
    EXPECT_TRUE(lock.valid()) << lock.name();
    EXPECT_GT(lock.fencing_token(), 0u) << lock.name();
    EXPECT_LE(lock.remaining(), 5000ms);
    EXPECT_EQ(redis_.Cli({"EXISTS", Key(lock.name())}), "1") << lock.name();
    tokens.push_back(lock.fencing_token());
  }
  // Each its own hold: what inspect shows of each name is that Lock's token.
  for (size_t k = 0; k < group.size(); ++k) {
    dlock::Info info = client.inspect(group[k].name());
    ASSERT_EQ(info.holders.size(), 1u);
    EXPECT_EQ(info.holders[0].fencing_token, tokens[k]);
    EXPECT_EQ(info.holders[0].owner, "hpp-many");
  }
  EXPECT_NE(tokens[0], tokens[1]);
  EXPECT_NE(tokens[1], tokens[2]);
  // One may be extended alone.
  group[1].extend(30s);
  EXPECT_GT(group[1].remaining(), 10s);
  EXPECT_LE(group[0].remaining(), 5000ms);

  group.release();
  EXPECT_FALSE(group);
  EXPECT_EQ(group.size(), 0u);
  for (const char* name : {"hpp/many-a", "hpp/many-b", "hpp/many-c"}) {
    EXPECT_EQ(redis_.Cli({"EXISTS", Key(name)}), "0") << name;
  }
  // Releasing an empty group is an error, not a crash.
  EXPECT_EQ(CodeOf([&] { group.release(); }), DLOCK_EINVAL);
  EXPECT_EQ(group.release(std::nothrow), DLOCK_EINVAL);
  // Taken again: each name's token is greater than its last.
  dlock::LockGroup again = client.acquire_many({"hpp/many-b", "hpp/many-a", "hpp/many-c"});
  for (size_t k = 0; k < again.size(); ++k) EXPECT_GT(again[k].fencing_token(), tokens[k]);
}

TEST_F(HppTest, AcquireManyIsAllOrNoneWhenOneNameIsHeldElsewhere) {
  dlock::Client client(redis_.url()), other(redis_.url());
  dlock::Lock held = other.acquire("hpp/aon-b");
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/aon-c", "hpp/aon-b", "hpp/aon-a"}); }, &message),
            DLOCK_NOT_ACQUIRED);
  EXPECT_NE(message.find("hpp/aon-b"), std::string::npos) << message;
  // Nothing held: neither hpp/aon-a (before hpp/aon-b, bytewise) nor hpp/aon-c.
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/aon-a")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/aon-c")}), "0");
  EXPECT_TRUE(other.inspect("hpp/aon-a").is_free());
  // try_acquire_many: an empty group, also after a bounded wait.
  dlock::LockGroup none = client.try_acquire_many({"hpp/aon-a", "hpp/aon-b"});
  EXPECT_FALSE(none);
  EXPECT_EQ(none.size(), 0u);
  const auto start = std::chrono::steady_clock::now();
  none = client.try_acquire_many({"hpp/aon-a", "hpp/aon-b"}, dlock::Options().wait(200ms));
  EXPECT_FALSE(none);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/aon-a")}), "0");
  std::error_code ec;
  none = client.acquire_many({"hpp/aon-a", "hpp/aon-b"}, ec);
  EXPECT_EQ(ec, DLOCK_NOT_ACQUIRED);
  EXPECT_NE(dlock::last_error().find("hpp/aon-b"), std::string::npos) << dlock::last_error();
  ec = DLOCK_EIO;
  none = client.try_acquire_many({"hpp/aon-a", "hpp/aon-b"}, ec);
  EXPECT_FALSE(ec);  // held is not an error for try_acquire_many
  EXPECT_FALSE(none);
  EXPECT_TRUE(held.valid());

  // A waiting acquire_many gets them all once the other holder lets go.
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    held.release();
  });
  dlock::LockGroup all = client.acquire_many({"hpp/aon-c", "hpp/aon-b", "hpp/aon-a"},
                                             dlock::Options().wait(10s).retry(10ms, 100ms));
  releaser.join();
  ASSERT_EQ(all.size(), 3u);
  for (const dlock::Lock& lock : all) EXPECT_TRUE(lock.valid()) << lock.name();
}

TEST_F(HppTest, LockGroupReleaseNamesTheLostNameAndReleasesTheOthers) {
  dlock::Client client(redis_.url()), op(redis_.url());
  dlock::LockGroup group = client.acquire_many({"hpp/lost-a", "hpp/lost-b", "hpp/lost-c"},
                                               dlock::Options().lease(10s).no_heartbeat());
  ASSERT_EQ(group.size(), 3u);
  op.break_lock("hpp/lost-b", "taken for the test", true);
  std::string message;
  EXPECT_EQ(CodeOf([&] { group.release(); }, &message), DLOCK_NOT_HELD);
  EXPECT_NE(message.find("hpp/lost-b"), std::string::npos) << message;
  EXPECT_EQ(message.find("hpp/lost-a"), std::string::npos) << message;
  EXPECT_EQ(message.find("hpp/lost-c"), std::string::npos) << message;
  EXPECT_FALSE(group);  // empty whatever the outcome
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/lost-a")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/lost-c")}), "0");

  // Two lost: the message names both; through the std::error_code overload.
  group = client.acquire_many({"hpp/lost-a", "hpp/lost-b", "hpp/lost-c"},
                              dlock::Options().lease(10s).no_heartbeat());
  op.break_lock("hpp/lost-a", "", true);
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/lost-c")}), "1");
  std::error_code ec;
  group.release(ec);
  EXPECT_EQ(ec, DLOCK_NOT_HELD);
  EXPECT_EQ(ec, std::errc::operation_not_permitted);
  const std::string both = dlock::last_error();
  EXPECT_NE(both.find("hpp/lost-a"), std::string::npos) << both;
  EXPECT_NE(both.find("hpp/lost-c"), std::string::npos) << both;
  EXPECT_EQ(both.find("hpp/lost-b"), std::string::npos) << both;
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/lost-b")}), "0");
  group.release(ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);

  // A Lock released alone is skipped by the group's release.
  group = client.acquire_many({"hpp/lost-a", "hpp/lost-b"});
  group[0].release();
  EXPECT_TRUE(group);
  EXPECT_NO_THROW(group.release());
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/lost-b")}), "0");
}

TEST_F(HppTest, AcquireManyRefusesADuplicateNameAndNoNames) {
  dlock::Client client(redis_.url());
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/dup-x", "hpp/dup-y", "hpp/dup-x"}); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("hpp/dup-x"), std::string::npos) << message;
  // try_acquire_many reports it too; nothing was taken.
  EXPECT_EQ(CodeOf([&] { client.try_acquire_many({"hpp/dup-x", "hpp/dup-x"}); }), DLOCK_EINVAL);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/dup-x")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/dup-y")}), "0");
  EXPECT_EQ(CodeOf([&] { client.acquire_many({}); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/dup-x", ""}); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/dup-x", std::string("a\0b", 3)}); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("names[1]"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/dup-x"}, dlock::Options().lease(-1ms)); }), DLOCK_EINVAL);
  std::error_code ec;
  dlock::LockGroup none = client.acquire_many({"hpp/dup-x", "hpp/dup-x"}, ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_FALSE(none);
  none = client.try_acquire_many({"hpp/dup-x", "hpp/dup-x"}, ec);
  EXPECT_EQ(ec, std::errc::invalid_argument);
  dlock::Client moved(std::move(client));
  EXPECT_EQ(CodeOf([&] { client.acquire_many({"hpp/dup-x"}); }), DLOCK_EINVAL);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/dup-x")}), "0");
}

TEST_F(HppTest, LockGroupDestructorAndMoveAssignmentRelease) {
  dlock::Client first(redis_.url()), second(redis_.url());
  std::vector<uint64_t> tokens;
  {
    dlock::LockGroup group = first.acquire_many({"hpp/scoped-a", "hpp/scoped-b"});
    for (const dlock::Lock& lock : group) tokens.push_back(lock.fencing_token());
    // Held: another client gets neither, in either order.
    EXPECT_FALSE(second.try_acquire_many({"hpp/scoped-b", "hpp/scoped-a"}));
    EXPECT_FALSE(second.try_acquire("hpp/scoped-a"));
    EXPECT_FALSE(second.try_acquire("hpp/scoped-b"));
    // A move leaves the moved-from group empty and the holds held.
    dlock::LockGroup moved(std::move(group));
    EXPECT_FALSE(group);  // NOLINT(bugprone-use-after-move): moved-from is documented as empty
    EXPECT_EQ(group.size(), 0u);
    ASSERT_EQ(moved.size(), 2u);
    EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-a")}), "1");
  }  // released here
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-a")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-b")}), "0");
  dlock::LockGroup theirs = second.try_acquire_many({"hpp/scoped-b", "hpp/scoped-a"});  // one try
  ASSERT_TRUE(theirs);
  EXPECT_GT(theirs[0].fencing_token(), tokens[1]);
  EXPECT_GT(theirs[1].fencing_token(), tokens[0]);

  // Move-assigning over a held group releases it.
  dlock::LockGroup other = second.acquire_many({"hpp/scoped-c"});
  theirs = std::move(other);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-a")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-b")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/scoped-c")}), "1");
  theirs = std::move(theirs);  // self-move leaves it alone
  EXPECT_EQ(theirs.size(), 1u);
  EXPECT_TRUE(first.try_acquire_many({"hpp/scoped-a", "hpp/scoped-b"}));
}

TEST_F(HppTest, AcquireManyInOppositeOrdersDoesNotDeadlockAndOnLostNamesTheLostLock) {
  dlock::Client a(redis_.url()), b(redis_.url());
  std::atomic<int> done{0};
  auto run = [&](dlock::Client& c, std::vector<std::string> names) {
    for (int i = 0; i < 10; ++i) {
      dlock::LockGroup g = c.acquire_many(names, dlock::Options().wait(10s).retry(5ms, 20ms));
      std::this_thread::sleep_for(2ms);
    }
    done.fetch_add(1);
  };
  std::thread one([&] { run(a, {"hpp/order-x", "hpp/order-y"}); });
  std::thread two([&] { run(b, {"hpp/order-y", "hpp/order-x"}); });
  one.join();
  two.join();
  EXPECT_EQ(done.load(), 2);

  // One handler for the group, called with the name of the lock lost; the other stays held.
  std::promise<std::string> lost;
  auto lost_future = lost.get_future();
  std::atomic<int> calls{0};
  dlock::LockGroup group = a.acquire_many(
      {"hpp/order-x", "hpp/order-y"},
      dlock::Options().lease(600ms).heartbeat(150ms).on_lost([&](const std::string& name, uint64_t) {
        if (calls.fetch_add(1) == 0) lost.set_value(name);
      }));
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/order-y")}), "1");
  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready) << "on_lost was not called";
  EXPECT_EQ(lost_future.get(), "hpp/order-y");
  EXPECT_TRUE(group[0].valid());
  EXPECT_FALSE(group[1].valid());
  std::string message;
  EXPECT_EQ(CodeOf([&] { group.release(); }, &message), DLOCK_NOT_HELD);
  EXPECT_NE(message.find("hpp/order-y"), std::string::npos) << message;
  EXPECT_EQ(calls.load(), 1);
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
  EXPECT_EQ(lock.lost_cause().rfind("deleted: ", 0), 0u) << lock.lost_cause();
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(calls.load(), 1);
  // The client counted it: one loss, deleted, in its Prometheus text.
  EXPECT_NE(client.metrics_text().find("dlock_losses_total{cause=\"deleted\"} 1\n"), std::string::npos)
      << client.metrics_text();
}

TEST_F(HppTest, MaxHoldStopsRenewalsAndIsReportedLostWithItsCause) {
  dlock::Client client(redis_.url());
  std::promise<uint64_t> lost;
  auto lost_future = lost.get_future();
  std::atomic<int> calls{0};
  const auto start = std::chrono::steady_clock::now();
  dlock::Lock lock = client.acquire(
      "max-hold", dlock::Options().lease(800ms).heartbeat(200ms).max_hold(1200ms).on_lost(
                      [&](const std::string&, uint64_t token) {
                        if (calls.fetch_add(1) == 0) lost.set_value(token);
                      }));
  ASSERT_TRUE(lock);
  // Renewed past its first lease: still held at ~1 s.
  std::this_thread::sleep_until(start + 1000ms);
  EXPECT_TRUE(lock.valid());
  EXPECT_EQ(lock.lost_cause(), "");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("max-hold")}), "1");
  // Then no more renewals: it ends with its lease (at most max_hold + lease after the acquire).
  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready) << "on_lost was not called";
  EXPECT_EQ(lost_future.get(), lock.fencing_token());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1200ms);
  EXPECT_FALSE(lock.valid());
  EXPECT_EQ(lock.lost_cause().rfind("max_hold: ", 0), 0u) << lock.lost_cause();
  EXPECT_NE(lock.lost_cause().find("max_hold_ms 1200"), std::string::npos) << lock.lost_cause();
  EXPECT_NE(client.metrics_text().find("dlock_losses_total{cause=\"max_hold\"} 1\n"), std::string::npos)
      << client.metrics_text();
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
  EXPECT_EQ(calls.load(), 1);

  // A max hold needs a lease; a negative one, and one over ten years, are refused too.
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire("max-hold", dlock::Options().no_expiry().max_hold(1s)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("max_hold_ms"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("max-hold", dlock::Options().max_hold(-1ms)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("max_hold"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("max-hold", dlock::Options().max_hold(std::chrono::hours(24 * 366 * 11))); },
                   &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("max_hold_ms"), std::string::npos) << message;
  // 0 is none: the lock is held and renewed as any other.
  dlock::Lock plain = client.acquire("max-hold-none", dlock::Options().lease(5s).max_hold(0ms));
  EXPECT_TRUE(plain.valid());
  plain.release();
}

TEST_F(HppTest, MinHoldKeepsTheNameTakenAfterAnEarlyRelease) {
  dlock::Client client(redis_.url());
  dlock::Client other(redis_.url());
  EXPECT_NE(client.capabilities() & DLOCK_CAP_MIN_HOLD, 0u);
  EXPECT_NE(client.capabilities() & DLOCK_CAP_LOCK_DELAY, 0u);
  const auto start = std::chrono::steady_clock::now();
  dlock::Lock lock = client.acquire("min-hold", dlock::Options().lease(5s).min_hold(1000ms).owner("cron"));
  const uint64_t token = lock.fencing_token();
  lock.release();  // returns at once, and leaves a marker with no owner
  EXPECT_LT(std::chrono::steady_clock::now() - start, 900ms);
  std::string message;
  EXPECT_EQ(CodeOf([&] { other.acquire("min-hold"); }, &message), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(message.find("min_hold"), std::string::npos) << message;
  EXPECT_FALSE(other.try_acquire("min-hold"));
  dlock::Info info = other.inspect("min-hold");
  EXPECT_TRUE(info.is_free());
  EXPECT_GT(info.closed_ms(), 0);
  EXPECT_LE(info.closed_ms(), 1000);
  EXPECT_EQ(info.closed_by(), "min_hold");
  // Once the min hold has passed since the acquire, a waiter gets it, with a greater token.
  dlock::Lock next = other.acquire("min-hold", dlock::Options().wait(5s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  EXPECT_GT(next.fencing_token(), token);
  next.release();

  // Refused, naming the option: above max_hold at acquire, negative, above ten years.
  EXPECT_EQ(CodeOf([&] { client.acquire("min-hold", dlock::Options().max_hold(1s).min_hold(2s)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("min_hold_ms 2000"), std::string::npos) << message;
  EXPECT_NE(message.find("max_hold_ms 1000"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("min-hold", dlock::Options().min_hold(-1ms)); }, &message), DLOCK_EINVAL);
  EXPECT_NE(message.find("min_hold"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("min-hold", dlock::Options().min_hold(std::chrono::hours(24 * 366 * 11))); },
                   &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("min_hold_ms"), std::string::npos) << message;
  // 0 is none: a release frees the name at once.
  dlock::Lock plain = client.acquire("min-hold-none", dlock::Options().min_hold(0ms));
  plain.release();
  EXPECT_TRUE(other.try_acquire("min-hold-none"));
}

TEST_F(HppTest, LockDelayKeepsTheNameClosedAfterAnExpiry) {
  dlock::Client client(redis_.url());
  dlock::Client other(redis_.url());
  const auto start = std::chrono::steady_clock::now();
  // A lease of 500 ms, no heartbeats, never released: it ends uncleanly, then 1 s of delay.
  dlock::Lock lock =
      client.acquire("lock-delay", dlock::Options().lease(500ms).no_heartbeat().lock_delay(1000ms));
  const uint64_t token = lock.fencing_token();
  std::this_thread::sleep_until(start + 700ms);
  std::string message;
  EXPECT_EQ(CodeOf([&] { other.acquire("lock-delay"); }, &message), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(message.find("lock_delay"), std::string::npos) << message;
  dlock::Info info = other.inspect("lock-delay");
  EXPECT_TRUE(info.is_free());
  EXPECT_GT(info.closed_ms(), 0);
  EXPECT_LE(info.closed_ms(), 1000);
  EXPECT_EQ(info.closed_by(), "lock_delay");
  dlock::Lock next = other.acquire("lock-delay", dlock::Options().wait(5s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1400ms);
  EXPECT_GT(next.fencing_token(), token);
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
  next.release();

  // A release is a clean end: no delay.
  dlock::Lock clean = client.acquire("lock-delay-clean", dlock::Options().lease(5s).lock_delay(10s));
  clean.release();
  EXPECT_TRUE(other.try_acquire("lock-delay-clean"));

  // Above the cap (DLOCK_MAX_LOCK_DELAY_MS) and negative: refused, naming the option.
  EXPECT_EQ(CodeOf([&] { client.acquire("lock-delay", dlock::Options().lock_delay(60001ms)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("lock_delay_ms 60001"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("lock-delay", dlock::Options().lock_delay(-1ms)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("lock_delay"), std::string::npos) << message;
  dlock::Lock at_cap = client.acquire("lock-delay-cap", dlock::Options().lock_delay(60s));
  at_cap.release();
}

TEST_F(HppTest, AReentrantContextReentersAndOnlyTheLastReleaseFrees) {
  dlock::Client client(redis_.url());
  dlock::Client other(redis_.url());
  const dlock::Options mine = dlock::Options().lease(5s).reentrant("task-7");
  dlock::Lock outer = client.acquire("reentrant", mine);
  dlock::Lock inner = client.acquire("reentrant", dlock::Options(mine).no_wait());  // at once
  EXPECT_NE(inner.native_handle(), outer.native_handle());
  EXPECT_EQ(inner.fencing_token(), outer.fencing_token());
  EXPECT_FALSE(client.try_acquire("reentrant", dlock::Options().reentrant("task-8")));  // another context
  EXPECT_FALSE(client.try_acquire("reentrant"));  // none
  inner.release();
  EXPECT_FALSE(other.try_acquire("reentrant"));
  EXPECT_TRUE(outer.valid());
  outer.release();
  EXPECT_TRUE(other.try_acquire("reentrant"));

  // "" and contexts over 256 bytes are DLOCK_EINVAL, naming the context; no_reentrancy() is none.
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire("reentrant-bad", dlock::Options().reentrant("")); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("reentrant context is empty"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { client.acquire("reentrant-bad", dlock::Options().reentrant(std::string(257, 'c'))); },
                   &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("reentrant context is longer than 256 bytes"), std::string::npos) << message;
  dlock::Lock plain = client.acquire("reentrant-off", dlock::Options().reentrant("x").no_reentrancy());
  EXPECT_FALSE(client.try_acquire("reentrant-off", dlock::Options().reentrant("x")));
}

// The C side calls the hold's first handler until its last Lock goes: a re-entry keeps it alive
// when the first Lock is released before it.
TEST_F(HppTest, AReentrantHoldKeepsItsFirstOnLostAfterTheFirstLockIsReleased) {
  dlock::Client client(redis_.url());
  dlock::Client op(redis_.url());
  std::promise<uint64_t> lost;
  std::future<uint64_t> heard = lost.get_future();
  dlock::Lock inner;
  {
    dlock::Lock outer = client.acquire(
        "reentrant-lost", dlock::Options().lease(2s).heartbeat(100ms).reentrant("job-1").on_lost(
                              [&lost](const std::string&, uint64_t token) { lost.set_value(token); }));
    inner = client.acquire("reentrant-lost", dlock::Options().reentrant("job-1"));
    outer.release();  // the hold lives on
  }
  EXPECT_TRUE(inner.valid());
  op.break_lock("reentrant-lost", "", true);
  ASSERT_EQ(heard.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(heard.get(), inner.fencing_token());
  EXPECT_EQ(CodeOf([&] { inner.release(); }), DLOCK_NOT_HELD);
}

TEST_F(HppTest, BreakLockReportsTheHolderLostWithCauseBrokenAndClosesTheName) {
  dlock::Client client(redis_.url());
  dlock::Client op(redis_.url());
  EXPECT_NE(op.capabilities() & DLOCK_CAP_BREAK, 0u);
  std::promise<std::string> lost;
  auto lost_future = lost.get_future();
  std::atomic<int> calls{0};
  // A lease of 1 s renewed every 250 ms: the holder hears of the break within ~250 ms.
  dlock::Lock lock = client.acquire(
      "broken", dlock::Options().lease(1000ms).heartbeat(250ms).owner("holder-7").on_lost(
                    [&](const std::string&, uint64_t) {
                      if (calls.fetch_add(1) == 0) lost.set_value("lost");
                    }));
  const uint64_t token = lock.fencing_token();
  dlock::Info info = op.break_lock("broken", "disk full on db-3");
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].owner, "holder-7");
  EXPECT_EQ(info.holders[0].fencing_token, token);
  ASSERT_TRUE(info.holders[0].remaining.has_value());
  EXPECT_GT(info.holders[0].remaining->count(), 0);
  EXPECT_LE(info.holders[0].remaining->count(), 1000);
  EXPECT_GT(info.closed_ms(), 0);
  EXPECT_LE(info.closed_ms(), 1000);
  EXPECT_EQ(info.closed_by(), "broken");

  // Closed: no holder, closed_ms() > 0, and nobody takes it meanwhile.
  dlock::Info seen = op.inspect("broken");
  EXPECT_TRUE(seen.is_free());
  EXPECT_GT(seen.closed_ms(), 0);
  EXPECT_EQ(seen.closed_by(), "broken");
  EXPECT_FALSE(op.try_acquire("broken"));

  // The holder hears it at its next renewal.
  ASSERT_EQ(lost_future.wait_for(5s), std::future_status::ready) << "on_lost was not called";
  EXPECT_FALSE(lock.valid());
  EXPECT_EQ(lock.lost_cause().rfind("broken", 0), 0u) << lock.lost_cause();
  EXPECT_NE(lock.lost_cause().find("disk full on db-3"), std::string::npos) << lock.lost_cause();
  for (int i = 0; i < 500 && client.metrics_text().find("dlock_losses_total{cause=\"broken\"} 1\n") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(client.metrics_text().find("dlock_losses_total{cause=\"broken\"} 1\n"), std::string::npos)
      << client.metrics_text();
  EXPECT_EQ(CodeOf([&] { lock.release(); }), DLOCK_NOT_HELD);
  EXPECT_EQ(calls.load(), 1);

  // Once the broken lease would have ended, the name opens, with a greater token.
  dlock::Lock after = op.acquire("broken", dlock::Options().wait(5s));
  EXPECT_GT(after.fencing_token(), token);
  EXPECT_EQ(op.inspect("broken").closed_ms(), 0);
  EXPECT_EQ(op.inspect("broken").closed_by(), "");
  after.release();

  // now: free at once, taken with a greater token; the holder hears of it all the same.
  std::promise<void> lost_now;
  auto lost_now_future = lost_now.get_future();
  std::atomic<int> now_calls{0};
  dlock::Lock victim = client.acquire(
      "broken-now", dlock::Options().lease(1000ms).heartbeat(250ms).owner("holder-7").on_lost(
                        [&](const std::string&, uint64_t) {
                          if (now_calls.fetch_add(1) == 0) lost_now.set_value();
                        }));
  const uint64_t victim_token = victim.fencing_token();
  info = op.break_lock("broken-now", "failover", true);
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].fencing_token, victim_token);
  EXPECT_EQ(info.closed_ms(), 0);
  EXPECT_EQ(info.closed_by(), "");
  dlock::Lock taken = op.acquire("broken-now");
  EXPECT_GT(taken.fencing_token(), victim_token);
  ASSERT_EQ(lost_now_future.wait_for(5s), std::future_status::ready) << "on_lost was not called";
  EXPECT_EQ(victim.lost_cause().rfind("broken", 0), 0u) << victim.lost_cause();
  EXPECT_NE(victim.lost_cause().find("failover"), std::string::npos) << victim.lost_cause();
  EXPECT_EQ(CodeOf([&] { victim.release(); }), DLOCK_NOT_HELD);
  EXPECT_EQ(op.inspect("broken-now").holders.at(0).fencing_token, taken.fencing_token());
  taken.release();

  // A free name; bad input, with and without exceptions.
  info = op.break_lock("never-held");
  EXPECT_TRUE(info.is_free());
  EXPECT_EQ(info.closed_ms(), 0);
  op.break_lock("never-held", std::string(DLOCK_MAX_REASON_BYTES, 'r'));  // at most is fine
  std::string message;
  EXPECT_EQ(CodeOf([&] { op.break_lock("x", std::string(DLOCK_MAX_REASON_BYTES + 1, 'r')); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("reason"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { op.break_lock("x", std::string("a\0b", 3)); }, &message), DLOCK_EINVAL);
  EXPECT_NE(message.find("reason"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { op.break_lock(""); }), DLOCK_EINVAL);
  std::error_code ec;
  info = op.break_lock("", ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_TRUE(info.is_free());
  info = op.break_lock("never-held", "why", ec);
  EXPECT_FALSE(ec);
  info = op.break_lock("never-held", "why", true, ec);
  EXPECT_FALSE(ec);
  op.close();
  op.break_lock("x", ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
}

TEST_F(HppTest, RequestReleaseReachesAListeningHolderWhichMayReleaseInItsHandler) {
  dlock::Client client(redis_.url());
  dlock::Client asker(redis_.url());
  EXPECT_NE(asker.capabilities() & DLOCK_CAP_RELEASE_REQUEST, 0u);
  std::mutex mu;
  std::optional<dlock::Lock> holder;
  std::promise<std::string> heard;  // "name|reason|release status"
  auto heard_future = heard.get_future();
  std::atomic<int> calls{0};
  {
    std::lock_guard<std::mutex> guard(mu);
    holder = client.acquire(
        "asked", dlock::Options().on_release_requested([&](std::string_view name, std::string_view reason) {
          if (calls.fetch_add(1) != 0) return;
          dlock_status s;
          {
            std::lock_guard<std::mutex> guard(mu);
            s = holder->release(std::nothrow);  // from the handler, on the background thread
            holder.reset();
          }
          heard.set_value(std::string(name) + "|" + std::string(reason) + "|" + dlock_status_str(s));
        }));
  }
  // The holder's subscription is live a round trip after its acquire: ask every 150 ms until
  // it is heard, at most 5 s. Every ask finds the holder until it has let go.
  EXPECT_TRUE(asker.request_release("asked", "deploy #42"));
  for (int i = 0; i < 33 && heard_future.wait_for(150ms) != std::future_status::ready; ++i) {
    if (!asker.request_release("asked", "deploy #42")) break;
  }
  ASSERT_EQ(heard_future.wait_for(1s), std::future_status::ready) << "the handler was not called";
  EXPECT_EQ(heard_future.get(), "asked|deploy #42|DLOCK_OK");
  EXPECT_TRUE(asker.inspect("asked").is_free());
  {
    std::lock_guard<std::mutex> guard(mu);
    EXPECT_FALSE(holder.has_value());
  }
  EXPECT_FALSE(asker.request_release("asked", "again"));  // free now: nobody to ask
  EXPECT_EQ(calls.load(), 1);

  // A free name, with and without exceptions; bad input.
  EXPECT_FALSE(asker.request_release("never-held"));
  std::error_code ec;
  EXPECT_FALSE(asker.request_release("never-held", "why", ec));
  EXPECT_FALSE(ec);
  std::string message;
  EXPECT_EQ(CodeOf([&] { asker.request_release("x", std::string(DLOCK_MAX_REASON_BYTES + 1, 'r')); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find("reason"), std::string::npos) << message;
  EXPECT_EQ(CodeOf([&] { asker.request_release("x", std::string("a\0b", 3)); }), DLOCK_EINVAL);
  EXPECT_FALSE(asker.request_release("", ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  asker.close();
  EXPECT_FALSE(asker.request_release("x", ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
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

// ----- values and leader election ---------------------------------------------------------

// NUL first, last and inside, and bytes that are not UTF-8.
const std::string kBinary("\0addr\xff\0:8080\n\0", 15);

// Waits up to 20 s for pred(); its last value.
template <typename Pred>
bool WaitFor(Pred pred) {
  for (auto end = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < end;) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST_F(HppTest, AValueSetAtAcquireIsWhatInspectShowsAndSetValueReplacesIt) {
  ASSERT_EQ(kBinary.size(), 15u);
  dlock::Client client(redis_.url()), observer(redis_.url());
  dlock::Lock lock = client.acquire("hpp/value", dlock::Options().lease(5s).owner("node-a").value(kBinary));
  dlock::Info info = observer.inspect("hpp/value");
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].value, kBinary);
  EXPECT_EQ(info.holders[0].owner, "node-a");
  EXPECT_EQ(info.holders[0].fencing_token, lock.fencing_token());

  lock.set_value("replaced");
  EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, "replaced");
  lock.extend(8s);  // the lease renewed, the value kept
  EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, "replaced");
  lock.set_value(std::string_view());  // removes it
  EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, "");
  lock.set_value(kBinary);
  EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, kBinary);
  lock.release();
  EXPECT_TRUE(observer.inspect("hpp/value").is_free());  // gone with the hold
  EXPECT_EQ(CodeOf([&] { lock.set_value("late"); }), DLOCK_EINVAL);  // an empty Lock

  // No value: "". A Mutex's options carry one to each of its holds.
  dlock::Lock plain = client.acquire("hpp/value");
  EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, "");
  plain.release();
  dlock::Mutex m(client, "hpp/value", dlock::Options().value("from a Mutex"));
  {
    std::lock_guard<dlock::Mutex> g(m);
    EXPECT_EQ(observer.inspect("hpp/value").holders.at(0).value, "from a Mutex");
  }
}

TEST_F(HppTest, ADeposedHoldersSetValueThrowsNotHeldAndChangesNothing) {
  dlock::Client client(redis_.url()), other(redis_.url());
  // No heartbeats: nothing in the background notices the loss; set_value's own check does.
  dlock::Lock deposed = client.acquire("hpp/deposed", dlock::Options().value("old leader").no_heartbeat());
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/deposed")}), "1");  // behind its back
  dlock::Lock successor = other.acquire("hpp/deposed", dlock::Options().value("new leader"));
  std::string message;
  EXPECT_EQ(CodeOf([&] { deposed.set_value("still me"); }, &message), DLOCK_NOT_HELD);
  EXPECT_FALSE(message.empty());
  dlock::Info info = other.inspect("hpp/deposed");
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].value, "new leader");
  EXPECT_EQ(info.holders[0].fencing_token, successor.fencing_token());
  EXPECT_FALSE(deposed.valid());
  std::error_code ec;
  deposed.set_value("again", ec);
  EXPECT_EQ(ec, DLOCK_NOT_HELD);
  EXPECT_EQ(ec, std::errc::operation_not_permitted);
  EXPECT_EQ(CodeOf([&] { deposed.release(); }), DLOCK_NOT_HELD);
  successor.release();
}

TEST_F(HppTest, TooLongAValueIsEinval) {
  EXPECT_EQ(dlock_limit_value(DLOCK_LIMIT_VALUE_BYTES), static_cast<uint64_t>(DLOCK_MAX_VALUE_BYTES));
  dlock::Client client(redis_.url());
  const std::string longest(DLOCK_MAX_VALUE_BYTES, '\0');
  const std::string too_long = longest + "x";
  std::string message;
  EXPECT_EQ(CodeOf([&] { client.acquire("hpp/long", dlock::Options().value(too_long)); }, &message),
            DLOCK_EINVAL);
  EXPECT_NE(message.find(std::to_string(DLOCK_MAX_VALUE_BYTES)), std::string::npos) << message;
  EXPECT_TRUE(client.inspect("hpp/long").is_free());
  dlock::Lock lock = client.acquire("hpp/long", dlock::Options().value(longest));
  EXPECT_EQ(client.inspect("hpp/long").holders.at(0).value, longest);
  EXPECT_EQ(CodeOf([&] { lock.set_value(too_long); }), DLOCK_EINVAL);
  std::error_code ec;
  lock.set_value(too_long, ec);
  EXPECT_EQ(ec, std::errc::invalid_argument);
  EXPECT_EQ(client.inspect("hpp/long").holders.at(0).value, longest);  // unchanged
  EXPECT_TRUE(lock.valid());
}

TEST_F(HppTest, CampaignLeaderProclaimResign) {
  dlock::Client client(redis_.url()), observer(redis_.url());
  EXPECT_FALSE(observer.leader("hpp/election").has_value());  // nobody leads
  dlock::Lock leadership =
      client.campaign("hpp/election", dlock::Options().lease(5s).owner("node-a").value("10.0.0.7:8080"));
  ASSERT_TRUE(leadership);
  std::optional<dlock::Holder> leader = observer.leader("hpp/election");
  ASSERT_TRUE(leader.has_value());
  EXPECT_EQ(leader->value, "10.0.0.7:8080");
  EXPECT_EQ(leader->owner, "node-a");
  EXPECT_EQ(leader->fencing_token, leadership.fencing_token());  // the term
  ASSERT_TRUE(leader->remaining.has_value());
  EXPECT_LE(*leader->remaining, 5000ms);
  leadership.set_value("10.0.0.7:9090");  // proclaim
  EXPECT_EQ(observer.leader("hpp/election").value().value, "10.0.0.7:9090");
  const uint64_t term = leadership.fencing_token();
  leadership.release();  // resign
  EXPECT_FALSE(observer.leader("hpp/election").has_value());
  dlock::Lock again = client.campaign("hpp/election");  // a new term, above the last
  EXPECT_GT(again.fencing_token(), term);
  EXPECT_EQ(observer.leader("hpp/election").value().value, "");
  again.release();

  // What a leadership is not: shared, or one of n permits. The options' wait is ignored.
  EXPECT_EQ(CodeOf([&] { client.campaign("hpp/election", dlock::Options().shared()); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { client.campaign("hpp/election", dlock::Options().permits(2)); }), DLOCK_EINVAL);
  EXPECT_FALSE(observer.leader("hpp/election").has_value());
  dlock::Lock waited = client.campaign("hpp/election", dlock::Options().no_wait());
  EXPECT_TRUE(waited);
  waited.release();
  // A name held shared, or a semaphore, is no election.
  dlock::Lock reader = client.acquire("hpp/election", dlock::Options().shared());
  std::string message;
  EXPECT_EQ(CodeOf([&] { observer.leader("hpp/election"); }, &message), DLOCK_EINVAL);
  EXPECT_NE(message.find("shared"), std::string::npos) << message;
  reader.release();
  EXPECT_EQ(CodeOf([&] { observer.leader(""); }), DLOCK_EINVAL);

  // The std::error_code forms.
  std::error_code ec = DLOCK_EIO;
  EXPECT_FALSE(observer.leader("hpp/election", ec).has_value());
  EXPECT_FALSE(ec);  // nobody leads: not an error
  dlock::Lock by_ec = client.campaign("hpp/election", dlock::Options().value("ec"), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(observer.leader("hpp/election", ec).value().fencing_token, by_ec.fencing_token());
  EXPECT_FALSE(ec);
  by_ec.set_value("ec, proclaimed", ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(observer.leader("hpp/election", ec).value().value, "ec, proclaimed");
  EXPECT_FALSE(observer.leader("", ec).has_value());
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_FALSE(client.campaign("hpp/election2", dlock::Options().permits(3), ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  dlock::Client closed(redis_.url());
  closed.close();
  EXPECT_FALSE(closed.campaign("hpp/election", ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
}

TEST_F(HppTest, TheSecondCandidateLeadsOnceTheFirstResignsWithAGreaterTerm) {
  dlock::Client a(redis_.url()), b(redis_.url());
  dlock::Lock first = a.campaign("hpp/election", dlock::Options().value("first"));
  const uint64_t first_term = first.fencing_token();
  std::future<dlock::Lock> second = std::async(std::launch::async, [&] {
    return b.campaign("hpp/election", dlock::Options().value(std::string("second\0", 7)));
  });
  ASSERT_TRUE(WaitFor([&] { return redis_.Cli({"ZCARD", Key("hpp/election") + ":line"}) == "1"; }))
      << "the second candidate is not waiting";
  EXPECT_EQ(second.wait_for(0s), std::future_status::timeout);  // waiting while the first leads
  EXPECT_EQ(a.leader("hpp/election").value().value, "first");
  first.release();  // resign
  ASSERT_EQ(second.wait_for(20s), std::future_status::ready);
  dlock::Lock leadership = second.get();
  EXPECT_GT(leadership.fencing_token(), first_term);
  std::optional<dlock::Holder> leader = a.leader("hpp/election");
  ASSERT_TRUE(leader.has_value());
  EXPECT_EQ(leader->fencing_token, leadership.fencing_token());
  EXPECT_EQ(leader->value, std::string("second\0", 7));
  leadership.release();
  EXPECT_FALSE(a.leader("hpp/election").has_value());
}

// ----- observing a leadership ----------------------------------------------------------------

// What an observe handler was told, in order.
class Seen {
 public:
  void Add(const std::optional<dlock::Holder>& leader) {
    {
      std::lock_guard<std::mutex> g(mu_);
      all_.push_back(leader);
    }
    cv_.notify_all();
  }
  std::vector<std::optional<dlock::Holder>> All() {
    std::lock_guard<std::mutex> g(mu_);
    return all_;
  }
  size_t Count() { return All().size(); }
  // Waits up to `limit` until the last report satisfies pred.
  template <typename Pred>
  bool AwaitLast(Pred pred, std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, limit, [&] { return !all_.empty() && pred(all_.back()); });
  }
  // The reports, for failure messages: "term:value" or "nobody".
  std::string Describe() {
    std::string out;
    for (const auto& l : All()) out += (l ? std::to_string(l->fencing_token) + ":" + l->value : "nobody") + " ";
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<dlock::Holder>> all_;
};

TEST_F(HppTest, ObserveReportsTheLeaderThenEachChangeAndNothingAfterCancel) {
  dlock::Client a(redis_.url()), b(redis_.url()), watcher(redis_.url());
  const std::string name = "hpp/observed";
  {  // nobody leads: the first report says so
    Seen nobody;
    dlock::Observer early = watcher.observe(name, [&nobody](const std::optional<dlock::Holder>& l) { nobody.Add(l); });
    EXPECT_TRUE(early);
    EXPECT_NE(early.native_handle(), nullptr);
    ASSERT_TRUE(nobody.AwaitLast([](const auto& l) { return !l; })) << "no first report";
  }
  dlock::Lock leadership = a.campaign(name, dlock::Options().lease(5s).owner("node-a").value("one"));
  const uint64_t term = leadership.fencing_token();

  // Started while a leads: a's leadership first.
  Seen seen;
  dlock::Observer observer = watcher.observe(name, [&seen](const std::optional<dlock::Holder>& l) { seen.Add(l); });
  ASSERT_TRUE(seen.AwaitLast([&](const auto& l) { return l && l->fencing_token == term; })) << seen.Describe();
  {
    std::optional<dlock::Holder> first = seen.All().front();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->value, "one");
    EXPECT_EQ(first->owner, "node-a");
    ASSERT_TRUE(first->remaining.has_value());
    EXPECT_LE(*first->remaining, 5000ms);
  }

  // A new value (proclaim): within the poll interval (500 ms) and the read, well under 1 s.
  leadership.set_value(kBinary);
  EXPECT_TRUE(seen.AwaitLast([&](const auto& l) { return l && l->fencing_token == term && l->value == kBinary; }, 1s))
      << "the new value took over a second: " << seen.Describe();
  // Resigned: nobody leads.
  leadership.release();
  EXPECT_TRUE(seen.AwaitLast([](const auto& l) { return !l; })) << seen.Describe();
  // A new leader, with a greater term.
  dlock::Lock again = b.campaign(name, dlock::Options().value("three"));
  EXPECT_GT(again.fencing_token(), term);
  EXPECT_TRUE(seen.AwaitLast([&](const auto& l) { return l && l->fencing_token == again.fencing_token() && l->value == "three"; }))
      << seen.Describe();
  uint64_t highest = 0;
  for (const auto& l : seen.All()) {
    if (!l) continue;
    EXPECT_GE(l->fencing_token, highest) << "a term went backwards: " << seen.Describe();
    highest = l->fencing_token;
  }

  // Cancelled: nothing more, whatever changes.
  observer.cancel();
  EXPECT_FALSE(observer);
  observer.cancel();  // idempotent
  const size_t at_cancel = seen.Count();
  again.set_value("four");
  again.release();
  std::this_thread::sleep_for(1200ms);  // over two poll intervals
  EXPECT_EQ(seen.Count(), at_cancel) << "a report after cancel returned: " << seen.Describe();
}

TEST_F(HppTest, CancelWaitsForARunningHandlerAndAHandlerMayCancelItself) {
  dlock::Client a(redis_.url()), watcher(redis_.url());
  const std::string name = "hpp/observed-cancel";
  dlock::Lock leadership = a.campaign(name, dlock::Options().value("one"));

  // Cancelled from another thread while a report runs: cancel returns after it.
  std::atomic<bool> running{false};
  std::atomic<int> slow_calls{0};
  dlock::Observer slow = watcher.observe(name, [&](const std::optional<dlock::Holder>&) {
    running = true;
    std::this_thread::sleep_for(300ms);
    ++slow_calls;
    running = false;
  });
  ASSERT_TRUE(WaitFor([&] { return running.load(); })) << "no first report";
  slow.cancel();
  EXPECT_FALSE(running.load()) << "cancel returned while the handler ran";
  EXPECT_EQ(slow_calls.load(), 1);

  // The handler cancels its own Observer (and its captures live on until it returns).
  auto big_capture = std::make_shared<std::string>(1000, 'x');
  std::promise<void> assigned;
  std::shared_future<void> ready = assigned.get_future().share();
  std::promise<void> done;
  auto done_future = done.get_future();
  std::atomic<int> calls{0};
  dlock::Observer self_cancelling;
  self_cancelling = watcher.observe(name, [&, ready, big_capture](const std::optional<dlock::Holder>&) {
    ready.wait();  // until the Observer is in self_cancelling
    if (calls.fetch_add(1) > 0) return;
    self_cancelling.cancel();
    EXPECT_EQ(big_capture->size(), 1000u);  // still here, after the Observer let go of it
    done.set_value();
  });
  EXPECT_EQ(big_capture.use_count(), 2);  // ours + the Observer's copy
  assigned.set_value();
  ASSERT_EQ(done_future.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(self_cancelling);
  EXPECT_TRUE(WaitFor([&] { return big_capture.use_count() == 1; }));  // freed once the call returned
  leadership.set_value("two");
  leadership.release();
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(HppTest, ObserveHandlerIsOwnedByTheObserverAndMayThrow) {
  dlock::Client a(redis_.url()), watcher(redis_.url());
  const std::string name = "hpp/observed-owned";
  auto sentinel = std::make_shared<int>(0);
  std::atomic<int> calls{0};
  dlock::Observer observer;
  {
    // The caller's function object dies right after observe.
    dlock::LeaderHandler handler = [sentinel, &calls](const std::optional<dlock::Holder>&) {
      ++calls;
      throw std::runtime_error("handler failure");  // caught and dropped: no crash
    };
    observer = watcher.observe(name, handler);
  }
  EXPECT_EQ(sentinel.use_count(), 2);  // ours + the Observer's copy
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  dlock::Lock leadership = a.campaign(name);
  EXPECT_TRUE(WaitFor([&] { return calls.load() == 2; })) << "a handler that threw was not called again";
  leadership.release();
  EXPECT_TRUE(WaitFor([&] { return calls.load() == 3; }));
  // Move: the observation goes with the handle; the moved-from Observer is empty.
  dlock::Observer moved = std::move(observer);
  EXPECT_FALSE(observer);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(moved);
  EXPECT_EQ(sentinel.use_count(), 2);
  moved = dlock::Observer();  // move-assignment over it cancels
  EXPECT_EQ(sentinel.use_count(), 1);
  a.campaign(name).release();
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(calls.load(), 3);
  dlock::Lock after = watcher.acquire("hpp/observed-after");  // the client still works
  EXPECT_TRUE(after);
}

TEST_F(HppTest, AnObserverMayOutliveItsClient) {
  std::atomic<int> calls{0};
  dlock::Observer observer;
  {
    dlock::Client watcher(redis_.url());
    observer = watcher.observe("hpp/observed-orphan", [&calls](const std::optional<dlock::Holder>&) { ++calls; });
    ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  }  // closed: the observation ends
  const int at_close = calls.load();
  dlock::Client a(redis_.url());
  a.campaign("hpp/observed-orphan").release();
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(calls.load(), at_close);
  EXPECT_TRUE(observer);  // still to be freed
  observer.cancel();
  EXPECT_FALSE(observer);
}

TEST_F(HppTest, ObserveErrors) {
  dlock::Client watcher(redis_.url());
  auto ignore = [](const std::optional<dlock::Holder>&) {};
  std::string message;
  EXPECT_EQ(CodeOf([&] { (void)watcher.observe("", ignore); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { (void)watcher.observe(std::string("a\0b", 3), ignore); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { (void)watcher.observe("hpp/x", dlock::LeaderHandler()); }, &message), DLOCK_EINVAL);
  EXPECT_NE(message.find("handler"), std::string::npos) << message;

  std::error_code ec = DLOCK_EIO;
  dlock::Observer ok = watcher.observe("hpp/observed-ec", ignore, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(ok);
  EXPECT_FALSE(watcher.observe("", ignore, ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_FALSE(watcher.observe("hpp/x", nullptr, ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  dlock::Client closed(redis_.url());
  closed.close();
  EXPECT_FALSE(closed.observe("hpp/x", ignore, ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { (void)closed.observe("hpp/x", ignore); }), DLOCK_EINVAL);
}

// ----- std::error_code ----------------------------------------------------------------------

TEST(HppErrorCodeTest, CategoryNamesAndMapsTheStatuses) {
  const std::error_category& cat = dlock::category();
  EXPECT_STREQ(cat.name(), "dlock");
  EXPECT_EQ(&cat, &dlock::category());
  for (int v = DLOCK_OK; v <= DLOCK_EINTERNAL; ++v) {
    EXPECT_EQ(cat.message(v), dlock_status_str(static_cast<dlock_status>(v)));
  }
  std::error_code ec = DLOCK_NOT_HELD;
  EXPECT_EQ(&ec.category(), &cat);
  EXPECT_EQ(ec.value(), DLOCK_NOT_HELD);
  EXPECT_EQ(ec.message(), "DLOCK_NOT_HELD");
  EXPECT_EQ(ec, DLOCK_NOT_HELD);
  EXPECT_EQ(ec, std::errc::operation_not_permitted);
  EXPECT_EQ(std::error_code(DLOCK_NOT_ACQUIRED), std::errc::device_or_resource_busy);
  EXPECT_EQ(std::error_code(DLOCK_EIO), std::errc::io_error);
  EXPECT_EQ(std::error_code(DLOCK_ECANCELLED), std::errc::operation_canceled);
  EXPECT_NE(std::error_code(DLOCK_EBACKEND), std::errc::io_error);
  EXPECT_FALSE(std::error_code(DLOCK_OK));
}

TEST_F(HppTest, ErrorCodeOverloadsDoNotThrow) {
  std::error_code ec;
  dlock::Client bad("bogus://x", ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_FALSE(bad);
  EXPECT_NE(dlock::last_error().find("bogus"), std::string::npos) << dlock::last_error();

  dlock::Client holder(redis_.url(), ec);
  ASSERT_FALSE(ec) << ec.message();
  dlock::Client contender(redis_.url());
  dlock::Lock held = holder.acquire("hpp/ec", ec);
  ASSERT_FALSE(ec);
  ASSERT_TRUE(held);
  EXPECT_FALSE(contender.acquire("hpp/ec", ec));
  EXPECT_EQ(ec, DLOCK_NOT_ACQUIRED);
  ec = DLOCK_EIO;
  EXPECT_FALSE(contender.try_acquire("hpp/ec", dlock::Options().wait(50ms), ec));
  EXPECT_FALSE(ec);  // held is not an error for try_acquire
  EXPECT_FALSE(contender.acquire(std::string("a\0b", 3), ec));
  EXPECT_EQ(ec, DLOCK_EINVAL);
  EXPECT_NE(dlock::last_error().find("NUL"), std::string::npos) << dlock::last_error();
  EXPECT_EQ(contender.inspect("hpp/ec", ec).holders.size(), 1u);
  EXPECT_FALSE(ec);
  contender.inspect("", ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);

  held.extend(-1ms, ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
  held.extend(5s, ec);
  EXPECT_FALSE(ec);
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/ec")}), "1");
  held.release(ec);
  EXPECT_EQ(ec, DLOCK_NOT_HELD);
  EXPECT_FALSE(held);
  held.release(ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
}

TEST_F(HppTest, HeaderBuiltWithoutExceptionsWorks) {
  EXPECT_TRUE(hpp_noexceptions::BuiltWithoutExceptions());
  EXPECT_EQ(hpp_noexceptions::Run(redis_.url()), "");
}

// ----- Mutex and SharedMutex ----------------------------------------------------------------

TEST_F(HppTest, MutexLocksAndUnlocks) {
  dlock::Client client(redis_.url());
  dlock::Mutex m(client, "hpp/mutex", dlock::Options().lease(5s).owner("hpp-mutex"));
  EXPECT_EQ(m.name(), "hpp/mutex");
  EXPECT_EQ(m.fencing_token(), 0u);
  EXPECT_FALSE(m.valid());
  m.lock();
  const uint64_t first = m.fencing_token();
  EXPECT_GT(first, 0u);
  EXPECT_TRUE(m.valid());
  EXPECT_GT(m.remaining(), 0ms);
  EXPECT_LE(m.remaining(), 5000ms);
  EXPECT_EQ(m.last_status(), DLOCK_OK);
  EXPECT_NE(redis_.Cli({"GET", Key("hpp/mutex")}).find("hpp-mutex"), std::string::npos);
  m.unlock();
  EXPECT_EQ(m.last_status(), DLOCK_OK);
  EXPECT_EQ(m.fencing_token(), 0u);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/mutex")}), "0");
  {
    std::lock_guard<dlock::Mutex> guard(m);
    EXPECT_GT(m.fencing_token(), first);  // the token of the current hold
  }
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/mutex")}), "0");
  {
    std::unique_lock<dlock::Mutex> lk(m, std::defer_lock);
    EXPECT_TRUE(lk.try_lock());
    lk.unlock();
    EXPECT_TRUE(lk.try_lock_for(100ms));
  }
  // Unlocking what is not held does not throw: it is the last status.
  m.unlock();
  EXPECT_EQ(m.last_status(), DLOCK_EINVAL);
}

TEST_F(HppTest, MutexTryLockIsFalseWhileAnotherClientHolds) {
  dlock::Client a(redis_.url()), b(redis_.url());
  dlock::Mutex mine(a, "hpp/busy"), theirs(b, "hpp/busy");
  ASSERT_TRUE(mine.try_lock());
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(theirs.try_lock());  // one try, no wait
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
  EXPECT_EQ(theirs.last_status(), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(theirs.fencing_token(), 0u);
  std::error_code ec = DLOCK_EIO;
  EXPECT_FALSE(theirs.try_lock(ec));
  EXPECT_FALSE(ec);
  // A second try through the same object, from another thread, fails at once too.
  bool second = true;
  std::thread([&] { second = mine.try_lock(); }).join();
  EXPECT_FALSE(second);
  mine.unlock();
  EXPECT_TRUE(theirs.try_lock());
  theirs.unlock();
}

TEST_F(HppTest, MutexTryLockForIsBounded) {
  dlock::Client a(redis_.url()), b(redis_.url());
  dlock::Mutex mine(a, "hpp/bounded"), theirs(b, "hpp/bounded");
  mine.lock();
  auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(theirs.try_lock_for(300ms));
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  started = std::chrono::steady_clock::now();
  EXPECT_FALSE(theirs.try_lock_until(std::chrono::system_clock::now() + 300ms));
  took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  // A time already past is one try.
  EXPECT_FALSE(theirs.try_lock_until(std::chrono::steady_clock::now() - 1s));
  EXPECT_FALSE(theirs.try_lock_for(-5s));
  // A wait that outlasts the hold gets the lock when it is released.
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    mine.unlock();
  });
  started = std::chrono::steady_clock::now();
  EXPECT_TRUE(theirs.try_lock_for(10s));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  releaser.join();
  EXPECT_EQ(mine.last_status(), DLOCK_OK);
  theirs.unlock();
}

TEST_F(HppTest, MutexUnlockOfALostLockDoesNotThrowAndIsReported) {
  dlock::Client client(redis_.url());
  std::atomic<int> calls{0};
  std::atomic<uint64_t> lost_token{0};
  std::string lost_name;
  dlock::Mutex m(client, "hpp/lost", dlock::Options().lease(10s).no_heartbeat().on_lost(
                                         [&](const std::string& name, uint64_t token) {
                                           lost_name = name;
                                           lost_token = token;
                                           ++calls;
                                         }));
  {
    std::lock_guard<dlock::Mutex> guard(m);
    ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/lost")}), "1");
  }  // unlock finds it lost: no exception
  EXPECT_EQ(m.last_status(), DLOCK_NOT_HELD);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(lost_name, "hpp/lost");
  EXPECT_GT(lost_token.load(), 0u);
  // The next hold is reported on its own, once, through unlock(ec) too.
  m.lock();
  const uint64_t second = m.fencing_token();
  EXPECT_GT(second, lost_token.load());
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/lost")}), "1");
  std::error_code ec;
  m.unlock(ec);
  EXPECT_EQ(ec, DLOCK_NOT_HELD);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(lost_token.load(), second);
  // A clean hold is not reported.
  m.lock();
  m.unlock();
  EXPECT_EQ(m.last_status(), DLOCK_OK);
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(HppTest, MutexLossFoundByTheHeartbeatsIsReportedOnce) {
  dlock::Client client(redis_.url());
  std::atomic<int> calls{0};
  std::promise<void> lost;
  auto lost_future = lost.get_future();
  dlock::Mutex m(client, "hpp/lost-hb", dlock::Options().lease(600ms).heartbeat(150ms).on_lost(
                                            [&](const std::string&, uint64_t) {
                                              if (calls.fetch_add(1) == 0) lost.set_value();
                                            }));
  m.lock();
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/lost-hb")}), "1");
  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(m.valid());
  m.unlock();
  EXPECT_EQ(m.last_status(), DLOCK_NOT_HELD);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(HppTest, MutexErrorsThrowFromLockButNotFromUnlock) {
  dlock::Client client(redis_.url());
  dlock::Mutex bad_name(client, "");
  EXPECT_EQ(CodeOf([&] { bad_name.lock(); }), DLOCK_EINVAL);
  EXPECT_EQ(CodeOf([&] { bad_name.try_lock(); }), DLOCK_EINVAL);
  EXPECT_EQ(bad_name.last_status(), DLOCK_EINVAL);
  std::error_code ec;
  bad_name.lock(ec);
  EXPECT_EQ(ec, DLOCK_EINVAL);
  dlock::Client closed(redis_.url());
  dlock::Mutex m(closed, "hpp/closed");
  m.lock();
  closed.close();  // releases the hold on the server
  m.unlock();
  EXPECT_EQ(m.last_status(), DLOCK_NOT_HELD);
  EXPECT_EQ(CodeOf([&] { m.lock(); }), DLOCK_EINVAL);
}

TEST_F(HppTest, ScopedLockOverTwoMutexes) {
  dlock::Client a(redis_.url()), b(redis_.url());
  dlock::Mutex accounts(a, "hpp/accounts"), ledger(a, "hpp/ledger");
  dlock::Mutex their_accounts(b, "hpp/accounts"), their_ledger(b, "hpp/ledger");
  {
    std::scoped_lock both(accounts, ledger);
    EXPECT_GT(accounts.fencing_token(), 0u);
    EXPECT_GT(ledger.fencing_token(), 0u);
    EXPECT_FALSE(their_accounts.try_lock());
    EXPECT_FALSE(their_ledger.try_lock());
  }
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/accounts")}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hpp/ledger")}), "0");
  // std::lock's back-off: the other side holds one of the two for a while.
  their_ledger.lock();
  std::thread releaser([&] {
    std::this_thread::sleep_for(300ms);
    their_ledger.unlock();
  });
  {
    std::scoped_lock both(accounts, ledger);
    EXPECT_GT(ledger.fencing_token(), 0u);
  }
  releaser.join();
}

TEST_F(HppTest, MutexIsSharedByTheThreadsOfAProcess) {
  dlock::Client client(redis_.url()), other(redis_.url());
  dlock::Mutex m(client, "hpp/threads"), m2(other, "hpp/threads");
  // Atomics: the two objects exclude each other through the server, which TSan cannot see.
  std::atomic<int> inside{0}, max_inside{0}, total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      dlock::Mutex& mine = t % 2 ? m : m2;
      for (int i = 0; i < 10; ++i) {
        std::lock_guard<dlock::Mutex> guard(mine);
        int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(1ms);
        --inside;
        ++total;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(total.load(), 40);
  EXPECT_EQ(max_inside.load(), 1);
}

TEST_F(HppTest, ConditionVariableAnyWaitsOnAMutex) {
  dlock::Client client(redis_.url());
  dlock::Mutex m(client, "hpp/cv");
  std::condition_variable_any cv;
  bool ready = false;
  std::thread producer([&] {
    std::this_thread::sleep_for(100ms);
    std::lock_guard<dlock::Mutex> guard(m);
    ready = true;
    cv.notify_one();
  });
  {
    std::unique_lock<dlock::Mutex> lk(m);
    EXPECT_TRUE(cv.wait_for(lk, 10s, [&] { return ready; }));
    EXPECT_GT(m.fencing_token(), 0u);
  }
  producer.join();
}

TEST_F(HppTest, SharedMutexReadersAndWriters) {
  dlock::Client a(redis_.url()), b(redis_.url()), c(redis_.url());
  dlock::SharedMutex ra(a, "hpp/rw"), rb(b, "hpp/rw"), w(c, "hpp/rw");
  {
    std::shared_lock<dlock::SharedMutex> one(ra), two(rb);
    EXPECT_GT(ra.fencing_token(), 0u);
    EXPECT_GT(rb.fencing_token(), ra.fencing_token());
    EXPECT_EQ(b.inspect("hpp/rw").holders.size(), 2u);
    EXPECT_TRUE(w.try_lock_shared());  // readers together
    w.unlock_shared();
    // (Before the writer's wait below: a waiting writer keeps new readers out for a while.)
    EXPECT_FALSE(w.try_lock());
    EXPECT_FALSE(w.try_lock_for(200ms));
    // Local readers of one object share its one hold on the server.
    std::thread([&] {
      std::shared_lock<dlock::SharedMutex> three(ra, 1s);
      EXPECT_TRUE(three.owns_lock());
    }).join();
    EXPECT_EQ(b.inspect("hpp/rw").holders.size(), 2u);
    EXPECT_EQ(ra.last_status(), DLOCK_OK);
  }
  EXPECT_TRUE(b.inspect("hpp/rw").is_free());
  {
    std::unique_lock<dlock::SharedMutex> writing(w);
    EXPECT_FALSE(ra.try_lock_shared());
    EXPECT_FALSE(ra.try_lock_shared_for(100ms));
    EXPECT_FALSE(ra.try_lock_shared_until(std::chrono::system_clock::now() + 100ms));
    EXPECT_EQ(ra.last_status(), DLOCK_NOT_ACQUIRED);
  }
  // A reader's hold found lost: the last local reader's unlock_shared reports it.
  ra.lock_shared();
  ASSERT_EQ(redis_.Cli({"DEL", Key("hpp/rw") + ":holds"}), "1");
  ra.unlock_shared();
  EXPECT_EQ(ra.last_status(), DLOCK_NOT_HELD);
  ra.unlock_shared();
  EXPECT_EQ(ra.last_status(), DLOCK_EINVAL);
}

TEST(HppVersionTest, MatchesTheHeader) {
  EXPECT_EQ(dlock::version(), std::to_string(DLOCK_VERSION_MAJOR) + "." +
                                  std::to_string(DLOCK_VERSION_MINOR) + "." +
                                  std::to_string(DLOCK_VERSION_PATCH));
}

}  // namespace
