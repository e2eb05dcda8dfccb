// Leader election on every backend (dlock_campaign, dlock_leader, dlock_observe): one leader at a
// time whose term fences a store, a deposed leader that is told so and whose writes the store
// refuses, a dead leader replaced once its lease ran out, resignation handing over in arrival
// order where the backend is fair, and observers that see the current leader first, then every
// change, never going back.
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "conformance/conformance.h"
#include "queue_util.h"
#include "worker_process.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

// How often an observer reads when nothing tells it of a change (dlock.h, dlock_observe).
constexpr int kObservePollMs = 500;

// A store that fences: it refuses a write whose term is below the highest it has seen.
class FencedStore {
 public:
  bool Write(uint64_t term) {
    std::lock_guard<std::mutex> lock(mu_);
    if (term < highest_) return false;
    highest_ = term;
    ++accepted_;
    return true;
  }
  int accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }

 private:
  std::mutex mu_;
  uint64_t highest_ = 0;
  int accepted_ = 0;
};

// What an observer was told, in order.
struct Seen {
  bool leads = false;
  uint64_t term = 0;
  std::string owner, value;
  Clock::time_point at;  // when the report came
};

class Reports {
 public:
  static void Fn(const char* /*name*/, const dlock_info* leader, void* arg) {
    auto* self = static_cast<Reports*>(arg);
    Seen seen;
    if (leader != nullptr && dlock_info_holders(leader) == 1) {
      seen.leads = true;
      seen.term = dlock_info_fencing_token(leader, 0);
      seen.owner = dlock_info_owner(leader, 0);
      size_t len = 0;
      const void* v = dlock_info_value(leader, 0, &len);
      seen.value.assign(static_cast<const char*>(v), len);
    }
    seen.at = Clock::now();
    self->running = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(self->linger_ms.load()));
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->seen_.push_back(seen);
    }
    self->running = false;
  }
  std::vector<Seen> All() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t Count() { return All().size(); }
  // Waits until the last report satisfies pred.
  template <typename Pred>
  bool AwaitLast(Pred pred, std::chrono::milliseconds limit = 10s) {
    return WaitFor(
        [&] {
          auto all = All();
          return !all.empty() && pred(all.back());
        },
        limit);
  }
  std::atomic<int> linger_ms{0};  // how long each report takes
  std::atomic<bool> running{false};

 private:
  std::mutex mu_;
  std::vector<Seen> seen_;
};

// An observer that is cancelled when it goes out of scope.
class Observing {
 public:
  Observing(dlock_client* c, const std::string& name, Reports* reports) {
    EXPECT_EQ(dlock_observe(c, name.c_str(), Reports::Fn, reports, &ob_), DLOCK_OK) << dlock_last_error();
  }
  ~Observing() { Cancel(); }
  void Cancel() { dlock_observer_cancel(std::exchange(ob_, nullptr)); }

 private:
  dlock_observer* ob_ = nullptr;
};

std::string Describe(const std::vector<Seen>& all) {
  std::string out;
  for (const Seen& s : all) {
    out += s.leads ? "{term " + std::to_string(s.term) + ", '" + s.value + "'} " : "{none} ";
  }
  return out;
}

// Terms never go down, and a term whose end was reported never comes back.
void ExpectNeverBackwards(const std::vector<Seen>& all) {
  uint64_t highest = 0;
  bool ended = false;
  for (const Seen& s : all) {
    if (!s.leads) {
      ended = true;
      continue;
    }
    if (s.term == 0) {  // unknown (etcd's layout=mutex shows none): nothing to compare
      ended = false;
      continue;
    }
    EXPECT_GE(s.term, highest) << "a term went down: " << Describe(all);
    if (ended) {
      EXPECT_GT(s.term, highest) << "an ended term came back: " << Describe(all);
    }
    highest = s.term;
    ended = false;
  }
}

class Election : public BackendTest {};

