// Job rules (issue 37), on every backend: what a scheduled job or a deploy step relies on.
// max_hold_ms: heartbeats keep a lock only so long, and its loss says why.
#include <thread>

#include "conformance/conformance.h"
#include "queue_util.h"

namespace dlock_test {
namespace {

class Jobs : public StyleTest {};

// Heartbeats keep the lock past its lease until max_hold, then stop: the lock ends with the
// lease its last renewal gave, is reported lost with the cause max_hold within max_hold +
// lease, and the name is free on the server soon after.
TEST_P(Jobs, MaxHoldStopsTheRenewalsAndTheLossSaysSo) {
  constexpr int64_t kLeaseMs = 800, kMaxHoldMs = 1200;
  auto c = Open();
  Client other(url());
  const std::string name = Name("max-hold");
  Options o;
  o.lease(kLeaseMs).heartbeat(200).max_hold(kMaxHoldMs);
  c->ReportLosses(o.mutable_get());
  const auto start = Clock::now();
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();

  // Past its first lease, the heartbeats have renewed it: it is held, and nobody else gets it.
  c->Pass(std::chrono::milliseconds(kLeaseMs + 200));  // runs the loop, in the styles that own one
  if (MsSince(start) < kMaxHoldMs) {  // else a busy machine slept through: nothing to say here
    EXPECT_EQ(dlock_lock_is_valid(l), 1) << "the renewals stopped before max_hold";
    EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_NOT_ACQUIRED) << "taken before max_hold";
  }

  LossReport lost = c->AwaitLoss(std::chrono::milliseconds(kMaxHoldMs + kLeaseMs + 10000));
  ASSERT_EQ(lost.count, 1) << "the loss at max_hold was not reported";
  const int64_t at = MsSince(start);
  EXPECT_GE(at, kMaxHoldMs) << "lost before max_hold";
  EXPECT_LT(at, kMaxHoldMs + kLeaseMs + kCallBoundMs) << "held well past max_hold + lease";
  const char* cause = dlock_lock_lost_cause(l);
  ASSERT_NE(cause, nullptr);
  EXPECT_EQ(std::string(cause).rfind("max_hold: ", 0), 0u) << cause;
  char text[65536];
  size_t needed = 0;
  ASSERT_EQ(dlock_client_metrics_text(c->get(), text, sizeof text, &needed), DLOCK_OK);
  EXPECT_NE(std::string(text).find("dlock_losses_total{cause=\"max_hold\"} 1\n"), std::string::npos) << text;

