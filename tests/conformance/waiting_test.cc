// Waiting for a lock another holds, in every style: one try, a bounded wait, a wait without
// limit handed the lock by the release, and (where a style can) cancelling a wait.
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "conformance/conformance.h"
#include "event_loop_util.h"
#include "queue_util.h"

namespace dlock_test {
namespace {

class Waiting : public StyleTest {};

TEST_P(Waiting, OneTryFailsAtOnceWhileAnotherHolds) {
  auto c = Open();
  const std::string name = Name("busy");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  dlock_lock* l = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(c->Acquire(name.c_str(), nullptr, &l), DLOCK_NOT_ACQUIRED);  // wait_ms 0: one try
  EXPECT_LT(MsSince(start), kCallBoundMs + kSlackMs) << "one try is one call, not a wait";
  EXPECT_EQ(l, nullptr);
  EXPECT_NE(c->last_error().find(name), std::string::npos) << c->last_error();

  // Without a context, locks are not reentrant: the holding client itself is refused too, and told why.
  dlock_lock* mine = nullptr;
  ASSERT_EQ(c->Acquire(Name("mine").c_str(), nullptr, &mine), DLOCK_OK) << c->last_error();
  dlock_lock* again = nullptr;
  EXPECT_EQ(c->Acquire(Name("mine").c_str(), nullptr, &again), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(c->last_error().find("re-enters a hold only under the same context"), std::string::npos) << c->last_error();
  EXPECT_EQ(c->Release(mine), DLOCK_OK) << c->last_error();

  EXPECT_TRUE(holder.Undisturbed());
}

TEST_P(Waiting, BoundedWaitGivesUpAfterItsBound) {
  auto c = Open();
  const std::string name = Name("busy");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  Options opts;
  opts.wait(400);
  dlock_lock* l = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(c->Acquire(name.c_str(), opts.get(), &l), DLOCK_NOT_ACQUIRED);
  const int64_t waited = MsSince(start);
  EXPECT_GE(waited, 400);
  EXPECT_LT(waited, 400 + kCallBoundMs + kSlackMs) << "W + C + T (dlock.h), with slack";
  EXPECT_EQ(l, nullptr);
  EXPECT_NE(c->last_error().find(name), std::string::npos) << c->last_error();
  EXPECT_TRUE(holder.Undisturbed());
}

TEST_P(Waiting, UnlimitedWaiterGetsTheLockSoonAfterRelease) {
  auto c = Open();
  const std::string name = Name("baton");
  HeldElsewhere holder(url(), name);  // lease 10 s: only its release can end the wait early
  ASSERT_TRUE(holder.held());
  const bool notifies = (dlock_client_capabilities(c->get()) & DLOCK_CAP_NOTIFIES) != 0;
  Options waiting;
  waiting.wait(-1);
  // A backend that notifies wakes its waiters by the release itself: a fallback retry 20 s away
  // cannot be what woke it within the bound below. One that does not notifies retries (here at
  // most 200 ms apart), never sleeping until the holder's 10 s lease could have run out.
  if (notifies) {
    waiting.retry(20000, 30000);
  } else {
    waiting.retry(50, 200);
  }
  const int64_t bound_ms = notifies ? 10000 : 200 + kCallBoundMs;

  BackendServer& srv = server();
  std::atomic<bool> waiting_started{false};
  std::atomic<bool> in_line{true};
  std::atomic<Clock::rep> released_at{0};
  std::thread releaser([&] {
    while (!waiting_started) std::this_thread::sleep_for(1ms);
    if (srv.InLine(name) >= 0) {
      // A fair backend shows the waiter in line once its first attempt was refused.
      in_line = WaitFor([&] { return srv.InLine(name) == 1; }, 20000ms);
    } else {
      // Nothing else shows a waiter: give it time to start waiting. One that has not yet takes
      // the lock at its first attempt, which proves less but cannot fail.
      std::this_thread::sleep_for(500ms);
    }
    released_at = Clock::now().time_since_epoch().count();
    holder.Release();
  });
  waiting_started = true;
  dlock_lock* l = nullptr;
  dlock_status s = c->Acquire(name.c_str(), waiting.get(), &l);
  const auto acquired_at = Clock::now();
  releaser.join();
  ASSERT_EQ(s, DLOCK_OK) << c->last_error();
  ASSERT_NE(released_at.load(), 0) << "it got the lock before the release: proves nothing";
  EXPECT_TRUE(in_line.load()) << "the waiter never took its place in line";
  const int64_t handoff_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 acquired_at - Clock::time_point(Clock::duration(released_at.load())))
                                 .count();
  EXPECT_LT(handoff_ms, bound_ms) << "the waiter slept through the release";
  if (notifies) {
    EXPECT_LE(dlock_lock_attempts(l), 4u) << "a few attempts, not a poll loop";
  }
  EXPECT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
}

// Backends with DLOCK_CAP_FAIR: waiters that queued one after another get the lock in that
// order, each handed it by the release before (no herd: a release wakes one waiter, not all).
TEST_P(Waiting, FairWaitersAreServedInArrivalOrder) {
  auto probe = Open();
  if ((dlock_client_capabilities(probe->get()) & DLOCK_CAP_FAIR) == 0) {
    GTEST_SKIP() << "this backend does not queue its waiters";
  }
  constexpr int kWaiters = 4;
  const std::string name = Name("line");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  std::vector<std::unique_ptr<StyledClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(Open());
  std::mutex mu;
  std::vector<int> order;
  std::vector<uint32_t> attempts(kWaiters, 0);
  std::vector<uint64_t> tokens;
  std::vector<std::thread> waiters;
  BackendServer& srv = server();
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      Options o;
      // Retries this slow cannot be what serves a waiter within the test's time: the releases do.
      o.wait(60000).retry(20000, 30000).lease(20000);
      dlock_lock* l = nullptr;
      dlock_status s = clients[i]->Acquire(name.c_str(), o.get(), &l);
      ASSERT_EQ(s, DLOCK_OK) << clients[i]->last_error();
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
        attempts[i] = dlock_lock_attempts(l);
        tokens.push_back(dlock_lock_fencing_token(l));
      }
      std::this_thread::sleep_for(50ms);
      EXPECT_EQ(clients[i]->Release(l), DLOCK_OK) << clients[i]->last_error();
    });
    // Each takes its place in line (its first attempt refused) before the next one asks.
    if (!WaitFor([&] { return srv.InLine(name) == i + 1; }, 20000ms)) {
      ADD_FAILURE() << "waiter " << i << " never took its place in line: " << srv.InLine(name)
                    << " in line (-1: the test's server cannot show its line)";
      break;
    }
  }
  const auto released = Clock::now();
  holder.Release();
  for (auto& t : waiters) t.join();
  EXPECT_LT(MsSince(released), 10000) << "the line moved by retries, not by hand-overs";
  ASSERT_EQ(order.size(), static_cast<size_t>(kWaiters));
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_EQ(order[i], i) << "served out of arrival order";
    // The first attempt, and one more if it was not listening yet when that one left.
    EXPECT_LE(attempts[i], 2u) << "waiter " << i << " retried: every release woke it";
  }
  for (int i = 1; i < kWaiters; ++i) EXPECT_GT(tokens[i], tokens[i - 1]);
}

