// Breaking a lock (issue 37, dlock_break), on every backend: an operator's takeover that the
// broken holder hears of with the cause and the reason, that never lets a new holder overlap
// one that has not heard yet (unless told to free the name now), and whose next token is greater.
#include <thread>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

// What dlock_break_with answered.
struct Broken {
  dlock_status status = DLOCK_EINTERNAL;
  std::string error;
  std::vector<Holder> holders;
  int64_t closed_ms = -1;
  std::string closed_by;
};

Broken BreakLock(dlock_client* c, const std::string& name, const char* reason, uint32_t flags) {
  Broken b;
  dlock_info* info = nullptr;
  b.status = dlock_break_with(c, name.c_str(), reason, flags, &info);
  if (b.status != DLOCK_OK) {
    b.error = dlock_last_error();
    return b;
  }
  for (uint32_t k = 0; k < dlock_info_holders(info); ++k) {
    b.holders.push_back({dlock_info_owner(info, k), dlock_info_remaining_ms(info, k),
                         dlock_info_fencing_token(info, k), ""});
  }
  b.closed_ms = dlock_info_closed_ms(info);
  b.closed_by = dlock_info_closed_by(info);
  dlock_info_free(info);
  return b;
}

bool StartsWith(const char* text, const std::string& prefix) {
  return text != nullptr && std::string(text).rfind(prefix, 0) == 0;
}

// etcd's layout=mutex has no breaks (its own tests check the refusal).
class Breaking : public StyleTest {
  void SetUp() override {
    if ((backend().capabilities & DLOCK_CAP_BREAK) == 0) GTEST_SKIP() << "no DLOCK_CAP_BREAK here";
  }
};
class BreakingOnce : public BackendTest {
  void SetUp() override {
    if ((backend().capabilities & DLOCK_CAP_BREAK) == 0) GTEST_SKIP() << "no DLOCK_CAP_BREAK here";
  }
};

// A holder with heartbeats hears of the break within its heartbeat period (plus a round trip),
// with the cause "broken" and the operator's reason. Meanwhile the name stays closed, with no
// holder, until the broken lease would have ended; then another owner takes it with a greater
// token.
TEST_P(Breaking, TheHolderHearsWithTheCauseAndTheReasonAndNobodyOverlapsIt) {
  constexpr int64_t kLeaseMs = 1000, kHeartbeatMs = 250;
  auto c = Open();
  Client operator_client(url());
  const std::string name = Name("break");
  Options o;
  o.lease(kLeaseMs).heartbeat(kHeartbeatMs).owner("nightly-report");
  c->ReportLosses(o.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);

  const auto broke_at = Clock::now();
  Broken b = BreakLock(operator_client.get(), name, "stuck since 03:00, ticket 4411", 0);
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  ASSERT_EQ(b.holders.size(), 1u);
  EXPECT_EQ(b.holders[0].owner, "nightly-report");
  EXPECT_EQ(b.holders[0].token, token);
  EXPECT_GT(b.closed_ms, 0) << "the name was freed while the broken holder may still work";
  EXPECT_LE(b.closed_ms, kLeaseMs + kSlackMs);
  EXPECT_EQ(b.closed_by, "broken");

  // Closed, with no holder: inspect says so, and an acquire is refused saying why.
  Snapshot closed = Inspect(operator_client.get(), name);
  EXPECT_TRUE(closed.holders.empty()) << closed;
  if (MsSince(broke_at) < kLeaseMs / 2) {  // else a busy machine slept through the closed time
    Attempt early = TryToTake(operator_client.get(), name);
    EXPECT_EQ(early.status, DLOCK_NOT_ACQUIRED) << "acquired while the broken holder may still work";
    EXPECT_NE(early.error.find("closed"), std::string::npos) << early.error;
    EXPECT_NE(early.error.find("broken"), std::string::npos) << early.error;
  }

  LossReport lost = c->AwaitLoss(std::chrono::milliseconds(kHeartbeatMs + kCallBoundMs));
  ASSERT_EQ(lost.count, 1) << "the broken holder was not told";
  EXPECT_TRUE(StartsWith(dlock_lock_lost_cause(l), "broken: ")) << dlock_lock_lost_cause(l);
  EXPECT_NE(std::string(dlock_lock_lost_cause(l)).find("ticket 4411"), std::string::npos)
      << dlock_lock_lost_cause(l);
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  char text[65536];
  size_t needed = 0;
  ASSERT_EQ(dlock_client_metrics_text(c->get(), text, sizeof text, &needed), DLOCK_OK);
  EXPECT_NE(std::string(text).find("dlock_losses_total{cause=\"broken\"} 1\n"), std::string::npos) << text;

  // Once the broken lease would have ended, the name is free, and the next token is greater.
  Attempt next;
  EXPECT_TRUE(WaitFor([&] {
    next = TryToTake(operator_client.get(), name);
    return next.status == DLOCK_OK;
  }, std::chrono::milliseconds(kLeaseMs + kCallBoundMs)))
      << next.error;
  EXPECT_GE(MsSince(broke_at), b.closed_ms - kSlackMs) << "free before the closed time ended";
  EXPECT_GT(next.token, token);
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
}

