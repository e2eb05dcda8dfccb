// Losing a lock, which is never silent: deleted behind the holder's back (reported in every
// style: callback or LOST entry, is_valid 0, DLOCK_NOT_HELD), expired without heartbeats and
// taken over, or out of reach while the server is gone.
#include "conformance/conformance.h"

namespace dlock_test {
namespace {

class Losing : public StyleTest {};

TEST_P(Losing, DeletedLockIsReportedLostOnceInEveryWay) {
  auto c = Open();
  Client other(url());
  const std::string name = Name("victim");
  Options opts;
  opts.lease(10000).heartbeat(100);  // the next renewal, within 100 ms, finds it gone
  c->ReportLosses(opts.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), opts.get(), &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);

  ASSERT_TRUE(server().DeleteLock(name));
  const auto deleted_at = Clock::now();
  LossReport lost = c->AwaitLoss(15000ms);
  ASSERT_EQ(lost.count, 1) << "the loss was not reported";
  EXPECT_LT(MsSince(deleted_at), 100 + kCallBoundMs) << "found by a refused renewal, not at the 10 s deadline";
  EXPECT_NE(lost.says.find(name), std::string::npos) << "the report does not say which lock: "
                                                     << lost.says;
  if (style() != Style::kQueued) {  // a LOST entry carries no token
    EXPECT_EQ(lost.token, token);
  }
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_lock_remaining_ms(l), 0);
  EXPECT_EQ(c->Extend(l, 1000), DLOCK_NOT_HELD);
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
  EXPECT_NE(c->last_error().find(name), std::string::npos) << c->last_error();
  EXPECT_EQ(c->AwaitLoss(300ms).count, 1) << "reported more than once";

  // Free again, and its next token is still greater (whatever the deletion took with it).
  Attempt next = TryToTake(other.get(), name);
  EXPECT_EQ(next.status, DLOCK_OK) << next.error;
  EXPECT_GT(next.token, token);
}

TEST_P(Losing, ExpiredLockIsTakenOverAndItsHolderToldItIsNotHeld) {
  auto c = Open();
  Client other(url());
  const std::string name = Name("expiring");
  Options brief;
  brief.lease(300).heartbeat(0);  // nothing renews it
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), brief.get(), &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  EXPECT_TRUE(WaitFor([&] { return dlock_lock_is_valid(l) == 0; }, 10000ms));
  EXPECT_EQ(dlock_lock_remaining_ms(l), 0);

  // The server's lease ends a drift (lease/100 + 2 ms) later: then nobody holds it with time
  // left, and another client takes it over.
  Snapshot expired;
  EXPECT_TRUE(WaitFor([&] {
    expired = Inspect(other.get(), name);
    return expired.free() || (expired.holders.size() == 1 && expired.holders[0].remaining_ms == 0);
  }, 10000ms)) << expired;
  Options patient;
  patient.wait(20000);
  dlock_lock* taker = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), patient.get(), &taker), DLOCK_OK)
      << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(taker), token);

  // The old holder learns it lost the lock, and cannot touch the new holder's.
  EXPECT_EQ(c->Extend(l, 1000), DLOCK_NOT_HELD);
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
  Snapshot taken = Inspect(other.get(), name);
  ASSERT_EQ(taken.holders.size(), 1u) << taken;
  EXPECT_EQ(taken.holders[0].token, Shown(dlock_lock_fencing_token(taker)));
  EXPECT_EQ(dlock_release(taker), DLOCK_OK) << dlock_last_error();
}

INSTANTIATE_TEST_SUITE_P(Conformance, Losing,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

class ServerGone : public BackendTest {};

TEST_P(ServerGone, CallsFailNamingItHeldLocksAreLostByTheirDeadlineAndItComesBack) {
  std::unique_ptr<BackendServer> own = backend().start();  // this test kills it
  ASSERT_TRUE(own->running());
  Client client(own->url());
  LostRecorder lost;
  Options renewed, unrenewed;
  renewed.lease(900).heartbeat(300).on_lost(&LostRecorder::Fn, &lost);
  unrenewed.lease(60000).heartbeat(0);
  dlock_lock *kept = nullptr, *quiet = nullptr, *forgotten = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), Name("kept").c_str(), renewed.get(), &kept), DLOCK_OK)
      << dlock_last_error();
  ASSERT_EQ(dlock_acquire(client.get(), Name("quiet").c_str(), unrenewed.get(), &quiet), DLOCK_OK)
      << dlock_last_error();
  ASSERT_EQ(dlock_acquire(client.get(), Name("forgotten").c_str(), unrenewed.get(), &forgotten),
            DLOCK_OK)
      << dlock_last_error();

  own->Kill();
  const auto killed_at = Clock::now();
  // Renewals keep failing: the lock is lost by its local deadline, and reported.
  ASSERT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 15000ms)) << "never reported";
  EXPECT_LT(MsSince(killed_at), 900 + kSlackMs) << "reported long after the local deadline";
  EXPECT_EQ(lost.calls.load(), 1);
  EXPECT_EQ(dlock_lock_is_valid(kept), 0);
  EXPECT_EQ(dlock_release(kept), DLOCK_NOT_HELD);

  // Calls fail with DLOCK_EIO, naming the server.
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), Name("new").c_str(), nullptr, &l), DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find(own->address()), std::string::npos)
      << dlock_last_error();
  EXPECT_EQ(dlock_extend(quiet, 60000), DLOCK_EIO);
  EXPECT_EQ(dlock_lock_is_valid(quiet), 1) << "a failed call changes nothing";
  EXPECT_EQ(dlock_release(quiet), DLOCK_EIO);  // and frees the handle
  EXPECT_NE(std::string(dlock_last_error()).find(own->address()), std::string::npos)
      << dlock_last_error();

  // Back, empty: the same client works again; the lock the server forgot is not held.
  ASSERT_TRUE(own->Restart());
  ASSERT_EQ(dlock_acquire(client.get(), Name("new").c_str(), nullptr, &l), DLOCK_OK)
      << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(forgotten), DLOCK_NOT_HELD);
}

INSTANTIATE_TEST_SUITE_P(Conformance, ServerGone, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