// Backends with DLOCK_CAP_FAIR: semaphore waiters wait in line too. Permits a release frees go to
// the first waiters whose takes fit, in arrival order: a waiter for 2 is not overtaken by a
// newcomer for 1 while only 1 is free, and one release may serve two waiters of 1.
TEST_P(Waiting, FairSemaphoreWaitersAreServedInLineWithTheirTakes) {
  auto probe = Open();
  if ((dlock_client_capabilities(probe->get()) & (DLOCK_CAP_FAIR | DLOCK_CAP_PERMITS)) !=
      (DLOCK_CAP_FAIR | DLOCK_CAP_PERMITS)) {
    GTEST_SKIP() << "this backend does not queue semaphore waiters";
  }
  const std::string name = Name("permit-line");
  BackendServer& srv = server();
  Client h1(url()), h2(url()), newcomer(url());
  Options one;
  one.permits(2).lease(20000);
  Hold first(h1.get(), name, one.get()), second(h2.get(), name, one.get());
  ASSERT_TRUE(first.held() && second.held()) << first.error() << second.error();

  const uint32_t takes[] = {2, 1, 1};
  constexpr int kWaiters = 3;
  std::vector<std::unique_ptr<StyledClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(Open());
  std::mutex mu;
  std::vector<int> order;
  std::vector<uint32_t> attempts(kWaiters, 0);
  std::vector<dlock_lock*> held(kWaiters, nullptr);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      Options o;
      // Retries this slow cannot be what serves a waiter within the test's time: releases do.
      o.permits(2).take(takes[i]).wait(60000).retry(20000, 30000).lease(20000);
      dlock_lock* l = nullptr;
      dlock_status s = clients[i]->Acquire(name.c_str(), o.get(), &l);
      ASSERT_EQ(s, DLOCK_OK) << clients[i]->last_error();
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      attempts[i] = dlock_lock_attempts(l);
      held[i] = l;
    });
    if (!WaitFor([&] { return srv.InLine(name) == i + 1; }, 20000ms)) {
      ADD_FAILURE() << "waiter " << i << " never took its place in line: " << srv.InLine(name);
      break;
    }
  }
  // One permit free, the first in line wants two: it waits, and nobody goes ahead of it.
  ASSERT_EQ(first.Release(), DLOCK_OK) << first.error();
  Options try_one;
  try_one.permits(2).lease(20000);
  Hold overtaker(newcomer.get(), name, try_one.get());
  EXPECT_EQ(overtaker.status(), DLOCK_NOT_ACQUIRED) << "a newcomer went ahead of the line";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty()) << "served with one permit free for a take of two";
  }
  const auto released = Clock::now();
  ASSERT_EQ(second.Release(), DLOCK_OK) << second.error();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !order.empty();
  }, 20000ms)) << "the release handed nothing over";
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(order.size(), 1u) << "a take of two is both permits: nobody beside it";
    EXPECT_EQ(order[0], 0);
  }
  // Its release serves both waiters of one.
  ASSERT_EQ(clients[0]->Release(held[0]), DLOCK_OK) << clients[0]->last_error();
  for (auto& t : waiters) t.join();
  EXPECT_LT(MsSince(released), 10000) << "the line moved by retries, not by hand-overs";
  ASSERT_EQ(order.size(), static_cast<size_t>(kWaiters));
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_LE(attempts[i], 2u) << "waiter " << i << " retried: a release woke it for nothing";
  }
  for (int i = 1; i < kWaiters; ++i) EXPECT_EQ(clients[i]->Release(held[i]), DLOCK_OK) << clients[i]->last_error();
}