  // The server's lease ended too (a drift after the local deadline): another client takes it,
  // with a greater token.
  Attempt next;
  EXPECT_TRUE(WaitFor([&] {
    next = TryToTake(other.get(), name);
    return next.status == DLOCK_OK;
  }, std::chrono::milliseconds(kLeaseMs + kCallBoundMs)))
      << next.error;
  EXPECT_GT(next.token, dlock_lock_fencing_token(l));
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
}

// A maximum hold needs a lease that can end and heartbeats to stop; an extend to no expiry is
// refused; a value past ten years is refused by its setter.
TEST_P(Jobs, MaxHoldWithoutALeaseIsRefusedNamingTheOption) {
  auto c = Open();
  Options o;
  o.lease(0).max_hold(1000);
  dlock_lock* l = nullptr;
  EXPECT_EQ(c->Acquire(Name("max-hold-no-lease").c_str(), o.get(), &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("max_hold_ms"), std::string::npos) << c->last_error();
  EXPECT_EQ(l, nullptr);
  // Nor without heartbeats, which are what stop at the maximum hold.
  Options unrenewed;
  unrenewed.lease(1000).heartbeat(0).max_hold(1000);
  EXPECT_EQ(c->Acquire(Name("max-hold-no-heartbeats").c_str(), unrenewed.get(), &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("max_hold_ms"), std::string::npos) << c->last_error();
  // And an extend to no expiry would outlast it.
  Options held;
  held.lease(5000).max_hold(10000);
  ASSERT_EQ(c->Acquire(Name("max-hold-extend").c_str(), held.get(), &l), DLOCK_OK) << c->last_error();
  EXPECT_EQ(c->Extend(l, 0), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("max_hold_ms"), std::string::npos) << c->last_error();
  EXPECT_EQ(c->Extend(l, 5000), DLOCK_OK) << c->last_error();
  EXPECT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  dlock_options* raw = dlock_options_new();
  EXPECT_EQ(dlock_options_set_max_hold_ms(raw, UINT64_MAX), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("max_hold_ms"), std::string::npos) << dlock_last_error();
  dlock_options_free(raw);
}

// min_hold_ms and lock_delay_ms, where the backend offers them (the rest refuse them, naming
// the option). Each is asserted against a start taken before the acquire was sent: the server's
// acquire came later, so the name may not be free before start + the rule.
class JobRules : public BackendTest {
 protected:
  bool Offers(uint32_t cap) {
    Client probe(url());
    return (dlock_client_capabilities(probe.get()) & cap) != 0;
  }
  // Tries once every 20 ms until it acquires (or limit passes); the ms since start it took.
  int64_t FirstAcquire(dlock_client* c, const std::string& name, Clock::time_point start,
                       std::chrono::milliseconds limit, Attempt* got) {
    EXPECT_TRUE(WaitFor([&] {
      *got = TryToTake(c, name);
      return got->status == DLOCK_OK;
    }, limit)) << got->error;
    return MsSince(start);
  }
};

// A release at about 100 ms of a 1 s minimum hold returns at once and leaves the name closed,
// with no holder, until about 1 s: then another owner takes it, with a greater token.
TEST_P(JobRules, AMinHoldKeepsTheNameTakenAfterAnEarlyRelease) {
  if (!Offers(DLOCK_CAP_MIN_HOLD)) GTEST_SKIP() << "no min_hold_ms here";
  constexpr int64_t kMinHoldMs = 1000;
  Client holder(url()), other(url());
  const std::string name = Name("min-hold");
  Options o;
  o.lease(10000).min_hold(kMinHoldMs);
  const auto start = Clock::now();
  Hold early(holder.get(), name, o.get());
  ASSERT_TRUE(early.held()) << early.error();
  const uint64_t token = early.token();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto released_at = Clock::now();
  ASSERT_EQ(early.Release(), DLOCK_OK) << early.error();
  EXPECT_LT(MsSince(released_at), kCallBoundMs) << "the early release waited";

  if (MsSince(start) < kMinHoldMs / 2) {  // else a busy machine slept through the min hold
    Snapshot closed = Inspect(other.get(), name);
    EXPECT_TRUE(closed.holders.empty()) << closed;
    dlock_info* info = nullptr;
    ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK);
    EXPECT_GT(dlock_info_closed_ms(info), 0);
    EXPECT_LE(dlock_info_closed_ms(info), kMinHoldMs);
    EXPECT_STREQ(dlock_info_closed_by(info), "min_hold");
    dlock_info_free(info);
    Attempt refused = TryToTake(other.get(), name);
    EXPECT_EQ(refused.status, DLOCK_NOT_ACQUIRED) << "free before the min hold ended";
    EXPECT_NE(refused.error.find("min_hold"), std::string::npos) << refused.error;
  }
  // A waiter is told the time left, and sleeps through it.
  Attempt next;
  const int64_t took = FirstAcquire(other.get(), name, start, std::chrono::milliseconds(kMinHoldMs + kCallBoundMs), &next);
  EXPECT_GE(took, kMinHoldMs - 20) << "free before acquire + min_hold";
  EXPECT_GT(next.token, token);
}

// The name stays taken for the min hold even when the holder crashed with a shorter lease.
TEST_P(JobRules, AMinHoldOutlivesACrashedHoldersShorterLease) {
  if (!Offers(DLOCK_CAP_MIN_HOLD)) GTEST_SKIP() << "no min_hold_ms here";
  constexpr int64_t kLeaseMs = 300, kMinHoldMs = 1500;
  Client holder(url()), other(url());
  const std::string name = Name("min-hold-crash");
  Options o;
  o.lease(kLeaseMs).heartbeat(0).min_hold(kMinHoldMs);
  const auto start = Clock::now();
  dlock_lock* crashed = nullptr;  // never renewed, never released: as a crashed holder's
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  Attempt next;
  const int64_t took = FirstAcquire(other.get(), name, start, std::chrono::milliseconds(kMinHoldMs + kCallBoundMs), &next);
  EXPECT_GE(took, kMinHoldMs - 20) << "free when the lease ran out, before acquire + min_hold";
  EXPECT_GT(next.token, dlock_lock_fencing_token(crashed));
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
}

// After an unclean end (the lease ran out) nobody acquires the name for the lock-delay; after
// a release, the next owner takes it at once.
TEST_P(JobRules, ALockDelayFollowsAnUncleanEndAndNotARelease) {
  if (!Offers(DLOCK_CAP_LOCK_DELAY)) GTEST_SKIP() << "no lock_delay_ms here";
  constexpr int64_t kLeaseMs = 600, kDelayMs = 1000;
  Client holder(url()), other(url());
  const std::string name = Name("lock-delay");
  Options o;
  o.lease(kLeaseMs).heartbeat(0).lock_delay(kDelayMs);

  Hold clean(holder.get(), name, o.get());
  ASSERT_TRUE(clean.held()) << clean.error();
  ASSERT_EQ(clean.Release(), DLOCK_OK) << clean.error();
  Attempt handoff = TryToTake(other.get(), name);
  ASSERT_EQ(handoff.status, DLOCK_OK) << "a release is a clean end: " << handoff.error;

  const auto start = Clock::now();
  dlock_lock* crashed = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  const uint64_t crashed_token = dlock_lock_fencing_token(crashed);
  // Released once its lease ran out here: an unclean end all the same, and the delay stands.
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 50));
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
  EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_NOT_ACQUIRED) << "a late release cleared the delay";
  // Once the crashed hold is gone (etcd keeps a lease to the next whole second), the name shows
  // closed by the lock-delay: surely so before lease + delay has passed.
  Snapshot seen;
  ASSERT_TRUE(WaitFor([&] {
    seen = Inspect(other.get(), name);
    return seen.holders.empty();
  }, std::chrono::milliseconds(kLeaseMs + kCallBoundMs))) << seen;
  const bool surely_closed = MsSince(start) < kLeaseMs + kDelayMs - 200;
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK);
  if (surely_closed || dlock_info_closed_ms(info) > 0) {
    EXPECT_GT(dlock_info_closed_ms(info), 0);
    EXPECT_STREQ(dlock_info_closed_by(info), "lock_delay");
  }
  dlock_info_free(info);
  Attempt next;
  const int64_t took = FirstAcquire(other.get(), name, start, std::chrono::milliseconds(kLeaseMs + kDelayMs + kCallBoundMs), &next);
  EXPECT_GE(took, kLeaseMs + kDelayMs - 20) << "taken before the lease + lock-delay";
  EXPECT_GT(next.token, crashed_token);
}

