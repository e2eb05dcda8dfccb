// The _async calls on a loop of the caller's (no thread of ours, everything on its thread):
// a libevent event_base (dlock_client_open_evbase, style "async") or the test's own poll(2)
// loop through the hook table (dlock_client_open_hooks, style "hooks"); and on a client with
// its own thread (callbacks on that thread).
#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "conformance/conformance.h"
#include "event_loop_util.h"
#include "poll_loop.h"
#include "queue_util.h"

namespace dlock_test {
namespace {

// Either kind of caller's loop, behind one face.
class CallersLoop {
 public:
  virtual ~CallersLoop() = default;
  virtual dlock_status Open(const std::string& url, dlock_client** out) = 0;
  // Runs the loop until done() or the limit; true when done().
  virtual bool RunUntil(std::function<bool()> done, std::chrono::milliseconds limit) = 0;
  // Runs until the closed clients have left nothing on the loop; true when they have.
  virtual bool Drain(std::chrono::milliseconds limit) = 0;
  // One turn that does not wait.
  virtual void Poke() = 0;
};

class EventBaseLoop : public CallersLoop {
 public:
  dlock_status Open(const std::string& url, dlock_client** out) override {
    return dlock_client_open_evbase(url.c_str(), loop_.base(), out);
  }
  bool RunUntil(std::function<bool()> done, std::chrono::milliseconds limit) override {
    return loop_.RunUntil(done, limit);
  }
  bool Drain(std::chrono::milliseconds limit) override { return loop_.Drain(limit); }
  void Poke() override { event_base_loop(loop_.base(), EVLOOP_NONBLOCK); }

 private:
  Loop loop_;
};

class HooksLoop : public CallersLoop {
 public:
  dlock_status Open(const std::string& url, dlock_client** out) override { return loop_.Open(url, out); }
  bool RunUntil(std::function<bool()> done, std::chrono::milliseconds limit) override {
    return loop_.RunUntil(done, limit);
  }
  // Every client opened on it has also called its cleanup hook.
  bool Drain(std::chrono::milliseconds limit) override {
    return loop_.Drain(limit) && loop_.cleanups() == opened_;
  }
  void Poke() override { loop_.Turn(std::chrono::milliseconds(0)); }
  void Opened() { ++opened_; }

 private:
  PollLoop loop_;
  int opened_ = 0;
};

class OnCallersLoop : public StyleTest {
 protected:
  void SetUp() override {
    if (style() == Style::kHooks) {
      hooks_ = new HooksLoop();
      loop_.reset(hooks_);
    } else {
      loop_ = std::make_unique<EventBaseLoop>();
    }
  }
  dlock_client* OpenClient() {
    dlock_client* c = nullptr;
    EXPECT_EQ(loop_->Open(url(), &c), DLOCK_OK) << dlock_last_error();
    if (c != nullptr && hooks_ != nullptr) hooks_->Opened();
    return c;
  }
  CallersLoop& loop() { return *loop_; }

