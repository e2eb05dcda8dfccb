// Lock kinds, on every backend that offers them: shared holds side by side and a writer that is
// not starved by them; counting semaphores that never let in one holder too many, across
// processes; the two sorts never mixed; every hold with its own token, lease and loss report.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "conformance/conformance.h"
#include "worker_process.h"

namespace dlock_test {
namespace {

// The backends that say they offer `kinds` (DLOCK_CAP_SHARED, DLOCK_CAP_PERMITS or both: Redlock
// offers shared holds, not semaphores). Under TSan, one of the Redis deployments that
// differ only in transport (a Unix socket, TLS, a client certificate) stands for all: the kinds
// are the same scripts over the same channel, and the normal and ASan builds run them all.
std::vector<BackendFactory> KindsBackends(uint32_t kinds) {
  std::vector<BackendFactory> out;
  for (const BackendFactory& f : AllBackends()) {
    if (kUnderThreadSanitizer && (f.name == "redis_unix" || f.name.rfind("redis_tls", 0) == 0)) {
      continue;
    }
    if ((f.capabilities & kinds) == kinds) out.push_back(f);
  }
  return out;
}

// Shared holds alone; Kinds: both kinds, and what they share.
class SharedKinds : public BackendTest {};
class Kinds : public BackendTest {};

TEST_P(Kinds, ClientSaysItOffersSharedLocksAndSemaphores) {
  Client c(url());
  EXPECT_EQ(dlock_client_capabilities(c.get()) & (DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS),
            DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS);
}

TEST_P(SharedKinds, ReadersHoldAtOnceAndInspectListsEveryOne) {
  const std::string name = Name("doc");
  Client r1(url()), r2(url()), r3(url()), writer(url());
  Options o1, o2, o3;
  o1.shared().owner("reader-1");
  o2.shared().owner("reader-2");
  o3.shared().owner("reader-3").lease(0);  // no expiry
  Hold a(r1.get(), name, o1.get()), b(r2.get(), name, o2.get()), c(r3.get(), name, o3.get());
  ASSERT_TRUE(a.held() && b.held() && c.held()) << a.error() << b.error() << c.error();
  EXPECT_LT(a.token(), b.token());
  EXPECT_LT(b.token(), c.token());

  Snapshot snap = Inspect(writer.get(), name);
  EXPECT_EQ(snap.kind, DLOCK_SHARED) << snap;
  EXPECT_EQ(snap.permits, 0u);
  ASSERT_EQ(snap.holders.size(), 3u) << snap;
  std::sort(snap.holders.begin(), snap.holders.end(),
            [](const Holder& x, const Holder& y) { return x.token < y.token; });
  EXPECT_EQ(snap.holders[0].owner, "reader-1");
  EXPECT_EQ(snap.holders[1].owner, "reader-2");
  EXPECT_EQ(snap.holders[2].owner, "reader-3");
  EXPECT_EQ(snap.holders[0].token, a.token());
  EXPECT_EQ(snap.holders[2].token, c.token());
  EXPECT_GT(snap.holders[0].remaining_ms, 5000) << snap;
  EXPECT_LE(snap.holders[0].remaining_ms, 10000) << snap;
  EXPECT_EQ(snap.holders[2].remaining_ms, -1) << snap;

  // No exclusive hold while they read; one more reader is welcome.
  EXPECT_EQ(TryToTake(writer.get(), name).status, DLOCK_NOT_ACQUIRED);
  Options fourth;
  fourth.shared();
  Hold d(writer.get(), name, fourth.get());
  EXPECT_EQ(d.status(), DLOCK_OK) << d.error();
  EXPECT_GT(d.token(), c.token());

  for (Hold* h : {&a, &b, &c, &d}) EXPECT_EQ(h->Release(), DLOCK_OK) << h->error();
  EXPECT_TRUE(Inspect(writer.get(), name).free());
  Attempt after = TryToTake(writer.get(), name);
  EXPECT_EQ(after.status, DLOCK_OK) << after.error;
  EXPECT_GT(after.token, d.token()) << "a writer after the readers gets a greater token";
}

TEST_P(SharedKinds, WriterWaitsForEveryReaderAndNewReadersWaitBehindIt) {
  const std::string name = Name("table");
  Client r1(url()), r2(url()), w(url()), late(url());
  Options shared;
  shared.shared();
  Hold a(r1.get(), name, shared.get()), b(r2.get(), name, shared.get());
  ASSERT_TRUE(a.held() && b.held()) << a.error() << b.error();

  std::atomic<bool> writer_done{false};
  Hold written;
  std::thread writer([&] {
    Options patient;
    patient.wait(20000).owner("writer");
    written = Hold(w.get(), name, patient.get());
    writer_done = true;
  });
  // A writer waits: readers arriving now queue behind it, even while readers still hold. Once
  // the writer has tried, a new reader is refused: wait for that (a reader let in before it
  // lets go at once). A writer that never made readers queue would wait forever.
  Options one_try, short_wait;
  one_try.shared();
  short_wait.shared().wait(300);
  EXPECT_TRUE(WaitFor([&] { return Hold(late.get(), name, one_try.get()).status() == DLOCK_NOT_ACQUIRED; },
                      20000ms))
      << "a new reader was let in for 20 s while a writer waited";
  EXPECT_FALSE(writer_done) << "the writer got in while readers held: " << written.error();
  Hold refused_too(late.get(), name, short_wait.get());
  EXPECT_EQ(refused_too.status(), DLOCK_NOT_ACQUIRED) << "a new reader jumped ahead of the writer";

  // A reader that waits without limit gets in after the writer is done.
  std::atomic<bool> reader_done{false};
  Hold read_later;
  std::thread reader([&] {
    Options forever;
    forever.shared().wait(-1);
    read_later = Hold(late.get(), name, forever.get());
    reader_done = true;
  });

  EXPECT_EQ(a.Release(), DLOCK_OK) << a.error();
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(writer_done) << "the writer got in while a reader still held";
  const auto released_at = Clock::now();
  EXPECT_EQ(b.Release(), DLOCK_OK) << b.error();
  ASSERT_TRUE(WaitFor([&] { return writer_done.load(); }, 10000ms));
  writer.join();
  ASSERT_EQ(written.status(), DLOCK_OK) << written.error();
  // Woken by the release, or by its next retry (at most 1 s away), and its attempt.
  EXPECT_LT(MsSince(released_at), 1000 + kCallBoundMs + kSlackMs)
      << "the writer slept long after the last reader left";
  EXPECT_GT(written.token(), std::max(a.token(), b.token()));
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(reader_done) << "a reader got in while the writer held";
  Snapshot snap = Inspect(r1.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << snap;
  EXPECT_EQ(snap.kind, DLOCK_EXCLUSIVE);
  EXPECT_EQ(snap.holders[0].owner, "writer");

  EXPECT_EQ(written.Release(), DLOCK_OK) << written.error();
  ASSERT_TRUE(WaitFor([&] { return reader_done.load(); }, 10000ms));
  reader.join();
  ASSERT_EQ(read_later.status(), DLOCK_OK) << read_later.error();
  EXPECT_GT(read_later.token(), written.token());
}

TEST_P(SharedKinds, NoUpgradeFromSharedToExclusive) {
  const std::string name = Name("upgrade");
  Client c(url()), other(url());
  Options shared, exclusive;
  shared.shared();
  exclusive.wait(20000);
  Hold reading(c.get(), name, shared.get());
  ASSERT_TRUE(reading.held()) << reading.error();
  const auto start = Clock::now();
  Hold upgrade(c.get(), name, exclusive.get());
  EXPECT_EQ(upgrade.status(), DLOCK_EINVAL) << "it would wait for itself";
  EXPECT_LT(MsSince(start), kCallBoundMs + kSlackMs) << "refused at once, not after its 20 s wait";
  EXPECT_NE(upgrade.error().find("shared"), std::string::npos) << upgrade.error();
  EXPECT_NE(upgrade.error().find(name), std::string::npos) << upgrade.error();

  // Another shared hold by the same client is just one more reader; another client's
  // exclusive acquire waits as usual.
  Hold again(c.get(), name, shared.get());
  EXPECT_EQ(again.status(), DLOCK_OK) << again.error();
  Options one_try;
  Hold elsewhere(other.get(), name, one_try.get());
  EXPECT_EQ(elsewhere.status(), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(reading.Release(), DLOCK_OK);
  EXPECT_EQ(again.Release(), DLOCK_OK);
  Hold now(c.get(), name, one_try.get());  // released: exclusive is fine now
  EXPECT_EQ(now.status(), DLOCK_OK) << now.error();
}

TEST_P(Kinds, SemaphoreAdmitsExactlyItsPermits) {
  const std::string name = Name("pool");
  Client c1(url()), c2(url()), c3(url()), c4(url());
  Options three;
  three.permits(3).owner("worker");
  Hold a(c1.get(), name, three.get()), b(c2.get(), name, three.get()), c(c3.get(), name, three.get());
  ASSERT_TRUE(a.held() && b.held() && c.held()) << a.error() << b.error() << c.error();
  Hold fourth(c4.get(), name, three.get());
  EXPECT_EQ(fourth.status(), DLOCK_NOT_ACQUIRED) << "a 4th holder of 3 permits";
  Snapshot snap = Inspect(c4.get(), name);
  EXPECT_EQ(snap.permits, 3u) << snap;
  EXPECT_EQ(snap.kind, DLOCK_EXCLUSIVE) << snap;
  ASSERT_EQ(snap.holders.size(), 3u) << snap;
  std::set<uint64_t> tokens;
  for (const Holder& h : snap.holders) tokens.insert(h.token);
  EXPECT_EQ(tokens, (std::set<uint64_t>{a.token(), b.token(), c.token()}));

  // A permit given back is a permit to take; a waiter gets it soon after: woken by the release,
  // or by its next retry (at most 1 s away). (A waiter not yet waiting at the release takes the
  // permit at its first try.)
  Options waiting;
  waiting.permits(3).wait(20000);
  std::thread releaser([&] {
    std::this_thread::sleep_for(300ms);
    b.Release();
  });
  const auto start = Clock::now();
  Hold next(c4.get(), name, waiting.get());
  releaser.join();
  ASSERT_EQ(next.status(), DLOCK_OK) << next.error();
  EXPECT_LT(MsSince(start), 300 + 1000 + kCallBoundMs + kSlackMs);
  EXPECT_GT(next.token(), c.token());
}

TEST_P(Kinds, SemaphoreOfThreeNeverHasAFourthHolderAcrossSixProcesses) {
  char dir[] = "/tmp/dlock-conformance-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string holders = std::string(dir) + "/holders";
  constexpr int kProcesses = 6, kRounds = 15;
  // "<current> <most ever> <looping> <timeouts> <meetings>" (worker.c, permits): each holder
  // waits, holding its permit, until min(3, workers still looping) hold at once, so that three
  // side by side is what every schedule shows; more than three is the semaphore's failure.
  std::ofstream(holders) << "0 0 " << kProcesses << " 0 0\n";
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int p = 0; p < kProcesses; ++p) {
    workers.push_back(
        StartWorker({url(), Name("pool"), "permits", "3", std::to_string(kRounds), holders}));
  }
  for (auto& w : workers) EXPECT_EQ(w->Wait(180s), 0) << w->output();
  long current = -1, most = -1, looping = -1, timeouts = -1, meetings = -1;
  std::ifstream(holders) >> current >> most >> looping >> timeouts >> meetings;
  EXPECT_EQ(current, 0) << "every holder counted itself out";
  EXPECT_EQ(looping, 0) << "every worker ran all its rounds";
  EXPECT_EQ(most, 3) << "more than 3 holders at once is not a semaphore of 3; fewer, and the "
                        "holders that waited for each other were never let in side by side";
  EXPECT_EQ(timeouts, 0) << "a holder waited 20 s for the others to hold with it: permits left "
                            "unused while workers waited for them";
  EXPECT_GT(meetings, 0);
  std::filesystem::remove_all(dir);
}

// One acquire takes k of the n permits at once, or none: a hold that took 3 of 4 leaves room for
// one more permit, not for two; its release frees all three; a waiter for two is let in once
// two are free.
TEST_P(Kinds, OneAcquireTakesSeveralPermitsAllOrNone) {
  const std::string name = Name("take");
  Client c1(url()), c2(url()), c3(url());
  Options three, two, one;
  three.permits(4).take(3).lease(10000);
  two.permits(4).take(2).lease(10000);
  one.permits(4).lease(10000);
  Hold big(c1.get(), name, three.get());
  ASSERT_TRUE(big.held()) << big.error();
  Hold pair(c2.get(), name, two.get());
  EXPECT_EQ(pair.status(), DLOCK_NOT_ACQUIRED) << "3 + 2 permits of 4";
  Hold single(c2.get(), name, one.get());
  ASSERT_TRUE(single.held()) << single.error();
  Hold fifth(c3.get(), name, one.get());
  EXPECT_EQ(fifth.status(), DLOCK_NOT_ACQUIRED) << "a 5th permit of 4";
  Snapshot snap = Inspect(c3.get(), name);
  EXPECT_EQ(snap.permits, 4u) << snap;
  ASSERT_EQ(snap.holders.size(), 2u) << snap;
  std::set<std::pair<uint64_t, uint32_t>> takes;  // each hold's token and the permits it took
  for (const Holder& h : snap.holders) takes.insert({h.token, h.take});
  EXPECT_EQ(takes, (std::set<std::pair<uint64_t, uint32_t>>{{big.token(), 3}, {single.token(), 1}}));

  ASSERT_EQ(big.Release(), DLOCK_OK) << big.error();
  Hold again(c3.get(), name, three.get());
  ASSERT_TRUE(again.held()) << "1 + 3 permits of 4: " << again.error();
  EXPECT_GT(again.token(), single.token());

  Options waiting;
  waiting.permits(4).take(2).lease(10000).wait(20000);
  std::thread releaser([&] {
    std::this_thread::sleep_for(300ms);
    again.Release();
  });
  const auto start = Clock::now();
  Hold waited(c1.get(), name, waiting.get());
  releaser.join();
  ASSERT_EQ(waited.status(), DLOCK_OK) << waited.error();
  EXPECT_LT(MsSince(start), 300 + 1000 + kCallBoundMs + kSlackMs);
  EXPECT_EQ(Inspect(c3.get(), name).holders.size(), 2u);
}

// A hold that took every permit and was never released frees them all when its lease ends.
TEST_P(Kinds, AHoldThatTookSeveralPermitsFreesThemWithItsLease) {
  const std::string name = Name("take-lapse");
  Client c1(url()), c2(url());
  Options all;
  all.permits(3).take(3).lease(800).heartbeat(0);
  Hold doomed(c1.get(), name, all.get());
  ASSERT_TRUE(doomed.held()) << doomed.error();
  Options one;
  one.permits(3).lease(5000);
  Hold none(c2.get(), name, one.get());
  EXPECT_EQ(none.status(), DLOCK_NOT_ACQUIRED) << "all 3 permits were taken";
  Options patient;
  patient.permits(3).take(3).lease(5000).wait(20000).retry(50, 200);
  const auto start = Clock::now();
  Hold after(c2.get(), name, patient.get());
  ASSERT_EQ(after.status(), DLOCK_OK) << after.error();
  EXPECT_LT(MsSince(start), kTakeoverBoundMs(800));
  EXPECT_GT(after.token(), doomed.token());
}

// take is checked: 0 by its setter; more than 1 without permits, or more than the permits, at
// the acquire; a re-entry asking another take is refused.
TEST_P(Kinds, TakeIsCheckedAgainstThePermits) {
  const std::string name = Name("take-bad");
  Client c(url());
  dlock_options* raw = dlock_options_new();
  EXPECT_EQ(dlock_options_set_take(raw, 0), DLOCK_EINVAL);
  dlock_options_free(raw);
  Options no_semaphore, too_many;
  no_semaphore.take(2);
  too_many.permits(4).take(5);
  Hold a(c.get(), name, no_semaphore.get());
  EXPECT_EQ(a.status(), DLOCK_EINVAL);
  EXPECT_NE(a.error().find("take 2"), std::string::npos) << a.error();
  Hold b(c.get(), name, too_many.get());
  EXPECT_EQ(b.status(), DLOCK_EINVAL);
  EXPECT_NE(b.error().find("4 permits"), std::string::npos) << b.error();
  EXPECT_TRUE(Inspect(c.get(), name).free());
  Options two, three;
  two.permits(4).take(2);
  three.permits(4).take(3);
  ASSERT_EQ(dlock_options_set_reentrant(two.mutable_get(), "task"), DLOCK_OK);
  ASSERT_EQ(dlock_options_set_reentrant(three.mutable_get(), "task"), DLOCK_OK);
  Hold first(c.get(), name, two.get());
  ASSERT_TRUE(first.held()) << first.error();
  Hold other(c.get(), name, three.get());
  EXPECT_EQ(other.status(), DLOCK_EINVAL);
  EXPECT_NE(other.error().find("take"), std::string::npos) << other.error();
}

TEST_P(Kinds, SortsAndSizesAreNeverMixed) {
  const std::string name = Name("mixed");
  Client c(url()), other(url());
  Options both;
  EXPECT_EQ(dlock_options_set_kind(both.mutable_get(), DLOCK_SHARED), DLOCK_OK);
  EXPECT_EQ(dlock_options_set_permits(both.mutable_get(), 2), DLOCK_OK);
  Hold neither(c.get(), name, both.get());
  EXPECT_EQ(neither.status(), DLOCK_EINVAL) << "shared and permits on one options object";

  Options three, four, shared, exclusive;
  three.permits(3);
  four.permits(4);
  shared.shared();
  Hold sem(c.get(), name, three.get());
  ASSERT_TRUE(sem.held()) << sem.error();
  Hold bigger(other.get(), name, four.get());
  EXPECT_EQ(bigger.status(), DLOCK_EINVAL);
  EXPECT_NE(bigger.error().find("3 permits"), std::string::npos) << bigger.error();
  EXPECT_NE(bigger.error().find("4 permits"), std::string::npos) << bigger.error();
  for (const Options* lock_sort : {&shared, &exclusive}) {
    Hold as_lock(other.get(), name, lock_sort->get());
    EXPECT_EQ(as_lock.status(), DLOCK_EINVAL);
    EXPECT_NE(as_lock.error().find("semaphore of 3"), std::string::npos) << as_lock.error();
  }
  EXPECT_EQ(sem.Release(), DLOCK_OK) << sem.error();

  // Free again, the name is whatever its next holder makes it.
  Hold reading(c.get(), name, shared.get());
  ASSERT_TRUE(reading.held()) << reading.error();
  Hold as_semaphore(other.get(), name, four.get());
  EXPECT_EQ(as_semaphore.status(), DLOCK_EINVAL);
  EXPECT_NE(as_semaphore.error().find("a lock"), std::string::npos) << as_semaphore.error();
  EXPECT_EQ(reading.Release(), DLOCK_OK);
  Hold exclusive_hold(c.get(), name, exclusive.get());
  ASSERT_TRUE(exclusive_hold.held()) << exclusive_hold.error();
  Hold still_not(other.get(), name, four.get());
  EXPECT_EQ(still_not.status(), DLOCK_EINVAL);
  EXPECT_EQ(exclusive_hold.Release(), DLOCK_OK);
  Hold now(other.get(), name, four.get());
  EXPECT_EQ(now.status(), DLOCK_OK) << now.error();
  EXPECT_TRUE(Inspect(c.get(), name).permits == 4u);
}

TEST_P(Kinds, TokensRiseAcrossEveryKind) {
  const std::string name = Name("t");
  Client c(url()), d(url());
  Options exclusive, shared, two;
  shared.shared();
  two.permits(2);
  std::vector<uint64_t> tokens;
  auto take = [&](dlock_client* client, const Options& o) {
    Hold h(client, name, o.get());
    EXPECT_EQ(h.status(), DLOCK_OK) << h.error();
    tokens.push_back(h.token());
    return h;
  };
  take(c.get(), exclusive);
  {
    Hold r1 = take(c.get(), shared), r2 = take(d.get(), shared);
  }
  take(d.get(), exclusive);
  {
    Hold p1 = take(c.get(), two), p2 = take(d.get(), two);
  }
  take(c.get(), shared);
  take(c.get(), exclusive);
  ASSERT_EQ(tokens.size(), 8u);
  for (size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << "token " << i;
}

TEST_P(SharedKinds, KilledReadersHoldEndsWithItsLease) {
  const std::string name = Name("reader");
  constexpr int kLeaseMs = 800;
  auto reader = StartWorker({url(), name, "hold", std::to_string(kLeaseMs), "doomed-reader", "shared"});
  const uint64_t reader_token = AwaitAcquired(*reader);
  ASSERT_GT(reader_token, 0u) << reader->output();
  Client c(url());
  Snapshot held = Inspect(c.get(), name);
  ASSERT_EQ(held.holders.size(), 1u) << held;
  EXPECT_EQ(held.kind, DLOCK_SHARED);
  EXPECT_EQ(held.holders[0].owner, "doomed-reader");

  // Alive, it renews: a writer gets nothing over several leases.
  Options brief;
  brief.wait(2 * kLeaseMs + 300).retry(50, 200);
  Hold early(c.get(), name, brief.get());
  EXPECT_EQ(early.status(), DLOCK_NOT_ACQUIRED);

  // What is left of its lease, as the server shows it just before the kill: nobody may take it
  // before that ran out.
  const auto inspected_at = Clock::now();
  const int64_t left = LeaseLeft(Inspect(c.get(), name));
  reader->Kill();
  const auto killed_at = Clock::now();
  Options patient;
  patient.wait(20000).retry(50, 200);
  Hold writer(c.get(), name, patient.get());
  ASSERT_EQ(writer.status(), DLOCK_OK) << writer.error();
  // 2 ms of slack for whole milliseconds: the server's PTTL counts from its clock's last whole
  // millisecond (up to 1 ms over), and MsSince rounds down (up to 1 ms under). CI saw 741 vs 742.
  EXPECT_GE(MsSince(inspected_at) + 2, left)
      << "taken before the dead reader's lease, as the server showed it, could have run out";
  EXPECT_LT(MsSince(killed_at), kTakeoverBoundMs(kLeaseMs)) << "the dead reader's hold outlived its lease";
  EXPECT_GT(writer.token(), reader_token);
}

INSTANTIATE_TEST_SUITE_P(Conformance, SharedKinds, ::testing::ValuesIn(KindsBackends(DLOCK_CAP_SHARED)),
                         BackendTestName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SharedKinds);
INSTANTIATE_TEST_SUITE_P(Conformance, Kinds,
                         ::testing::ValuesIn(KindsBackends(DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS)),
                         BackendTestName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Kinds);

// A shared hold is lost like any other: reported in every style, never silent.
class KindsLosing : public StyleTest {};

TEST_P(KindsLosing, DeletedSharedHoldIsReportedLost) {
  auto c = Open();
  Client other(url());
  const std::string name = Name("victim");
  Options opts;
  opts.shared().lease(3000).heartbeat(100);
  c->ReportLosses(opts.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), opts.get(), &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  // Renewed past its lease while held.
  std::this_thread::sleep_for(400ms);
  Snapshot held = Inspect(other.get(), name);
  ASSERT_EQ(held.holders.size(), 1u) << held;
  EXPECT_GT(held.holders[0].remaining_ms, 2500) << "not renewed: " << held;

  ASSERT_TRUE(server().DeleteLock(name));
  LossReport lost = c->AwaitLoss(5000ms);
  ASSERT_EQ(lost.count, 1) << "the loss was not reported";
  EXPECT_NE(lost.says.find(name), std::string::npos) << lost.says;
  if (style() != Style::kQueued) {
    EXPECT_EQ(lost.token, token);
  }
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
}

std::vector<std::tuple<BackendFactory, Style>> KindsStyles() {
  std::vector<std::tuple<BackendFactory, Style>> out;
  for (const BackendFactory& f : KindsBackends(DLOCK_CAP_SHARED)) {
    for (Style s : {Style::kBlocking, Style::kAsync, Style::kQueued, Style::kHooks}) {
      out.emplace_back(f, s);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Conformance, KindsLosing, ::testing::ValuesIn(KindsStyles()), StyleTestName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KindsLosing);

}  // namespace
}  // namespace dlock_test
