// Job rules on DynamoDB, against a real dynalite: what the item keeps (minHoldMs and lockDelayMs
// with a hold, a min-hold marker after an early release), renewals recording what is left of
// the min hold, the rules judged on a waiter's own clock as leases are, shared holds, and a
// break clearing them. (What every backend does is in conformance/jobs_test.cc.)
#include <chrono>
#include <string>
#include <thread>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class DynamoRulesTest : public DynamoTest {
 protected:
  // One try: the status, and the error when refused.
  static dlock_status Try(dlock_client* c, const std::string& name, Options& o, dlock_lock** l,
                          std::string* error = nullptr) {
    *l = nullptr;
    o.wait(0);  // one try
    dlock_status s = dlock_acquire(c, name.c_str(), o.get(), l);
    if (error != nullptr) *error = s == DLOCK_OK ? "" : dlock_last_error();
    return s;
  }
  static int64_t ClosedMs(dlock_client* c, const std::string& name, uint32_t* holders, std::string* by) {
    dlock_info* info = nullptr;
    if (dlock_inspect(c, name.c_str(), &info) != DLOCK_OK) return -1;
    const int64_t ms = dlock_info_closed_ms(info);
    *holders = dlock_info_holders(info);
    *by = dlock_info_closed_by(info);
    dlock_info_free(info);
    return ms;
  }
  // Tries every 20 ms until it acquires (or limit passes): the ms since start, -1 when never.
  static int64_t FirstAcquire(dlock_client* c, const std::string& name, Options& o, Clock::time_point start,
                              std::chrono::milliseconds limit, dlock_lock** l) {
    while (Clock::now() - start < limit) {
      if (Try(c, name, o, l) == DLOCK_OK) return ElapsedMs(start);
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
};

TEST_F(DynamoRulesTest, AnEarlyReleaseLeavesAMinHoldMarkerThatABreakClears) {
  Client holder(url()), other(url());
  Options o;
  o.lease(10000).min_hold(3000).owner("cron");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "job", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  nlohmann::json item = Item("job");
  EXPECT_EQ(N(item, "minHoldMs"), 3000u) << item.dump();
  EXPECT_FALSE(item.contains("lockDelayMs"));
  const uint64_t fence = N(item, "fence");

  const auto released = Clock::now();
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_LT(ElapsedMs(released), 1000) << "the early release waited";
  item = Item("job");
  EXPECT_FALSE(item.contains("owner")) << item.dump();
  EXPECT_FALSE(item.contains("minHoldMs")) << item.dump();
  EXPECT_EQ(N(item, "fence"), fence);
  ASSERT_TRUE(item.contains("closed")) << item.dump();
  EXPECT_EQ(S(item["closed"]["M"], "by"), "min_hold");
  EXPECT_GT(N(item["closed"]["M"], "leaseMs"), 2000u);
  EXPECT_LE(N(item["closed"]["M"], "leaseMs"), 3000u);

  // Closed to everyone, with no holder; a waiter hears why.
  uint32_t holders = 99;
  std::string by;
  const int64_t closed = ClosedMs(other.get(), "job", &holders, &by);
  EXPECT_GT(closed, 2000);
  EXPECT_LE(closed, 3000);
  EXPECT_EQ(holders, 0u);
  EXPECT_EQ(by, "min_hold");
  Options plain;
  std::string error;
  dlock_lock* refused = nullptr;
  EXPECT_EQ(Try(other.get(), "job", plain, &refused, &error), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(error.find("min_hold"), std::string::npos) << error;
  Options shared;
  shared.shared();
  EXPECT_EQ(Try(other.get(), "job", shared, &refused), DLOCK_NOT_ACQUIRED);

  // A break (not now) clears it: no hold to wait for, so the name is free at once.
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_break_with(other.get(), "job", "", 0, &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_closed_ms(info), 0);
  dlock_info_free(info);
  EXPECT_FALSE(Item("job").contains("closed"));
  dlock_lock* next = nullptr;
  ASSERT_EQ(Try(other.get(), "job", plain, &next), DLOCK_OK);
  EXPECT_GT(dlock_lock_fencing_token(next), token);
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
}

TEST_F(DynamoRulesTest, RenewalsRecordWhatIsLeftOfTheMinHoldAndKeepTheDelay) {
  Client holder(url());
  Options o;
  o.lease(5000).heartbeat(0).min_hold(2000).lock_delay(700);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "renewed", o.get(), &l), DLOCK_OK) << dlock_last_error();
  nlohmann::json item = Item("renewed");
  EXPECT_EQ(N(item, "minHoldMs"), 2000u);
  EXPECT_EQ(N(item, "lockDelayMs"), 700u);
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(dlock_extend(l, 5000), DLOCK_OK) << dlock_last_error();
  item = Item("renewed");
  EXPECT_LE(N(item, "minHoldMs"), 1500u) << item.dump();
  EXPECT_GT(N(item, "minHoldMs"), 1000u) << item.dump();
  EXPECT_EQ(N(item, "lockDelayMs"), 700u);
  // Past the min hold, a renewal drops it, and a release leaves no marker.
  std::this_thread::sleep_for(1600ms);
  ASSERT_EQ(dlock_extend(l, 5000), DLOCK_OK) << dlock_last_error();
  item = Item("renewed");
  EXPECT_FALSE(item.contains("minHoldMs")) << item.dump();
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  item = Item("renewed");
  EXPECT_FALSE(item.contains("closed")) << item.dump();
  EXPECT_FALSE(item.contains("lockDelayMs")) << item.dump();
  // A hold with no lease never ends uncleanly: no lock-delay is stored with it.
  Options forever;
  forever.lease(0).lock_delay(700);
  ASSERT_EQ(dlock_acquire(holder.get(), "forever", forever.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(Item("forever").contains("lockDelayMs"));
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A crashed hold with a lock-delay: live for its lease, then closed by lock_delay (no holder),
// and free only after lease + delay on the waiter's clock.
TEST_F(DynamoRulesTest, ACrashedHoldIsClosedByItsLockDelayAfterItsLease) {
  constexpr int64_t kLeaseMs = 500, kDelayMs = 1000;
  Client holder(url()), other(url());
  Options o;
  o.lease(kLeaseMs).heartbeat(0).lock_delay(kDelayMs).owner("crashed");
  dlock_lock* crashed = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(holder.get(), "delayed", o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  Options plain;
  std::string error;
  dlock_lock* l = nullptr;
  EXPECT_EQ(Try(other.get(), "delayed", plain, &l, &error), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(error.find("lock_delay"), std::string::npos) << "held by its lease: " << error;
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 150));
  if (ElapsedMs(start) < kLeaseMs + kDelayMs / 2) {
    EXPECT_EQ(Try(other.get(), "delayed", plain, &l, &error), DLOCK_NOT_ACQUIRED);
    EXPECT_NE(error.find("lock_delay"), std::string::npos) << error;
    uint32_t holders = 99;
    std::string by;
    const int64_t closed = ClosedMs(other.get(), "delayed", &holders, &by);
    EXPECT_EQ(holders, 0u);
    EXPECT_EQ(by, "lock_delay");
    EXPECT_GT(closed, 0);
    EXPECT_LE(closed, kDelayMs);
  }
  const int64_t took = FirstAcquire(other.get(), "delayed", plain, start, 5000ms, &l);
  ASSERT_GE(took, 0) << "never free";
  EXPECT_GE(took, kLeaseMs + kDelayMs) << "taken before lease + lock-delay";
  EXPECT_LT(took, kLeaseMs + kDelayMs + 1500);
  nlohmann::json item = Item("delayed");
  EXPECT_FALSE(item.contains("lockDelayMs")) << "the new holder has no rules: " << item.dump();
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A crashed holder's min hold outlasts its lease; inspect shows it as closed by min_hold.
TEST_F(DynamoRulesTest, ACrashedHoldKeepsItsMinHold) {
  constexpr int64_t kLeaseMs = 300, kMinHoldMs = 1500;
  Client holder(url()), other(url());
  Options o;
  o.lease(kLeaseMs).heartbeat(0).min_hold(kMinHoldMs);
  dlock_lock* crashed = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(holder.get(), "min-crash", o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 200));
  if (ElapsedMs(start) < kMinHoldMs / 2) {
    uint32_t holders = 99;
    std::string by;
    EXPECT_GT(ClosedMs(other.get(), "min-crash", &holders, &by), 0);
    EXPECT_EQ(holders, 0u);
    EXPECT_EQ(by, "min_hold");
  }
  Options plain;
  dlock_lock* l = nullptr;
  const int64_t took = FirstAcquire(other.get(), "min-crash", plain, start, 5000ms, &l);
  ASSERT_GE(took, 0);
  EXPECT_GE(took, kMinHoldMs);
  EXPECT_GT(dlock_lock_fencing_token(l), dlock_lock_fencing_token(crashed));
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
}

// Shared holds: each carries its own rules, the largest lock-delay applies, a clean release
// of one ends only its own.
TEST_F(DynamoRulesTest, SharedHoldsTheLargestLockDelayApplies) {
  Client a(url()), b(url()), c(url()), other(url());
  Options longer, shorter, clean;
  longer.shared().lease(400).heartbeat(0).lock_delay(1200);
  shorter.shared().lease(400).heartbeat(0).lock_delay(200);
  clean.shared().lease(400).heartbeat(0).lock_delay(5000);
  dlock_lock *la = nullptr, *lb = nullptr, *lc = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(a.get(), "readers", longer.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "readers", shorter.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "readers", clean.get(), &lc), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(lc), DLOCK_OK) << "a clean end: its delay goes with it";
  Options plain;
  dlock_lock* l = nullptr;
  std::string error;
  // The waiter sees the holds from now (it judges their leases on its own clock).
  EXPECT_EQ(Try(other.get(), "readers", plain, &l, &error), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(error.find("lock_delay"), std::string::npos) << "held by their leases: " << error;
  std::this_thread::sleep_for(700ms);
  if (ElapsedMs(start) < 1200) {
    EXPECT_EQ(Try(other.get(), "readers", plain, &l, &error), DLOCK_NOT_ACQUIRED);
    EXPECT_NE(error.find("lock_delay"), std::string::npos) << error;
  }
  const int64_t took = FirstAcquire(other.get(), "readers", plain, start, 6000ms, &l);
  ASSERT_GE(took, 0);
  EXPECT_GE(took, 400 + 1200) << "the largest delay applies";
  EXPECT_LT(took, 400 + 1200 + 1500) << "the released hold's delay applied";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(la), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(lb), DLOCK_NOT_HELD);
}

// Two shared holders released early: the later release writes a new marker (new record
// version) lasting at least as long as the standing one; a live shared hold beside the marker
// stays held.
TEST_F(DynamoRulesTest, SharedEarlyReleasesKeepTheLongestMinHold) {
  Client a(url()), b(url()), c(url()), other(url());
  Options shortly, longer, unruled;
  shortly.shared().lease(10000).min_hold(800);
  longer.shared().lease(10000).min_hold(2500);
  unruled.shared().lease(10000);
  dlock_lock *la = nullptr, *lb = nullptr, *lc = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "shared", shortly.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "shared", longer.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "shared", unruled.get(), &lc), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(lb), DLOCK_OK) << dlock_last_error();
  nlohmann::json item = Item("shared");
  ASSERT_TRUE(item.contains("closed")) << item.dump();
  const std::string first = S(item["closed"]["M"], "recordVersion");
  const uint64_t first_ms = N(item["closed"]["M"], "leaseMs");
  EXPECT_GT(first_ms, 1500u);
  // a's min hold ends sooner than the marker standing: a new marker, as long as the standing one.
  ASSERT_EQ(dlock_release(la), DLOCK_OK) << dlock_last_error();
  item = Item("shared");
  ASSERT_TRUE(item.contains("closed")) << item.dump();
  EXPECT_NE(S(item["closed"]["M"], "recordVersion"), first);
  EXPECT_EQ(N(item["closed"]["M"], "leaseMs"), first_ms);
  EXPECT_EQ(S(item["closed"]["M"], "by"), "min_hold");
  EXPECT_EQ(item["holds"]["M"].size(), 1u) << item.dump();
  // The last holder still holds; its release has no rule.
  EXPECT_EQ(dlock_extend(lc, 10000), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(lc), DLOCK_OK);
  Options plain;
  dlock_lock* l = nullptr;
  std::string error;
  EXPECT_EQ(Try(other.get(), "shared", plain, &l, &error), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(error.find("min_hold"), std::string::npos) << error;
  const auto start = Clock::now();
  ASSERT_GE(FirstAcquire(other.get(), "shared", plain, start, 6000ms, &l), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A shared early release over a standing marker rewrites it: a waiter that saw the standing
// marker earlier than the releaser must not find the name free before the releaser's min hold
// ends (what is left of the marker on the releaser's clock is no bound for that waiter).
TEST_F(DynamoRulesTest, ASharedEarlyReleaseRewritesAStandingMarkerForEarlierWaiters) {
  constexpr int64_t kMinHoldMs = 2000;
  Client a(url()), b(url()), waiter(url());
  Options o;
  o.shared().lease(10000).min_hold(kMinHoldMs);
  dlock_lock *la = nullptr, *lb = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(a.get(), "earlier", o.get(), &la), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_until(start + 500ms);
  ASSERT_EQ(dlock_acquire(b.get(), "earlier", o.get(), &lb), DLOCK_OK) << dlock_last_error();
  const auto b_acquired = Clock::now();  // b's min hold ends no sooner than b_acquired + kMinHoldMs
  std::this_thread::sleep_until(start + 600ms);
  // a's early release leaves a marker of ~1400 ms, which the waiter sees from now.
  ASSERT_EQ(dlock_release(la), DLOCK_OK) << dlock_last_error();
  const std::string first = S(Item("earlier")["closed"]["M"], "recordVersion");
  Options plain;
  dlock_lock* l = nullptr;
  EXPECT_EQ(Try(waiter.get(), "earlier", plain, &l), DLOCK_NOT_ACQUIRED);
  // b releases when what is left of its min hold (~1200 ms) is less than the marker's leaseMs.
  std::this_thread::sleep_until(start + 1300ms);
  ASSERT_EQ(dlock_release(lb), DLOCK_OK) << dlock_last_error();
  nlohmann::json item = Item("earlier");
  ASSERT_TRUE(item.contains("closed")) << item.dump();
  EXPECT_NE(S(item["closed"]["M"], "recordVersion"), first) << "the standing marker was kept";
  const int64_t took = FirstAcquire(waiter.get(), "earlier", plain, b_acquired, 6000ms, &l);
  ASSERT_GE(took, 0) << "never free";
  EXPECT_GE(took, kMinHoldMs) << "free before b's min hold ended";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// An acquire with lease 0 stores no lock-delay; an extend to a finite lease stores it, so a
// crash after that extend closes the name for lease + delay; an extend back to 0 removes it.
TEST_F(DynamoRulesTest, AnExtendToAFiniteLeaseStoresTheLockDelay) {
  constexpr int64_t kLeaseMs = 500, kDelayMs = 1000;
  Client holder(url()), other(url());
  Options o;
  o.lease(0).heartbeat(0).lock_delay(kDelayMs);
  dlock_lock* crashed = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "extended", o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(Item("extended").contains("lockDelayMs"));
  const auto start = Clock::now();
  ASSERT_EQ(dlock_extend(crashed, kLeaseMs), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(N(Item("extended"), "lockDelayMs"), static_cast<uint64_t>(kDelayMs));
  // No heartbeat: the holder is as good as crashed.
  Options plain;
  dlock_lock* l = nullptr;
  const int64_t took = FirstAcquire(other.get(), "extended", plain, start, 5000ms, &l);
  ASSERT_GE(took, 0) << "never free";
  EXPECT_GE(took, kLeaseMs + kDelayMs) << "taken before lease + lock-delay";
  EXPECT_LT(took, kLeaseMs + kDelayMs + 1500);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
  // A shared hold's entry: set by an extend to a finite lease, removed by one back to 0.
  Options shared;
  shared.shared().lease(0).heartbeat(0).lock_delay(700);
  ASSERT_EQ(dlock_acquire(holder.get(), "extended-shared", shared.get(), &l), DLOCK_OK) << dlock_last_error();
  auto entry = [this] {
    nlohmann::json holds = Item("extended-shared")["holds"]["M"];
    return holds.empty() ? nlohmann::json() : holds.begin().value()["M"];
  };
  EXPECT_FALSE(entry().contains("lockDelayMs")) << entry().dump();
  ASSERT_EQ(dlock_extend(l, 10000), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(N(entry(), "lockDelayMs"), 700u) << entry().dump();
  ASSERT_EQ(dlock_extend(l, 0), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(entry().contains("lockDelayMs")) << entry().dump();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A break clears the rules of a hold whose lease ran out: the name is free at once.
TEST_F(DynamoRulesTest, ABreakClearsALockDelay) {
  Client holder(url()), other(url());
  Options o;
  o.lease(300).heartbeat(0).lock_delay(30000);
  dlock_lock* crashed = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "stuck", o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  Options plain;
  dlock_lock* l = nullptr;
  EXPECT_EQ(Try(other.get(), "stuck", plain, &l), DLOCK_NOT_ACQUIRED);  // other sees it from now
  std::this_thread::sleep_for(500ms);
  std::string error;
  EXPECT_EQ(Try(other.get(), "stuck", plain, &l, &error), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(error.find("lock_delay"), std::string::npos) << error;
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_break_with(other.get(), "stuck", "clear the delay", 0, &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 1u);
  EXPECT_EQ(dlock_info_closed_ms(info), 0) << "its lease had run out for this client";
  dlock_info_free(info);
  ASSERT_EQ(Try(other.get(), "stuck", plain, &l, &error), DLOCK_OK) << error;
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
}

}  // namespace
}  // namespace dlock_test