// --now frees the name at once, for a resource that checks fencing tokens: the new holder's
// token is greater, so the store refuses the broken holder's next write. A holder without
// heartbeats hears of the break at its next extend, with the cause and the reason.
TEST_P(BreakingOnce, NowFreesTheNameAndAFencedStoreRefusesTheBrokenHolder) {
  Client holder_client(url()), operator_client(url());
  const std::string name = Name("break-now");
  Options o;
  o.lease(30000).heartbeat(0);
  Hold broken(holder_client.get(), name, o.get());
  ASSERT_TRUE(broken.held()) << broken.error();

  // A store that keeps the greatest token it has seen and refuses writes with a smaller one.
  uint64_t store_token = 0;
  auto write = [&](uint64_t t) {
    if (t < store_token) return false;
    store_token = t;
    return true;
  };
  ASSERT_TRUE(write(broken.token()));

  Broken b = BreakLock(operator_client.get(), name, "", DLOCK_BREAK_NOW);
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  ASSERT_EQ(b.holders.size(), 1u);
  EXPECT_EQ(b.holders[0].token, broken.token());
  EXPECT_EQ(b.closed_ms, 0);
  EXPECT_EQ(b.closed_by, "");

  Hold next(operator_client.get(), name, o.get());
  ASSERT_TRUE(next.held()) << "not free at once after --now: " << next.error();
  EXPECT_GT(next.token(), broken.token());
  EXPECT_TRUE(write(next.token()));
  EXPECT_FALSE(write(broken.token())) << "the store took the broken holder's write";

  EXPECT_EQ(dlock_extend(broken.get(), 30000), DLOCK_NOT_HELD);
  EXPECT_TRUE(StartsWith(dlock_lock_lost_cause(broken.get()), "broken: ")) << dlock_lock_lost_cause(broken.get());
  EXPECT_NE(std::string(dlock_lock_lost_cause(broken.get())).find("no reason given"), std::string::npos)
      << dlock_lock_lost_cause(broken.get());
  EXPECT_EQ(broken.Release(), DLOCK_NOT_HELD);
}

// A hold with no lease is freed at once: nothing would ever end it.
TEST_P(BreakingOnce, AHoldWithNoLeaseIsFreedAtOnce) {
  Client holder_client(url()), operator_client(url());
  const std::string name = Name("break-no-lease");
  Options o;
  o.lease(0);
  Hold broken(holder_client.get(), name, o.get());
  ASSERT_TRUE(broken.held()) << broken.error();
  Broken b = BreakLock(operator_client.get(), name, "gone", 0);
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  ASSERT_EQ(b.holders.size(), 1u);
  EXPECT_EQ(b.holders[0].remaining_ms, -1);
  EXPECT_EQ(b.closed_ms, 0);
  Attempt next = TryToTake(operator_client.get(), name);
  EXPECT_EQ(next.status, DLOCK_OK) << next.error;
  EXPECT_GT(next.token, broken.token());
  EXPECT_EQ(broken.Release(), DLOCK_NOT_HELD);
}