 private:
  std::unique_ptr<CallersLoop> loop_;
  HooksLoop* hooks_ = nullptr;
};

// SendAcquireWhileHeld (event_loop_util.h) on either loop.
template <typename Held>
bool SendAcquireWhileHeld(CallersLoop& loop, dlock_client* c, const std::string& name,
                          const dlock_options* o, AcquireResult* r, Held held) {
  *r = AcquireResult{};
  if (dlock_acquire_async(c, name.c_str(), o, &AcquireResult::Fn, r) != DLOCK_OK) return false;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    loop.Poke();  // the acquire goes out on the loop
    if (r->calls != 0) return false;  // answered (an error): not held
    if (held()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

TEST_P(OnCallersLoop, ManyLocksOnOneLoopWithNoThreadOfOurs) {
  url();  // the server is up before threads are counted
  const int threads_before = ThreadCount();
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
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
  ASSERT_TRUE(loop().RunUntil([&] { return st.acquired + st.failures == kLocks; }, 30000ms))
      << "acquired " << st.acquired;
  Client observer(url());
  EXPECT_EQ(Inspect(observer.get(), Name("99")).holders.size(), 1u);
  for (dlock_lock* held : st.locks) {
    ASSERT_EQ(dlock_release_async(held, [](dlock_status s, void* arg) {
      EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
      static_cast<State*>(arg)->released++;
    }, &st), DLOCK_OK);
  }
  ASSERT_TRUE(loop().RunUntil([&] { return st.released == st.acquired; }, 30000ms))
      << "released " << st.released;
  EXPECT_EQ(st.failures, 0);
  EXPECT_TRUE(st.all_on_loop_thread);
  EXPECT_EQ(st.threads_seen, threads_before);
  EXPECT_TRUE(Inspect(observer.get(), Name("0")).free());
  dlock_client_close(c);
  EXPECT_TRUE(loop().Drain(10000ms));
}

// The acquire is sent while the server holds its answers back (BackendServer::HoldAnswers), so
// that it is provably in flight when the client closes: the server grants it only afterwards,
// and the closed client must give it back.
TEST_P(OnCallersLoop, CloseGivesBackAnAcquireThatWasInFlight) {
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
  struct CloseOnExit {  // should an assertion stop the test before the close
    dlock_client*& c;
    CallersLoop& loop;
    ~CloseOnExit() {
      if (c == nullptr) return;
      dlock_client_close(c);
      loop.Drain(10000ms);
    }
  } close_on_exit{c, loop()};
  Client observer(url());
  Options no_expiry;
  no_expiry.lease(0);  // left behind, it would stay forever
  // One acquire and release first, so that what the client sets up once (its connections, the
  // scripts, an etcd lease) is done: what the held server gets next is the acquire.
  AcquireResult warm_up;
  ASSERT_EQ(dlock_acquire_async(c, Name("warm-up").c_str(), no_expiry.get(), &AcquireResult::Fn, &warm_up),
            DLOCK_OK);
  ASSERT_TRUE(loop().RunUntil([&] { return warm_up.calls > 0; }, 10000ms));
  ASSERT_EQ(warm_up.s, DLOCK_OK) << dlock_last_error();
  int released = 0;
  ASSERT_EQ(dlock_release_async(warm_up.lock, [](dlock_status s, void* arg) {
    EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
    ++*static_cast<int*>(arg);
  }, &released), DLOCK_OK);
  ASSERT_TRUE(loop().RunUntil([&] { return released > 0; }, 10000ms));

  const std::string name = Name("stuck");
  AcquireResult stuck;
  {
    AnswersHeld held(server());
    ASSERT_TRUE(held.ok()) << "the server would not hold its answers back";
    ASSERT_TRUE(SendAcquireWhileHeld(loop(), c, name, no_expiry.get(), &stuck, [&] { return server().RequestHeld(); }))
        << "the acquire never reached the server: " << stuck.calls << " answers, "
        << dlock_status_str(stuck.s);
    dlock_client_close(c);
    c = nullptr;
    EXPECT_EQ(stuck.calls, 1);
    EXPECT_EQ(stuck.s, DLOCK_ECANCELLED);
  }  // the server takes the acquire now, and grants it: the closed client must give it back
  EXPECT_TRUE(loop().Drain(10000ms)) << "the close did not finish";
  EXPECT_EQ(stuck.calls, 1);
  EXPECT_TRUE(Inspect(observer.get(), name).free()) << "an orphan lock was left behind";
}

// The blocking calls from another thread while the loop's thread runs the loop (dlock wakes
// the loop itself: no locking of the caller's); on the loop's own thread, a wait is refused.
TEST_P(OnCallersLoop, BlockingCallsFromAnotherThreadWhileTheLoopRuns) {
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
  const std::string name = Name("from-another-thread");
  Options waits;
  waits.wait(-1);
  dlock_lock* refused = nullptr;
  EXPECT_EQ(dlock_acquire(c, name.c_str(), waits.get(), &refused), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("wait"), std::string::npos) << dlock_last_error();

  Client observer(url());
  std::atomic<int> step{0};  // 1: held (the loop's thread checks), 2: released
  std::atomic<uint64_t> token{0};
  dlock_status acquired = DLOCK_EINTERNAL, extended = DLOCK_EINTERNAL, released = DLOCK_EINTERNAL;
  std::thread caller([&] {
    dlock_lock* l = nullptr;
    acquired = dlock_acquire(c, name.c_str(), waits.get(), &l);
    if (acquired != DLOCK_OK) {
      step = 2;
      return;
    }
    token = dlock_lock_fencing_token(l);
    extended = dlock_extend(l, 20000);
    step = 1;
    while (step.load() == 1) std::this_thread::sleep_for(1ms);
    released = dlock_release(l);
    step = 3;
  });
  ASSERT_TRUE(loop().RunUntil([&] { return step.load() != 0; }, 30000ms));
  if (step.load() == 1) {
    EXPECT_EQ(Inspect(observer.get(), name).holders.size(), 1u);
    step = 2;
  }
  EXPECT_TRUE(loop().RunUntil([&] { return step.load() == 3 || acquired != DLOCK_OK; }, 30000ms));
  caller.join();
  EXPECT_EQ(acquired, DLOCK_OK);
  EXPECT_EQ(extended, DLOCK_OK);
  EXPECT_EQ(released, DLOCK_OK);
  EXPECT_GT(token.load(), 0u);
  EXPECT_TRUE(Inspect(observer.get(), name).free());
  dlock_client_close(c);
  EXPECT_TRUE(loop().Drain(10000ms));
}

// An observer on the caller's loop: its reports run there, inside the loop's calls; cancelled
// there, it leaves nothing on the loop.
TEST_P(OnCallersLoop, AnObserverReportsOnTheLoopAndLeavesNothingOnIt) {
  const std::string name = Name("observed");
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
  struct Told {
    int calls = 0;
    bool leads = false;
    uint64_t term = 0;
    std::thread::id thread;
    static void Fn(const char*, const dlock_info* leader, void* arg) {
      auto* t = static_cast<Told*>(arg);
      ++t->calls;
      t->leads = leader != nullptr;
      t->term = leader ? dlock_info_fencing_token(leader, 0) : 0;
      t->thread = std::this_thread::get_id();
    }
  } told;
  dlock_observer* ob = nullptr;
  ASSERT_EQ(dlock_observe(c, name.c_str(), Told::Fn, &told, &ob), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(told.calls, 0) << "reported inside dlock_observe";
  ASSERT_TRUE(loop().RunUntil([&] { return told.calls == 1; }, 10s)) << "no first report";
  EXPECT_FALSE(told.leads);
  EXPECT_EQ(told.thread, std::this_thread::get_id()) << "reported off the loop's thread";

  Client other(url());  // its own thread: the campaign does not need this loop
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(other.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  const uint64_t term = dlock_lock_fencing_token(l);
  EXPECT_TRUE(loop().RunUntil([&] { return told.leads && told.term == Shown(term); }, 10s)) << "the leader was not reported";
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(loop().RunUntil([&] { return !told.leads; }, 10s)) << "the resignation was not reported";

  dlock_observer_cancel(ob);
  const int at_cancel = told.calls;
  ASSERT_EQ(dlock_campaign(other.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  (void)loop().RunUntil([] { return false; }, 1200ms);  // more than two polls
  EXPECT_EQ(told.calls, at_cancel) << "a report after cancel";
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  dlock_client_close(c);
  EXPECT_TRUE(loop().Drain(10s)) << "the closed client left something on the loop";
}

// dlock_inspect_async and dlock_leader_async answer on the loop's thread, never inside the call;
// the _queued forms hand the same snapshot to the caller's thread through a queue.
TEST_P(OnCallersLoop, InspectAndLeaderAnswerOnTheLoopAndThroughAQueue) {
  const std::string name = Name("inspected");
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
  Client other(url());
  Options o;
  o.owner("the-leader").value("10.0.0.7:80");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(other.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t term = dlock_lock_fencing_token(l);
  struct Answer {
    int calls = 0;
    dlock_status status = DLOCK_EINTERNAL;
    std::string owner, value;
    uint64_t token = 0;
    uint32_t holders = 99;
    std::thread::id thread;
    static void Fn(dlock_status s, dlock_info* info, void* arg) {
      auto* a = static_cast<Answer*>(arg);
      ++a->calls;
      a->status = s;
      a->thread = std::this_thread::get_id();
      if (info != nullptr) {
        a->holders = dlock_info_holders(info);
        if (a->holders > 0) {
          a->owner = dlock_info_owner(info, 0);
          size_t len = 0;
          const void* v = dlock_info_value(info, 0, &len);
          a->value.assign(static_cast<const char*>(v), len);
          a->token = dlock_info_fencing_token(info, 0);
        }
        dlock_info_free(info);
      }
    }
  };
  Answer inspected, led, free_name, shared_leader;
  ASSERT_EQ(dlock_inspect_async(c, name.c_str(), Answer::Fn, &inspected), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_leader_async(c, name.c_str(), Answer::Fn, &led), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_leader_async(c, Name("nobody").c_str(), Answer::Fn, &free_name), DLOCK_OK);
  EXPECT_EQ(inspected.calls + led.calls + free_name.calls, 0) << "answered inside the call";
  ASSERT_TRUE(loop().RunUntil([&] { return inspected.calls && led.calls && free_name.calls; }, 10s));
  for (const Answer* a : {&inspected, &led}) {
    EXPECT_EQ(a->status, DLOCK_OK);
    EXPECT_EQ(a->holders, 1u);
    EXPECT_EQ(a->owner, "the-leader");
    EXPECT_EQ(a->value, "10.0.0.7:80");
    EXPECT_EQ(a->token, Shown(term));
    EXPECT_EQ(a->thread, std::this_thread::get_id()) << "answered off the loop's thread";
  }
  EXPECT_EQ(free_name.status, DLOCK_OK);
  EXPECT_EQ(free_name.holders, 0u) << "nobody leads a free name";
  if ((dlock_client_capabilities(c) & DLOCK_CAP_SHARED) != 0) {
    const std::string shared = Name("shared");
    Options s;
    s.shared();
    Hold reader(other.get(), shared, s.get());
    ASSERT_TRUE(reader.held()) << reader.error();
    ASSERT_EQ(dlock_leader_async(c, shared.c_str(), Answer::Fn, &shared_leader), DLOCK_OK);
    ASSERT_TRUE(loop().RunUntil([&] { return shared_leader.calls == 1; }, 10s));
    EXPECT_EQ(shared_leader.status, DLOCK_EINVAL) << "a shared name is no election";
  }
  EXPECT_EQ(dlock_inspect_async(c, name.c_str(), nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_inspect_async(c, "", Answer::Fn, &inspected), DLOCK_EINVAL);

  Queue q;
  ASSERT_EQ(dlock_inspect_queued(c, name.c_str(), q.get(), 41), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_leader_queued(c, name.c_str(), q.get(), 42), DLOCK_OK) << dlock_last_error();
  std::vector<uint64_t> tags;
  ASSERT_TRUE(loop().RunUntil(
      [&] {
        uint64_t tag = 0;
        dlock_status st = DLOCK_EINTERNAL;
        dlock_info* info = nullptr;
        while (dlock_queue_pop_leader(q.get(), &tag, &st, nullptr, &info) == DLOCK_QUEUE_DONE) {
          EXPECT_EQ(st, DLOCK_OK);
          EXPECT_NE(info, nullptr);
          if (info != nullptr) {
            EXPECT_EQ(dlock_info_fencing_token(info, 0), Shown(term));
            dlock_info_free(info);
          }
          tags.push_back(tag);
        }
        return tags.size() == 2;
      },
      10s));
  std::sort(tags.begin(), tags.end());  // two reads in flight: either may answer first (etcd)
  EXPECT_EQ(tags, (std::vector<uint64_t>{41, 42}));
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  dlock_client_close(c);
  EXPECT_TRUE(loop().Drain(10s)) << "the closed client left something on the loop";
}

// A waiter closed with its client on the loop's thread leaves the line (where the backend keeps
// one): the next release must not hand the lock to it.
TEST_P(OnCallersLoop, ClosingAClientLeavesTheLineItsWaiterWasIn) {
  const std::string name = Name("line");
  HeldElsewhere holder(url(), name);
  dlock_client* c = OpenClient();
  ASSERT_NE(c, nullptr);
  Options forever;
  forever.wait(-1);
  AcquireResult waiter;
  ASSERT_EQ(dlock_acquire_async(c, name.c_str(), forever.get(), &AcquireResult::Fn, &waiter), DLOCK_OK);
  BackendServer& srv = server();
  if (srv.InLine(name) >= 0) {
    ASSERT_TRUE(loop().RunUntil([&] { return srv.InLine(name) == 1; }, 20000ms)) << srv.InLine(name);
  } else {
    loop().RunUntil([] { return false; }, 200ms);  // its first try answered, it waits
  }
  EXPECT_EQ(waiter.calls, 0);
  dlock_client_close(c);
  EXPECT_TRUE(loop().Drain(10000ms));
  EXPECT_EQ(waiter.calls, 1);
  EXPECT_EQ(waiter.s, DLOCK_ECANCELLED);
  if (srv.InLine(name) >= 0) {
    EXPECT_EQ(srv.InLine(name), 0);
  }
  holder.Release();
  Client observer(url());
  EXPECT_TRUE(Inspect(observer.get(), name).free()) << "the lock went to a waiter that had closed";
}

std::vector<std::tuple<BackendFactory, Style>> CallersLoops() {
  std::vector<std::tuple<BackendFactory, Style>> out;
  for (const BackendFactory& f : AllBackends()) {
    for (Style s : {Style::kAsync, Style::kHooks}) out.emplace_back(f, s);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Conformance, OnCallersLoop, ::testing::ValuesIn(CallersLoops()), StyleTestName);

class EventLoop : public BackendTest {};

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
