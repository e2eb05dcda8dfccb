// Job rules (issue 37), on every backend: what a scheduled job or a deploy step relies on.
// max_hold_ms: heartbeats keep a lock only so long, and its loss says why.
#include "conformance/conformance.h"

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

INSTANTIATE_TEST_SUITE_P(Conformance, Jobs, ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

}  // namespace
}  // namespace dlock_test