// Backends with DLOCK_CAP_FAIR: readers and writers share one line. A release serves its head:
// the readers at the head together, up to the first writer; a writer once nothing is held. A
// reader that comes after a waiting writer waits behind it (the writer preference), and nobody
// is woken for nothing.
TEST_P(Waiting, FairReadersAndWritersAreServedInLine) {
  auto probe = Open();
  if ((dlock_client_capabilities(probe->get()) & (DLOCK_CAP_FAIR | DLOCK_CAP_SHARED)) !=
      (DLOCK_CAP_FAIR | DLOCK_CAP_SHARED)) {
    GTEST_SKIP() << "this backend does not queue shared waiters";
  }
  const std::string name = Name("rw-line");
  BackendServer& srv = server();
  Client holder(url()), newcomer(url());
  Options exclusive;
  exclusive.lease(20000).owner("w0");
  Hold w0(holder.get(), name, exclusive.get());
  ASSERT_TRUE(w0.held()) << w0.error();

  // In line, in this order: two readers, a writer, a reader; and a last reader who comes once
  // the first two hold, when only the line stands in its way (no hold that blocks it ends).
  const char* const owners[] = {"r1", "r2", "w1", "r3", "r4"};
  const bool shared[] = {true, true, false, true, true};
  constexpr int kWaiters = 5;
  std::vector<std::unique_ptr<StyledClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(Open());
  std::mutex mu;
  std::vector<int> order;
  std::vector<uint32_t> attempts(kWaiters, 0);
  std::vector<uint64_t> tokens(kWaiters, 0);
  std::vector<dlock_lock*> held(kWaiters, nullptr);
  std::vector<std::thread> waiters;
  // Starts waiter i, and waits until the line is `line` long with it.
  auto wait_in_line = [&](int i, int line) {
    waiters.emplace_back([&, i] {
      Options o;
      // Retries this slow cannot be what serves a waiter within the test's time: releases do.
      o.wait(60000).retry(20000, 30000).lease(20000).owner(owners[i]);
      if (shared[i]) o.shared();
      dlock_lock* l = nullptr;
      dlock_status s = clients[i]->Acquire(name.c_str(), o.get(), &l);
      ASSERT_EQ(s, DLOCK_OK) << owners[i] << ": " << clients[i]->last_error();
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      attempts[i] = dlock_lock_attempts(l);
      tokens[i] = dlock_lock_fencing_token(l);
      held[i] = l;
    });
    if (WaitFor([&] { return srv.InLine(name) == line; }, 20000ms)) return true;
    ADD_FAILURE() << owners[i] << " never took its place in line: " << srv.InLine(name);
    return false;
  };
  for (int i = 0; i < 4; ++i) {
    if (!wait_in_line(i, i + 1)) break;
  }
  auto served = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return order.size();
  };
  auto holders = [&] {
    std::vector<std::string> names;
    for (const auto& h : Inspect(holder.get(), name).holders) names.push_back(h.owner);
    std::sort(names.begin(), names.end());
    return names;
  };
  using Names = std::vector<std::string>;

  // The writer's release serves the two readers at the head, and not the one behind the writer.
  const auto released = Clock::now();
  ASSERT_EQ(w0.Release(), DLOCK_OK) << w0.error();
  ASSERT_TRUE(WaitFor([&] { return served() == 2; }, 20000ms)) << "the release served " << served();
  EXPECT_EQ(holders(), (Names{"r1", "r2"}));
  Options one_try;
  one_try.shared();
  Hold jumper(newcomer.get(), name, one_try.get());
  EXPECT_EQ(jumper.status(), DLOCK_NOT_ACQUIRED) << "a new reader went ahead of the waiting writer";
  wait_in_line(4, 3);  // behind w1 and r3

  // The writer is served when the last reader leaves, not before.
  ASSERT_EQ(clients[0]->Release(held[0]), DLOCK_OK) << clients[0]->last_error();
  EXPECT_EQ(holders(), (Names{"r2"})) << "the writer was served while a reader held";
  ASSERT_EQ(clients[1]->Release(held[1]), DLOCK_OK) << clients[1]->last_error();
  ASSERT_TRUE(WaitFor([&] { return served() == 3; }, 20000ms)) << "the last reader's release served nobody";
  EXPECT_EQ(holders(), (Names{"w1"}));

  // The readers behind it go in together when it leaves.
  ASSERT_EQ(clients[2]->Release(held[2]), DLOCK_OK) << clients[2]->last_error();
  for (auto& t : waiters) t.join();
  EXPECT_LT(MsSince(released), 10000) << "the line moved by retries, not by hand-overs";
  ASSERT_EQ(order.size(), static_cast<size_t>(kWaiters));
  EXPECT_EQ(order[2], 2) << "the writer was not third";
  EXPECT_EQ(std::min(order[3], order[4]), 3) << "a reader behind the writer was served before it";
  EXPECT_EQ(std::max(order[3], order[4]), 4) << "a reader behind the writer was served before it";
  EXPECT_EQ(holders(), (Names{"r3", "r4"}));
  for (int i = 0; i < kWaiters; ++i) {
    // Its first try, and one more if its watch went live after that try left (WatchLive).
    EXPECT_LE(attempts[i], 2u) << owners[i] << " retried: a release woke it for nothing, or a refusal "
                               << "said a hold would end that does not block it";
  }
  EXPECT_GT(tokens[2], std::max(tokens[0], tokens[1])) << "the writer's token";
  EXPECT_GT(std::min(tokens[3], tokens[4]), tokens[2]) << "the last readers' tokens";
  for (int i = 3; i < kWaiters; ++i) EXPECT_EQ(clients[i]->Release(held[i]), DLOCK_OK) << clients[i]->last_error();
}