// A shared hold that ended uncleanly keeps the name closed for its lock-delay, even when the
// other shared hold is released cleanly meanwhile.
TEST_P(JobRules, ASharedHoldsLockDelayOutlivesAnothersCleanRelease) {
  if (!Offers(DLOCK_CAP_LOCK_DELAY) || !Offers(DLOCK_CAP_SHARED)) GTEST_SKIP() << "no shared lock_delay_ms here";
  constexpr int64_t kLeaseMs = 500, kDelayMs = 1000;
  Client crashed_client(url()), other(url()), writer(url());
  const std::string name = Name("lock-delay-shared");
  Options ruled, plain;
  ruled.lease(kLeaseMs).heartbeat(0).lock_delay(kDelayMs).shared();
  plain.lease(30000).shared();
  const auto start = Clock::now();
  dlock_lock* crashed = nullptr;
  ASSERT_EQ(dlock_acquire(crashed_client.get(), name.c_str(), ruled.get(), &crashed), DLOCK_OK) << dlock_last_error();
  Hold stays(other.get(), name, plain.get());
  ASSERT_TRUE(stays.held()) << stays.error();
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 100));
  EXPECT_EQ(TryToTake(writer.get(), name).status, DLOCK_NOT_ACQUIRED) << "taken while a shared hold stands";
  ASSERT_EQ(stays.Release(), DLOCK_OK) << stays.error();
  Attempt next;
  const int64_t took = FirstAcquire(writer.get(), name, start, std::chrono::milliseconds(kLeaseMs + kDelayMs + kCallBoundMs), &next);
  EXPECT_GE(took, kLeaseMs + kDelayMs - 20) << "taken before the crashed shared hold's lease + lock-delay";
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
}