TEST_P(Election, OneLeaderAtATimeWhoseTermFencesTheStore) {
  const std::string name = Name("scheduler");
  const std::string at = url();  // here: the candidates' threads must not start the server
  FencedStore store;
  std::atomic<int> leading{0};
  std::atomic<int> most{0};
  std::vector<std::thread> candidates;
  constexpr int kCandidates = 3, kTerms = 3;
  for (int k = 0; k < kCandidates; ++k) {
    candidates.emplace_back([&, k] {
      Client c(at);
      for (int t = 0; t < kTerms; ++t) {
        Options o;
        o.value("candidate " + std::to_string(k)).retry(20, 100);
        dlock_lock* l = nullptr;
        ASSERT_EQ(dlock_campaign(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
        const int now = ++leading;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        EXPECT_TRUE(store.Write(dlock_lock_fencing_token(l))) << "a leader's write was refused";
        std::this_thread::sleep_for(5ms);
        EXPECT_TRUE(store.Write(dlock_lock_fencing_token(l)));
        --leading;
        EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();  // resign
      }
    });
  }
  for (auto& t : candidates) t.join();
  EXPECT_EQ(most.load(), 1) << "two leaders at once";
  EXPECT_EQ(store.accepted(), 2 * kCandidates * kTerms);
  dlock_info* info = nullptr;
  Client look(url());
  ASSERT_EQ(dlock_leader(look.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u) << "nobody leads once every candidate resigned";
  dlock_info_free(info);
}

TEST_P(Election, ADeposedLeaderIsToldAndItsWritesAreRefused) {
  const std::string name = Name("deposed");
  Client a(url()), b(url());
  FencedStore store;
  LostRecorder lost;
  Options oa;
  oa.value("a").heartbeat(100).on_lost(LostRecorder::Fn, &lost);
  dlock_lock* la = nullptr;
  ASSERT_EQ(dlock_campaign(a.get(), name.c_str(), oa.get(), &la), DLOCK_OK) << dlock_last_error();
  const uint64_t old_term = dlock_lock_fencing_token(la);
  EXPECT_TRUE(store.Write(old_term));

  // Its leadership goes behind its back (as when it was stopped past its lease), and another
  // candidate leads with a greater term.
  ASSERT_TRUE(server().DeleteLock(name));
  Options ob;
  ob.value("b");
  dlock_lock* lb = nullptr;
  ASSERT_EQ(dlock_campaign(b.get(), name.c_str(), ob.get(), &lb), DLOCK_OK) << dlock_last_error();
  const uint64_t new_term = dlock_lock_fencing_token(lb);
  EXPECT_GT(new_term, old_term);
  EXPECT_TRUE(store.Write(new_term));

  // The deposed leader is told, and the store refuses what it still writes.
  EXPECT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 10s)) << "the loss was not reported";
  EXPECT_EQ(dlock_lock_is_valid(la), 0);
  EXPECT_FALSE(store.Write(old_term)) << "the store took a deposed leader's write";
  EXPECT_EQ(dlock_lock_set_value(la, "a again", 7), DLOCK_NOT_HELD) << "proclaim by a deposed leader";
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_leader(b.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_info_holders(info), 1u);
  EXPECT_EQ(dlock_info_fencing_token(info, 0), Shown(new_term));
  size_t len = 0;
  EXPECT_EQ(std::string(static_cast<const char*>(dlock_info_value(info, 0, &len))), "b");
  dlock_info_free(info);
  EXPECT_EQ(dlock_release(la), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(lb), DLOCK_OK) << dlock_last_error();
}

TEST_P(Election, AKilledLeaderIsReplacedOnceItsLeaseRanOutAndObserversSeeIt) {
  const std::string name = Name("killed");
  constexpr int kLeaseMs = 600;
  auto leader = StartWorker({url(), name, "hold", std::to_string(kLeaseMs), "doomed-leader"});
  const uint64_t old_term = AwaitAcquired(*leader);
  ASSERT_GT(old_term, 0u) << leader->output();
  Client c(url()), watcher(url());
  Reports reports;
  Observing observing(watcher.get(), name, &reports);
  ASSERT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.leads && s.term == Shown(old_term); }))
      << Describe(reports.All());

  std::optional<uint64_t> new_term;
  std::thread candidate([&] {
    Options o;
    o.value("successor").retry(50, 200);
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_campaign(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
    new_term = dlock_lock_fencing_token(l);
    // Its value too: where terms are not shown (etcd's layout=mutex), 0 is also the old leader's.
    EXPECT_TRUE(reports.AwaitLast(
        [&](const Seen& s) { return s.leads && s.term == Shown(*new_term) && s.value == "successor"; }))
        << "observers never saw the successor: " << Describe(reports.All());
    EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  });
  const auto killed_at = Clock::now();
  leader->Kill();
  candidate.join();
  ASSERT_TRUE(new_term.has_value());
  EXPECT_GT(*new_term, old_term);
  EXPECT_LT(MsSince(killed_at), kTakeoverBoundMs(kLeaseMs) + 10000) << "no new leader in time";
  auto all = reports.All();
  ExpectNeverBackwards(all);
  bool successor_seen = false;
  for (const Seen& s : all) successor_seen |= s.leads && s.term == Shown(*new_term) && s.value == "successor";
  EXPECT_TRUE(successor_seen) << Describe(all);
}

