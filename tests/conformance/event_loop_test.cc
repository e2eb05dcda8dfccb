// The _async calls on an event_base of the caller's (no thread of ours, everything on its
// thread) and on a client with its own thread (callbacks on that thread).
#include <future>
#include <thread>
#include <vector>

#include "conformance/conformance.h"
#include "event_loop_util.h"

namespace dlock_test {
namespace {

class EventLoop : public BackendTest {};

TEST_P(EventLoop, ManyLocksOnOneLoopWithNoThreadOfOurs) {
  const std::string address = url();  // the server is up before threads are counted
  const int threads_before = ThreadCount();
  Loop loop;
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open_evbase(address.c_str(), loop.base(), &c), DLOCK_OK) << dlock_last_error();
  struct State {
    std::vector<dlock_lock*> locks;
    int acquired = 0, released = 0, failures = 0, threads_seen = 0;
    std::thread::id loop_thread = std::this_thread::get_id();
    bool all_on_loop_thread = true;
  } st;
  constexpr int kLocks = 100;
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_EQ(dlock_acquire_async(c, Name(std::to_string(i)).c_str(), nullptr,
                                  [](dlock_status s, dlock_lock* l, void* arg) {
                                    auto* st = static_cast<State*>(arg);
                                    st->all_on_loop_thread &= std::this_thread::get_id() == st->loop_thread;
                                    if (s != DLOCK_OK) {
                                      ADD_FAILURE() << dlock_status_str(s) << ": " << dlock_last_error();
                                      st->failures++;
                                      return;
                                    }
                                    st->locks.push_back(l);
                                    st->threads_seen = std::max(st->threads_seen, ThreadCount());
                                    st->acquired++;
                                  },
                                  &st),
              DLOCK_OK);
  }
  ASSERT_TRUE(loop.RunUntil([&] { return st.acquired + st.failures == kLocks; }, 30000ms))
      << "acquired " << st.acquired;
  Client observer(url());
  EXPECT_EQ(Inspect(observer.get(), Name("99")).holders.size(), 1u);
  for (dlock_lock* held : st.locks) {
    ASSERT_EQ(dlock_release_async(held, [](dlock_status s, void* arg) {
      EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
      static_cast<State*>(arg)->released++;
    }, &st), DLOCK_OK);
  }
  ASSERT_TRUE(loop.RunUntil([&] { return st.released == st.acquired; }, 30000ms))
      << "released " << st.released;
  EXPECT_EQ(st.failures, 0);
  EXPECT_TRUE(st.all_on_loop_thread);
  EXPECT_EQ(st.threads_seen, threads_before);
  EXPECT_TRUE(Inspect(observer.get(), Name("0")).free());
  dlock_client_close(c);
  EXPECT_TRUE(loop.Drain(10000ms));
}

// The acquire is sent while the server holds its answers back (BackendServer::HoldAnswers), so
// that it is provably in flight when the client closes: the server grants it only afterwards,
// and the closed client must give it back.
TEST_P(EventLoop, CloseGivesBackAnAcquireThatWasInFlight) {
  Loop loop;
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open_evbase(url().c_str(), loop.base(), &c), DLOCK_OK) << dlock_last_error();
  struct CloseOnExit {  // should an assertion stop the test before the close
    dlock_client*& c;
    Loop& loop;
    ~CloseOnExit() {
      if (c == nullptr) return;
      dlock_client_close(c);
      loop.Drain(10000ms);
    }
  } close_on_exit{c, loop};
  Client observer(url());
  Options no_expiry;
  no_expiry.lease(0);  // left behind, it would stay forever
  // One acquire and release first, so that what the client sets up once (its connections, the
  // scripts, an etcd lease) is done: what the held server gets next is the acquire.
  AcquireResult warm_up;
  ASSERT_EQ(dlock_acquire_async(c, Name("warm-up").c_str(), no_expiry.get(), &AcquireResult::Fn, &warm_up),
            DLOCK_OK);
  ASSERT_TRUE(loop.RunUntil([&] { return warm_up.calls > 0; }, 10000ms));
  ASSERT_EQ(warm_up.s, DLOCK_OK) << dlock_last_error();
  int released = 0;
  ASSERT_EQ(dlock_release_async(warm_up.lock, [](dlock_status s, void* arg) {
    EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
    ++*static_cast<int*>(arg);
  }, &released), DLOCK_OK);
  ASSERT_TRUE(loop.RunUntil([&] { return released > 0; }, 10000ms));

  const std::string name = Name("stuck");
  AcquireResult stuck;
  {
    AnswersHeld held(server());
    ASSERT_TRUE(held.ok()) << "the server would not hold its answers back";
    ASSERT_TRUE(SendAcquireWhileHeld(loop, c, name, no_expiry.get(), &stuck, [&] { return server().RequestHeld(); }))
        << "the acquire never reached the server: " << stuck.calls << " answers, "
        << dlock_status_str(stuck.s);
    dlock_client_close(c);
    c = nullptr;
    EXPECT_EQ(stuck.calls, 1);
    EXPECT_EQ(stuck.s, DLOCK_ECANCELLED);
  }  // the server takes the acquire now, and grants it: the closed client must give it back
  EXPECT_TRUE(loop.Drain(10000ms)) << "the close did not finish";
  EXPECT_EQ(stuck.calls, 1);
  EXPECT_TRUE(Inspect(observer.get(), name).free()) << "an orphan lock was left behind";
}

TEST_P(EventLoop, AsyncCallsOnAClientWithItsOwnThreadCallBackOnThatThread) {
  Client client(url());
  const std::string name = Name("owned");
  struct Acquired {
    std::promise<std::thread::id> where;
    dlock_lock* lock = nullptr;
    dlock_status status = DLOCK_EINTERNAL;
  } acquired;
  ASSERT_EQ(dlock_acquire_async(client.get(), name.c_str(), nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    auto* a = static_cast<Acquired*>(arg);
    a->status = s;
    a->lock = l;
    a->where.set_value(std::this_thread::get_id());
  }, &acquired), DLOCK_OK);
  auto where = acquired.where.get_future();
  ASSERT_EQ(where.wait_for(10s), std::future_status::ready);
  EXPECT_NE(where.get(), std::this_thread::get_id());
  ASSERT_EQ(acquired.status, DLOCK_OK);
  Client observer(url());
  EXPECT_EQ(Inspect(observer.get(), name).holders.size(), 1u);
  std::promise<dlock_status> released;
  ASSERT_EQ(dlock_release_async(acquired.lock, [](dlock_status s, void* arg) {
    static_cast<std::promise<dlock_status>*>(arg)->set_value(s);
  }, &released), DLOCK_OK);
  auto outcome = released.get_future();
  ASSERT_EQ(outcome.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(outcome.get(), DLOCK_OK);
  EXPECT_TRUE(Inspect(observer.get(), name).free());
}

INSTANTIATE_TEST_SUITE_P(Conformance, EventLoop, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