// A second waiter of one client finds the name watched already (the first waiter's watch is
// live): its first attempt cannot miss a release, so it is its only one, and the release before
// its turn hands the lock over without another try. (A watch that went live after the attempt
// left would justify one more, as above.)
TEST_P(Waiting, AWaiterWhoseWatchIsLiveAlreadyTriesOnce) {
  Client client(url());  // one client: the second waiter shares the first one's watch
  if ((dlock_client_capabilities(client.get()) & DLOCK_CAP_FAIR) == 0) {
    GTEST_SKIP() << "this backend does not queue its waiters";
  }
  BackendServer& srv = server();
  const std::string name = Name("livewatch");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  Options o;
  o.wait(60000).retry(20000, 30000).lease(20000);  // retries too slow to serve them in time
  uint32_t second_attempts = 0;
  auto first_is_listening = [&] {
    // Its place in line alone does not say its watch is live (its first attempt takes it).
    ASSERT_TRUE(WaitFor([&] { return srv.InLine(name) == 1; }, 20000ms)) << srv.InLine(name);
    ASSERT_TRUE(WaitFor([&] { return srv.Listening(name) == 1; }, 20000ms)) << srv.Listening(name);
    // The server counting the subscription means its answer is on the wire, not that the
    // client has read it (until then the watch is not live, and a second waiter rightly tries
    // again: CI saw it under load). A round trip through the client's loop, started now,
    // finishes only after a loop turn that found that answer waiting.
    Queue probe_queue;
    ASSERT_EQ(dlock_acquire_queued(client.get(), Name("probe").c_str(), nullptr, probe_queue.get(), 9),
              DLOCK_OK);
    Entry probe = CollectOne(probe_queue.get(), 20000ms);
    ASSERT_EQ(probe.status, DLOCK_OK) << probe;
    EXPECT_EQ(dlock_release(probe.lock), DLOCK_OK) << dlock_last_error();
  };
  if (srv.Listening(name) < 0) GTEST_SKIP() << "the test's server cannot show who listens";
  if (style() == Style::kBlocking) {
    auto wait_for_it = [&](uint32_t* attempts) {
      dlock_lock* l = nullptr;
      ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
      if (attempts != nullptr) *attempts = dlock_lock_attempts(l);
      EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
    };
    std::thread first(wait_for_it, nullptr);
    first_is_listening();
    std::thread second(wait_for_it, &second_attempts);
    EXPECT_TRUE(WaitFor([&] { return srv.InLine(name) == 2; }, 20000ms)) << srv.InLine(name);
    holder.Release();
    first.join();
    second.join();
  } else {
    // The non-blocking styles run one driver (AsyncAcquire): the queued calls, from this one
    // thread, on one client.
    Queue q;
    ASSERT_EQ(dlock_acquire_queued(client.get(), name.c_str(), o.get(), q.get(), 1), DLOCK_OK);
    first_is_listening();
    ASSERT_EQ(dlock_acquire_queued(client.get(), name.c_str(), o.get(), q.get(), 2), DLOCK_OK);
    ASSERT_TRUE(WaitFor([&] { return srv.InLine(name) == 2; }, 20000ms)) << srv.InLine(name);
    holder.Release();
    for (uint64_t turn = 1; turn <= 2; ++turn) {
      Entry e = CollectOne(q.get(), 20000ms);
      ASSERT_EQ(e.status, DLOCK_OK) << e;
      ASSERT_EQ(e.tag, turn) << "served out of arrival order";
      if (turn == 2) second_attempts = dlock_lock_attempts(e.lock);
      EXPECT_EQ(dlock_release(e.lock), DLOCK_OK) << dlock_last_error();
    }
  }
  EXPECT_EQ(second_attempts, 1u) << "a waiter whose watch was live tried again";
}