// Backends with DLOCK_CAP_FAIR: resigning hands leadership to the candidates in the order they
// campaigned.
TEST_P(Election, ResignHandsOverInArrivalOrder) {
  Client a(url());
  if ((dlock_client_capabilities(a.get()) & DLOCK_CAP_FAIR) == 0) {
    GTEST_SKIP() << "this backend does not queue its candidates";
  }
  const std::string name = Name("succession");
  dlock_lock* la = nullptr;
  ASSERT_EQ(dlock_campaign(a.get(), name.c_str(), nullptr, &la), DLOCK_OK) << dlock_last_error();
  constexpr int kCandidates = 3;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::thread> candidates;
  std::mutex mu;
  std::vector<int> order;
  for (int k = 0; k < kCandidates; ++k) clients.push_back(std::make_unique<Client>(url()));
  for (int k = 0; k < kCandidates; ++k) {
    candidates.emplace_back([&, k] {
      Options o;
      o.retry(20000, 30000);  // served by the resignations, not by retries
      dlock_lock* l = nullptr;
      ASSERT_EQ(dlock_campaign(clients[k]->get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(k);
      }
      EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
    });
    ASSERT_TRUE(WaitFor([&] { return server().InLine(name) == k + 1; }, 20s))
        << "candidate " << k << " never took its place in line";
  }
  EXPECT_EQ(dlock_release(la), DLOCK_OK) << dlock_last_error();
  for (auto& t : candidates) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST_P(Election, ObserversSeeTheLeaderFirstThenEveryChangeAndNothingAfterCancel) {
  const std::string name = Name("observed");
  Client c(url()), d(url()), watcher(url());
  Reports none_yet;
  {
    Observing early(watcher.get(), name, &none_yet);
    EXPECT_TRUE(none_yet.AwaitLast([](const Seen& s) { return !s.leads; })) << "no first report";
  }
  Options o;
  o.value("one").owner("first");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t term = dlock_lock_fencing_token(l);

  // Started late: the current leader first.
  Reports reports;
  Observing observing(watcher.get(), name, &reports);
  ASSERT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.leads && s.term == Shown(term); }))
      << Describe(reports.All());
  EXPECT_EQ(reports.All().front().value, "one");
  EXPECT_EQ(reports.All().front().owner, "first");

  // A new value (proclaim) within the poll interval; the same term.
  ASSERT_EQ(dlock_lock_set_value(l, "two", 3), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.leads && s.term == Shown(term) && s.value == "two"; }))
      << Describe(reports.All());
  // Resigned: nobody leads.
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(reports.AwaitLast([](const Seen& s) { return !s.leads; })) << Describe(reports.All());
  // A new leader, with a greater term.
  Options o2;
  o2.value("three");
  dlock_lock* l2 = nullptr;
  ASSERT_EQ(dlock_campaign(d.get(), name.c_str(), o2.get(), &l2), DLOCK_OK) << dlock_last_error();
  const uint64_t term2 = dlock_lock_fencing_token(l2);
  EXPECT_GT(term2, term);
  EXPECT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.leads && s.term == Shown(term2) && s.value == "three"; }))
      << Describe(reports.All());
  ExpectNeverBackwards(reports.All());

  // Cancelled while a report runs on the loop: cancel waits for it, and none follows.
  reports.linger_ms = 300;
  ASSERT_EQ(dlock_lock_set_value(l2, "four", 4), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return reports.running.load(); }, 10s)) << "the new value was not reported";
  observing.Cancel();
  EXPECT_FALSE(reports.running.load()) << "cancel returned while a report ran";
  const size_t at_cancel = reports.Count();
  ASSERT_EQ(dlock_release(l2), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kObservePollMs));
  EXPECT_EQ(reports.Count(), at_cancel) << "a report after cancel returned";
}

