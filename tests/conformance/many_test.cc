// Several names at once, all or none (issue 38 part 1, dlock_acquire_many), on every backend:
// a caller holds every name or none, two callers asking in opposite orders never deadlock nor
// overlap, and a loss names the lock it hit.
#include <algorithm>
#include <atomic>
#include <thread>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

class AcquireMany : public BackendTest {};

std::vector<std::string> NamesOf(dlock_lock* const* locks, size_t n) {
  std::vector<std::string> out;
  for (size_t k = 0; k < n; ++k) out.push_back(locks[k] != nullptr ? dlock_lock_name(locks[k]) : "(null)");
  return out;
}

// Another holder of one name: nothing is taken (the name before it is given back); once it is
// free, every name is held, each with its own token, in the caller's order; release_many frees
// them all and the handles.
TEST_P(AcquireMany, AllOrNone) {
  Client c(url()), other(url());
  const std::string a = Name("many-a"), b = Name("many-b");
  Options o;
  o.lease(5000);
  Hold blocker(other.get(), b, o.get());
  ASSERT_TRUE(blocker.held()) << blocker.error();
  const char* names[] = {a.c_str(), b.c_str()};
  dlock_lock* locks[2] = {reinterpret_cast<dlock_lock*>(1), reinterpret_cast<dlock_lock*>(1)};
  // What is given back leaves no rule behind (where there are rules: not etcd's layout=mutex).
  const bool rules = (backend().capabilities & DLOCK_CAP_MIN_HOLD) != 0;
  Options ruled;
  ruled.lease(5000);
  if (rules) ruled.min_hold(60000);
  EXPECT_EQ(dlock_acquire_many(c.get(), names, 2, ruled.get(), locks), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find(b), std::string::npos) << dlock_last_error();
  EXPECT_EQ(locks[0], nullptr);
  EXPECT_EQ(locks[1], nullptr);
  EXPECT_TRUE(Inspect(other.get(), a).free()) << "the first name was kept: " << Inspect(other.get(), a);
  EXPECT_EQ(TryToTake(other.get(), a).status, DLOCK_OK) << "the first name was given back with its min hold";
  ASSERT_EQ(blocker.Release(), DLOCK_OK);

  const char* reversed[] = {b.c_str(), a.c_str()};
  ASSERT_EQ(dlock_acquire_many(c.get(), reversed, 2, o.get(), locks), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(NamesOf(locks, 2), (std::vector<std::string>{b, a}));
  EXPECT_NE(dlock_lock_fencing_token(locks[0]), 0u);
  EXPECT_NE(dlock_lock_fencing_token(locks[1]), 0u);
  EXPECT_EQ(Inspect(other.get(), a).holders.size(), 1u);
  EXPECT_EQ(Inspect(other.get(), b).holders.size(), 1u);
  EXPECT_EQ(dlock_release_many(locks, 2), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(locks[0], nullptr);
  EXPECT_EQ(locks[1], nullptr);
  EXPECT_TRUE(Inspect(other.get(), a).free());
  EXPECT_TRUE(Inspect(other.get(), b).free());
}

// Shared and semaphore holds of several names, with a value each: taken together and alongside
// another caller's, refused together when one name is held the other way (the name before it
// left as it was: its holders and their values), freed together.
TEST_P(AcquireMany, SharedAndSemaphoreHoldsWithTheirValues) {
  Client c(url()), other(url());
  if ((dlock_client_capabilities(c.get()) & DLOCK_CAP_SHARED) == 0) GTEST_SKIP() << "no shared holds";
  const std::string a = Name("many-shared-a"), b = Name("many-shared-b");
  const char* names[] = {a.c_str(), b.c_str()};
  Options readers;
  readers.lease(5000).shared().value("first");
  dlock_lock* mine[2] = {nullptr, nullptr};
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 2, readers.get(), mine), DLOCK_OK) << dlock_last_error();
  Options more;
  more.lease(5000).shared().value("second");
  dlock_lock* theirs[2] = {nullptr, nullptr};
  ASSERT_EQ(dlock_acquire_many(other.get(), names, 2, more.get(), theirs), DLOCK_OK) << dlock_last_error();
  for (const std::string& name : {a, b}) {
    Snapshot s = Inspect(c.get(), name);
    ASSERT_EQ(s.holders.size(), 2u) << s;
    std::vector<std::string> values{s.holders[0].value, s.holders[1].value};
    std::sort(values.begin(), values.end());
    EXPECT_EQ(values, (std::vector<std::string>{"first", "second"})) << s;
  }
  ASSERT_EQ(dlock_release_many(theirs, 2), DLOCK_OK) << dlock_last_error();

  // b exclusive elsewhere: a shared acquire of {a, b} is refused, and a keeps only c's hold.
  ASSERT_EQ(dlock_release(mine[1]), DLOCK_OK) << dlock_last_error();
  Options writer;
  writer.lease(5000);
  Hold blocker(other.get(), b, writer.get());
  ASSERT_TRUE(blocker.held()) << blocker.error();
  EXPECT_EQ(dlock_acquire_many(other.get(), names, 2, more.get(), theirs), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find(b), std::string::npos) << dlock_last_error();
  Snapshot left = Inspect(c.get(), a);
  ASSERT_EQ(left.holders.size(), 1u) << "a's hold taken for the refused call stayed: " << left;
  EXPECT_EQ(left.holders[0].value, "first") << left;
  ASSERT_EQ(blocker.Release(), DLOCK_OK);
  ASSERT_EQ(dlock_release(mine[0]), DLOCK_OK) << dlock_last_error();

  if ((dlock_client_capabilities(c.get()) & DLOCK_CAP_PERMITS) == 0) return;
  // A semaphore of one permit on each name: the second caller gets neither.
  Options one;
  one.lease(5000).permits(1);
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 2, one.get(), mine), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire_many(other.get(), names, 2, one.get(), theirs), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(theirs[0], nullptr);
  ASSERT_EQ(dlock_release_many(mine, 2), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire_many(other.get(), names, 2, one.get(), theirs), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release_many(theirs, 2), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(Inspect(c.get(), a).free());
  EXPECT_TRUE(Inspect(c.get(), b).free());
}