// Renewals carry the lock-delay past each new lease.
TEST_P(JobRules, RenewalsCarryTheLockDelay) {
  if (!Offers(DLOCK_CAP_LOCK_DELAY)) GTEST_SKIP() << "no lock_delay_ms here";
  constexpr int64_t kLeaseMs = 500, kDelayMs = 800;
  Client holder(url()), other(url());
  const std::string name = Name("lock-delay-renewed");
  Options o;
  o.lease(kLeaseMs).heartbeat(0).lock_delay(kDelayMs);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto renewed = Clock::now();
  ASSERT_EQ(dlock_extend(l, kLeaseMs), DLOCK_OK) << dlock_last_error();
  Attempt next;
  const int64_t took = FirstAcquire(other.get(), name, renewed, std::chrono::milliseconds(kLeaseMs + kDelayMs + kCallBoundMs), &next);
  EXPECT_GE(took, kLeaseMs + kDelayMs - 20) << "the delay did not follow the renewed lease";
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

// Bad values are refused, naming the option; a backend without a rule refuses it at acquire.
TEST_P(JobRules, BadRulesAreRefusedNamingTheOption) {
  Client c(url());
  dlock_options* raw = dlock_options_new();
  EXPECT_EQ(dlock_options_set_lock_delay_ms(raw, DLOCK_MAX_LOCK_DELAY_MS + 1), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("lock_delay_ms"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_options_set_min_hold_ms(raw, UINT64_MAX), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("min_hold_ms"), std::string::npos) << dlock_last_error();
  dlock_options_free(raw);
  EXPECT_EQ(dlock_limit_value(DLOCK_LIMIT_LOCK_DELAY_MS), static_cast<uint64_t>(DLOCK_MAX_LOCK_DELAY_MS));

  Options longer;
  longer.lease(1000).min_hold(2000).max_hold(1000);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), Name("min-over-max").c_str(), longer.get(), &l), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("min_hold_ms 2000 is more than max_hold_ms 1000"),
            std::string::npos)
      << dlock_last_error();
  for (uint32_t cap : {DLOCK_CAP_MIN_HOLD, DLOCK_CAP_LOCK_DELAY}) {
    if (Offers(cap)) continue;
    Options ruled;
    if (cap == DLOCK_CAP_MIN_HOLD) ruled.min_hold(1000); else ruled.lock_delay(1000);
    EXPECT_EQ(dlock_acquire(c.get(), Name("unoffered").c_str(), ruled.get(), &l), DLOCK_EINVAL);
    EXPECT_NE(std::string(dlock_last_error()).find(cap == DLOCK_CAP_MIN_HOLD ? "min_hold_ms" : "lock_delay_ms"),
              std::string::npos)
        << dlock_last_error();
  }
}

// An acquire nobody took (its queue freed before its outcome was popped) is given back as if it
// had not happened: its min hold leaves no marker, and the name is free at once.
TEST_P(JobRules, AnAcquireNobodyTookLeavesNoMinHoldBehind) {
  if (!Offers(DLOCK_CAP_MIN_HOLD)) GTEST_SKIP() << "no min_hold_ms here";
  Client c(url()), observer(url());
  const std::string name = Name("given-back");
  Options o;
  o.lease(5000).min_hold(60000);
  dlock_queue* q = nullptr;
  ASSERT_EQ(dlock_queue_new(&q), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(c.get(), name.c_str(), o.get(), q, 1), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return Inspect(observer.get(), name).holders.size() == 1; }, std::chrono::milliseconds(5000)))
      << "the queued acquire never held the name";
  ASSERT_TRUE(Readable(dlock_queue_fd(q), std::chrono::milliseconds(5000))) << "no outcome queued";
  dlock_queue_free(q);  // the outcome never popped: its lock is given back in the background
  EXPECT_TRUE(WaitFor([&] { return TryToTake(observer.get(), name).status == DLOCK_OK; },
                      std::chrono::milliseconds(5000)))
      << "the name stayed closed by the min hold of an acquire nobody took: " << Inspect(observer.get(), name);
}

INSTANTIATE_TEST_SUITE_P(Conformance, JobRules, ::testing::ValuesIn(AllBackends()), BackendTestName);

INSTANTIATE_TEST_SUITE_P(Conformance, Jobs, ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

}  // namespace
}  // namespace dlock_test