// Backends with DLOCK_CAP_FAIR (Redis): a new value is announced to observers, and wakes no
// waiting candidate (it is no release: a woken waiter would only try again in vain).
TEST_P(Election, ANewValueWakesNoWaitingCandidate) {
  Client leader(url()), candidate(url()), watcher(url());
  if ((dlock_client_capabilities(leader.get()) & DLOCK_CAP_FAIR) == 0) {
    GTEST_SKIP() << "this backend does not queue its candidates";
  }
  const std::string name = Name("proclaimed");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(leader.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  Reports reports;
  Observing observing(watcher.get(), name, &reports);
  uint32_t attempts = 0;
  std::thread waiting([&] {
    Options o;
    o.retry(20000, 30000);  // served by the resignation, not by retries
    dlock_lock* mine = nullptr;
    ASSERT_EQ(dlock_campaign(candidate.get(), name.c_str(), o.get(), &mine), DLOCK_OK) << dlock_last_error();
    attempts = dlock_lock_attempts(mine);
    EXPECT_EQ(dlock_release(mine), DLOCK_OK) << dlock_last_error();
  });
  ASSERT_TRUE(WaitFor([&] { return server().InLine(name) == 1; }, 20s)) << "the candidate never queued";
  for (const std::string v : {"one", "two", "three"}) {
    ASSERT_EQ(dlock_lock_set_value(l, v.data(), v.size()), DLOCK_OK) << dlock_last_error();
    EXPECT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.value == v; })) << Describe(reports.All());
  }
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  waiting.join();
  EXPECT_LE(attempts, 2u) << "the new values woke the waiting candidate";
}

// Where the backend says it pushes (DLOCK_CAP_OBSERVE_PUSH), a new value reaches observers
// without waiting for their poll. An observer polls kObservePollMs after its last read was
// answered, and reports before that: a new value reported sooner than that after the report
// before it was pushed. A pushed value within that time once in five tries passes; a lost push
// fails every try (a stalled machine may fail one).
TEST_P(Election, ANewValueIsPushedToObserversWhereTheBackendSaysSo) {
  Client leader(url()), watcher(url());
  if ((dlock_client_capabilities(leader.get()) & DLOCK_CAP_OBSERVE_PUSH) == 0) {
    GTEST_SKIP() << "this backend's observers poll for new values";
  }
  const std::string name = Name("pushed");
  Options o;
  o.value("v0");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(leader.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  Reports reports;
  Observing observing(watcher.get(), name, &reports);
  std::string gaps;
  bool pushed = false;
  for (int i = 1; i <= 5 && !pushed; ++i) {
    const std::string before = "v" + std::to_string(i - 1), now = "v" + std::to_string(i);
    ASSERT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.value == before; })) << Describe(reports.All());
    const Clock::time_point reported = reports.All().back().at;
    ASSERT_EQ(dlock_lock_set_value(l, now.data(), now.size()), DLOCK_OK) << dlock_last_error();
    ASSERT_TRUE(reports.AwaitLast([&](const Seen& s) { return s.value == now; })) << Describe(reports.All());
    const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(reports.All().back().at - reported);
    gaps += std::to_string(gap.count()) + " ms ";
    pushed = gap.count() < kObservePollMs;
  }
  EXPECT_TRUE(pushed) << "each new value came a poll after the report before it: " << gaps;
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