// Two clients take {a, b} and {b, a} at once, waiting, round after round: both finish, and
// their holds never overlap.
TEST_P(AcquireMany, OppositeOrdersNeverDeadlockNorOverlap) {
  const int rounds = kUnderSanitizer ? 50 : backend().name == "redis" ? 1000 : 100;
  const std::string a = Name("many-x"), b = Name("many-y");
  std::atomic<int> inside{0}, overlaps{0}, failures{0};
  std::mutex mu;
  std::string first_error;
  auto worker = [&](std::vector<std::string> order) {
    Client c(url());
    Options o;
    o.lease(10000).wait(30000);
    std::vector<const char*> names;
    for (const std::string& n : order) names.push_back(n.c_str());
    for (int i = 0; i < rounds; ++i) {
      dlock_lock* locks[2] = {nullptr, nullptr};
      dlock_status s = dlock_acquire_many(c.get(), names.data(), 2, o.get(), locks);
      if (s != DLOCK_OK) {
        std::lock_guard<std::mutex> lock(mu);
        if (failures++ == 0) first_error = dlock_last_error();
        return;
      }
      if (inside.fetch_add(1) != 0) overlaps++;
      std::this_thread::yield();
      inside.fetch_sub(1);
      if (dlock_release_many(locks, 2) != DLOCK_OK) failures++;
    }
  };
  std::thread one(worker, std::vector<std::string>{a, b});
  std::thread two(worker, std::vector<std::string>{b, a});
  one.join();
  two.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_EQ(overlaps.load(), 0) << "two callers held both names at once";
}