// Every shared hold is broken, and each holder hears of it.
TEST_P(BreakingOnce, EverySharedHoldIsBroken) {
  Client probe(url());
  if ((dlock_client_capabilities(probe.get()) & DLOCK_CAP_SHARED) == 0) GTEST_SKIP() << "no shared holds";
  Client a(url()), b(url()), operator_client(url());
  const std::string name = Name("break-shared");
  Options o;
  o.lease(30000).heartbeat(0).shared();
  Hold first(a.get(), name, o.get()), second(b.get(), name, o.get());
  ASSERT_TRUE(first.held()) << first.error();
  ASSERT_TRUE(second.held()) << second.error();
  Broken broke = BreakLock(operator_client.get(), name, "rotating keys", DLOCK_BREAK_NOW);
  ASSERT_EQ(broke.status, DLOCK_OK) << broke.error;
  EXPECT_EQ(broke.holders.size(), 2u);
  for (Hold* h : {&first, &second}) {
    EXPECT_EQ(dlock_extend(h->get(), 30000), DLOCK_NOT_HELD);
    EXPECT_TRUE(StartsWith(dlock_lock_lost_cause(h->get()), "broken: ")) << dlock_lock_lost_cause(h->get());
    EXPECT_NE(std::string(dlock_lock_lost_cause(h->get())).find("rotating keys"), std::string::npos)
        << dlock_lock_lost_cause(h->get());
  }
  Options exclusive;
  Hold next(operator_client.get(), name, exclusive.get());
  ASSERT_TRUE(next.held()) << next.error();
  EXPECT_GT(next.token(), std::max(first.token(), second.token()));
}

// A waiter is woken by a break that frees the name now, where the backend notifies waiters.
TEST_P(BreakingOnce, AWaiterIsWokenByABreakThatFreesTheName) {
  Client holder_client(url()), waiter_client(url()), operator_client(url());
  if ((dlock_client_capabilities(waiter_client.get()) & DLOCK_CAP_NOTIFIES) == 0) {
    GTEST_SKIP() << "waiters are not notified here";
  }
  const std::string name = Name("break-wakes");
  Options o;
  o.lease(60000).heartbeat(0);
  Hold broken(holder_client.get(), name, o.get());
  ASSERT_TRUE(broken.held()) << broken.error();
  Attempt waited;
  std::thread waiter([&] { waited = TryToTake(waiter_client.get(), name, 30000); });
  // Make them meet: the waiter has tried and is waiting once the name shows it refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto broke_at = Clock::now();
  ASSERT_EQ(BreakLock(operator_client.get(), name, "", DLOCK_BREAK_NOW).status, DLOCK_OK);
  waiter.join();
  EXPECT_EQ(waited.status, DLOCK_OK) << waited.error;
  EXPECT_LT(MsSince(broke_at), kCallBoundMs) << "the waiter slept through the break";
}

// A free name breaks to nothing; bad input changes nothing and names what was wrong.
TEST_P(BreakingOnce, AFreeNameAndBadInput) {
  Client c(url());
  const std::string name = Name("break-free");
  Broken b = BreakLock(c.get(), name, "nothing", 0);
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  EXPECT_TRUE(b.holders.empty());
  EXPECT_EQ(b.closed_ms, 0);
  EXPECT_EQ(TryToTake(c.get(), name).status, DLOCK_OK);

  EXPECT_EQ(dlock_break(nullptr, "x", nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_break(c.get(), nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_break(c.get(), "", nullptr), DLOCK_EINVAL);
  const std::string long_reason(1025, 'r');
  EXPECT_EQ(dlock_break(c.get(), name.c_str(), long_reason.c_str()), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("reason"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_break_with(c.get(), name.c_str(), nullptr, 0x80, nullptr), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("flags"), std::string::npos) << dlock_last_error();
  char buf[256] = "";
  EXPECT_EQ(dlock_break_with_errbuf(c.get(), name.c_str(), long_reason.c_str(), 0, nullptr, buf, sizeof buf),
            DLOCK_EINVAL);
  EXPECT_NE(std::string(buf).find("reason"), std::string::npos) << buf;
  EXPECT_NE(dlock_client_capabilities(c.get()) & DLOCK_CAP_BREAK, 0u);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Breaking,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);
INSTANTIATE_TEST_SUITE_P(Conformance, BreakingOnce, ::testing::ValuesIn(AllBackends()),
                         BackendTestName);

}  // namespace
}  // namespace dlock_test