INSTANTIATE_TEST_SUITE_P(Conformance, Waiting,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

// Cancelling is for the styles that do not block the caller: _async and _queued.
class Cancelling : public BackendTest {};

TEST_P(Cancelling, CancelledOrClosedAsyncWaitsEndWithEcancelled) {
  const std::string name = Name("busy");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  Loop loop;
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open_evbase(url().c_str(), loop.base(), &c), DLOCK_OK) << dlock_last_error();
  Options forever;
  forever.wait(-1);

  AcquireResult cancelled;
  ASSERT_EQ(dlock_acquire_async(c, name.c_str(), forever.get(), &AcquireResult::Fn, &cancelled), DLOCK_OK);
  loop.RunUntil([] { return false; }, 200ms);
  EXPECT_EQ(cancelled.calls, 0) << "the wait ended early";
  EXPECT_EQ(dlock_acquire_cancel(c, &cancelled), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(loop.RunUntil([&] { return cancelled.calls > 0; }, 5000ms));
  EXPECT_EQ(cancelled.s, DLOCK_ECANCELLED);
  EXPECT_EQ(cancelled.lock, nullptr);
  EXPECT_EQ(dlock_acquire_cancel(c, &cancelled), DLOCK_EINVAL) << "nothing is pending any more";

  AcquireResult closed;
  ASSERT_EQ(dlock_acquire_async(c, name.c_str(), forever.get(), &AcquireResult::Fn, &closed), DLOCK_OK);
  loop.RunUntil([] { return false; }, 100ms);
  dlock_client_close(c);
  EXPECT_TRUE(loop.Drain(10000ms));
  EXPECT_EQ(closed.calls, 1);
  EXPECT_EQ(closed.s, DLOCK_ECANCELLED);

  EXPECT_TRUE(holder.Undisturbed());
}

TEST_P(Cancelling, CancelledOrClosedQueuedWaitsEndWithEcancelled) {
  const std::string name = Name("busy");
  HeldElsewhere holder(url(), name);
  ASSERT_TRUE(holder.held());
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open(url().c_str(), &c), DLOCK_OK) << dlock_last_error();
  Queue q;
  Options forever;
  forever.wait(-1);

  ASSERT_EQ(dlock_acquire_queued(c, name.c_str(), forever.get(), q.get(), 1), DLOCK_OK);
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "the wait ended early";
  EXPECT_EQ(dlock_acquire_cancel_queued(c, q.get(), 1), DLOCK_OK) << dlock_last_error();
  Entry cancelled = CollectOne(q.get());
  EXPECT_EQ(cancelled.kind, DLOCK_QUEUE_DONE);
  EXPECT_EQ(cancelled.tag, 1u);
  EXPECT_EQ(cancelled.status, DLOCK_ECANCELLED) << cancelled;
  EXPECT_EQ(cancelled.lock, nullptr);

  ASSERT_EQ(dlock_acquire_queued(c, name.c_str(), forever.get(), q.get(), 2), DLOCK_OK);
  EXPECT_FALSE(Readable(q.fd(), 100ms)) << "the wait ended early";
  dlock_client_close(c);
  Entry closed = CollectOne(q.get());
  EXPECT_EQ(closed.tag, 2u);
  EXPECT_EQ(closed.status, DLOCK_ECANCELLED) << closed;

  EXPECT_TRUE(holder.Undisturbed());
}