// Released together, each hold ends as a single release ends it, cleanly: a lock-delay does not
// follow (both names free at once), and a min hold stays (both names closed until it ends).
TEST_P(AcquireMany, ReleasedTogetherEachEndsCleanly) {
  Client c(url()), other(url());
  const uint32_t caps = dlock_client_capabilities(c.get());
  if ((caps & DLOCK_CAP_MIN_HOLD) == 0 || (caps & DLOCK_CAP_LOCK_DELAY) == 0) GTEST_SKIP() << "no job rules";
  const std::string a = Name("many-rules-a"), b = Name("many-rules-b");
  const char* names[] = {a.c_str(), b.c_str()};
  dlock_lock* locks[2] = {nullptr, nullptr};
  Options delayed;
  delayed.lease(5000).lock_delay(60000);
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 2, delayed.get(), locks), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release_many(locks, 2), DLOCK_OK) << dlock_last_error();
  for (const std::string& name : {a, b}) {
    EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_OK) << name << ": a clean end kept its lock-delay";
  }
  Options ruled;
  ruled.lease(5000).min_hold(60000);
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 2, ruled.get(), locks), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release_many(locks, 2), DLOCK_OK) << dlock_last_error();
  for (const std::string& name : {a, b}) {
    EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_NOT_ACQUIRED) << name << " opened before its min hold ended";
    EXPECT_EQ(dlock_break_with(other.get(), name.c_str(), "test", DLOCK_BREAK_NOW, nullptr), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_OK) << dlock_last_error();
  }
}

// A hold broken under one name is that name's loss: release_many says which, and still
// releases the other.
TEST_P(AcquireMany, ALossNamesItsLock) {
  Client c(url()), op(url());
  const std::string a = Name("many-kept"), b = Name("many-broken");
  Options o;
  o.lease(5000).heartbeat(0);
  const char* names[] = {a.c_str(), b.c_str()};
  dlock_lock* locks[2] = {nullptr, nullptr};
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 2, o.get(), locks), DLOCK_OK) << dlock_last_error();
  if ((backend().capabilities & DLOCK_CAP_BREAK) != 0) {
    ASSERT_EQ(dlock_break_with(op.get(), b.c_str(), "test", DLOCK_BREAK_NOW, nullptr), DLOCK_OK) << dlock_last_error();
  } else {  // etcd's layout=mutex: deleted behind its holder's back
    ASSERT_TRUE(server().DeleteLock(b));
  }
  EXPECT_EQ(dlock_release_many(locks, 2), DLOCK_NOT_HELD);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find(b), std::string::npos) << error;
  EXPECT_EQ(error.find(a), std::string::npos) << "the kept lock was named as lost: " << error;
  EXPECT_TRUE(Inspect(op.get(), a).free()) << "the kept lock was not released";
}

TEST_P(AcquireMany, BadInput) {
  Client c(url());
  const std::string a = Name("many-bad");
  dlock_lock* locks[3] = {nullptr, nullptr, nullptr};
  const char* twice[] = {a.c_str(), a.c_str()};
  EXPECT_EQ(dlock_acquire_many(c.get(), twice, 2, nullptr, locks), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("twice"), std::string::npos) << dlock_last_error();
  const char* with_null[] = {a.c_str(), nullptr};
  EXPECT_EQ(dlock_acquire_many(c.get(), with_null, 2, nullptr, locks), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("names[1]"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_acquire_many(c.get(), twice, 0, nullptr, locks), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_many(c.get(), nullptr, 1, nullptr, locks), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_many(c.get(), twice, 1, nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_many(nullptr, twice, 1, nullptr, locks), DLOCK_EINVAL);
  EXPECT_TRUE(Inspect(c.get(), a).free()) << "bad input took a lock";
  EXPECT_EQ(dlock_release_many(nullptr, 0), DLOCK_OK);
  EXPECT_EQ(dlock_release_many(nullptr, 2), DLOCK_EINVAL);
  EXPECT_EQ(dlock_release_many(locks, 3), DLOCK_OK);  // NULL entries are skipped
}

INSTANTIATE_TEST_SUITE_P(Conformance, AcquireMany, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