// The queued form hands the same reports to the caller's thread through a completion queue.
TEST_P(Election, AQueuedObserverHandsEachChangeToTheCallersThread) {
  const std::string name = Name("queued");
  Client c(url()), watcher(url());
  Queue q;
  dlock_observer* ob = nullptr;
  ASSERT_EQ(dlock_observe_queued(watcher.get(), name.c_str(), q.get(), 7, &ob), DLOCK_OK) << dlock_last_error();
  std::vector<Seen> seen;
  // Pops until the last report satisfies pred (polling the queue's fd, as the header says).
  auto await_last = [&](auto pred) {
    const auto start = Clock::now();
    while (MsSince(start) < 10000) {
      pollfd p{q.fd(), POLLIN, 0};
      (void)poll(&p, 1, 100);
      uint64_t tag = 0;
      dlock_status st = DLOCK_EINTERNAL;
      dlock_info* leader = nullptr;
      int kind;
      while ((kind = dlock_queue_pop_leader(q.get(), &tag, &st, nullptr, &leader)) > 0) {
        EXPECT_EQ(kind, DLOCK_QUEUE_LEADER);
        EXPECT_EQ(tag, 7u);
        EXPECT_EQ(st, DLOCK_OK);
        Seen s;
        if (leader != nullptr) {
          s.leads = true;
          s.term = dlock_info_fencing_token(leader, 0);
          size_t len = 0;
          const void* v = dlock_info_value(leader, 0, &len);
          s.value.assign(static_cast<const char*>(v), len);
          dlock_info_free(leader);
        }
        seen.push_back(s);
      }
      if (!seen.empty() && pred(seen.back())) return true;
    }
    return false;
  };
  EXPECT_TRUE(await_last([](const Seen& s) { return !s.leads; })) << Describe(seen);
  Options o;
  o.value("queued leader");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t term = dlock_lock_fencing_token(l);
  EXPECT_TRUE(await_last([&](const Seen& s) { return s.leads && s.term == Shown(term) && s.value == "queued leader"; }))
      << Describe(seen);
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(await_last([](const Seen& s) { return !s.leads; })) << Describe(seen);
  dlock_observer_cancel(ob);
  EXPECT_EQ(dlock_observe_queued(watcher.get(), name.c_str(), nullptr, 7, &ob), DLOCK_EINVAL);
}

TEST_P(Election, LeaderOfAFreeNameIsNoneAndOfASharedOneIsRefused) {
  Client c(url());
  const std::string name = Name("nobody");
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_leader(c.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u);
  dlock_info_free(info);
  Options shared;
  if ((dlock_client_capabilities(c.get()) & DLOCK_CAP_SHARED) != 0) {
    shared.shared();
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), shared.get(), &l), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_leader(c.get(), name.c_str(), &info), DLOCK_EINVAL);
    EXPECT_NE(std::string(dlock_last_error()).find("not an election"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(dlock_campaign(c.get(), name.c_str(), shared.get(), &l), DLOCK_EINVAL);
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  }
  EXPECT_EQ(dlock_observe(c.get(), name.c_str(), nullptr, nullptr, nullptr), DLOCK_EINVAL);
  dlock_observer_cancel(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Election, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