INSTANTIATE_TEST_SUITE_P(Conformance, Cancelling, ::testing::ValuesIn(AllBackends()), BackendTestName);

// A loop held up past an acquire's whole wait (a long callback) before the acquire could make
// its first try: the try is still made, and a free lock is taken.
class LateLoop : public BackendTest {};

TEST_P(LateLoop, AnAcquireWhoseWaitRanOutBeforeItsFirstTryStillTakesAFreeLock) {
  Client client(url());
  struct Blocker {
    std::atomic<bool> blocking{false};
    dlock_lock* lock = nullptr;
  } blocker;
  ASSERT_EQ(dlock_acquire_async(client.get(), Name("blocker").c_str(), nullptr,
                                [](dlock_status s, dlock_lock* l, void* arg) {
                                  auto* b = static_cast<Blocker*>(arg);
                                  EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
                                  b->lock = l;
                                  b->blocking = true;
                                  std::this_thread::sleep_for(400ms);  // holds up the loop
                                },
                                &blocker),
            DLOCK_OK);
  ASSERT_TRUE(WaitFor([&] { return blocker.blocking.load(); }, 10000ms));
  const std::string name = Name("late");
  Options brief;
  brief.wait(50);
  struct Late {
    std::atomic<bool> done{false};
    dlock_status status = DLOCK_EINTERNAL;
    std::string error;
    dlock_lock* lock = nullptr;
  } late;
  ASSERT_EQ(dlock_acquire_async(client.get(), name.c_str(), brief.get(),
                                [](dlock_status s, dlock_lock* l, void* arg) {
                                  auto* r = static_cast<Late*>(arg);
                                  r->status = s;
                                  if (s != DLOCK_OK) r->error = dlock_last_error();
                                  r->lock = l;
                                  r->done = true;
                                },
                                &late),
            DLOCK_OK);
  ASSERT_TRUE(WaitFor([&] { return late.done.load(); }, 10000ms));
  EXPECT_EQ(late.status, DLOCK_OK) << late.error;
  Client observer(url());
  EXPECT_EQ(Inspect(observer.get(), name).holders.size(), late.status == DLOCK_OK ? 1u : 0u);
  if (late.lock != nullptr) {
    EXPECT_EQ(dlock_release(late.lock), DLOCK_OK) << dlock_last_error();
  }
  if (blocker.lock != nullptr) {
    EXPECT_EQ(dlock_release(blocker.lock), DLOCK_OK) << dlock_last_error();
  }
  EXPECT_TRUE(Inspect(observer.get(), name).free());
}

INSTANTIATE_TEST_SUITE_P(Conformance, LateLoop, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
