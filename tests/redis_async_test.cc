// The async API on the caller's event_base (and on an owned-thread client), against a real
// redis-server: no threads of ours, pub/sub handoff, cancel, callbacks that release and close.
#include <dirent.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "event_loop_util.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

dlock_client* OpenOn(const std::string& url, event_base* base) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open_evbase(url.c_str(), base, &c), DLOCK_OK) << dlock_last_error();
  return c;
}

class RedisAsyncTest : public ::testing::Test {
 public:  // reached from the C callbacks
  RedisServer redis_;
  Loop loop_;
};

TEST_F(RedisAsyncTest, ThousandLocksOnOneLoopWithNoThreadOfOurs) {
  const int threads_before = ThreadCount();
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  ASSERT_NE(c, nullptr);
  struct State {
    RedisAsyncTest* test = nullptr;
    Loop* loop = nullptr;
    std::vector<dlock_lock*> locks;
    int acquired = 0, released = 0, failures = 0;
    int threads_seen = 0;
    std::thread::id loop_thread = std::this_thread::get_id();
    bool all_on_loop_thread = true;
  } st;
  st.test = this;
  st.loop = &loop_;
  const int kLocks = 1000;
  for (int i = 0; i < kLocks; ++i) {
    std::string name = "many/" + std::to_string(i);
    ASSERT_EQ(dlock_acquire_async(c, name.c_str(), nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
      auto* st = static_cast<State*>(arg);
      st->all_on_loop_thread &= std::this_thread::get_id() == st->loop_thread;
      if (s != DLOCK_OK) {
        st->failures++;
        return;
      }
      st->locks.push_back(l);
      if (++st->acquired < 1000) return;
      st->threads_seen = ThreadCount();
      EXPECT_EQ(st->test->redis_.Cli({"EXISTS", "dlock:{many/999}"}), "1");
      for (dlock_lock* held : st->locks) {
        EXPECT_EQ(dlock_release_async(held, [](dlock_status s, void* arg) {
          auto* st = static_cast<State*>(arg);
          if (s == DLOCK_OK && ++st->released == 1000) st->loop->Exit();
        }, st), DLOCK_OK);
      }
    }, &st), DLOCK_OK);
  }
  ASSERT_TRUE(loop_.Run()) << "acquired " << st.acquired << ", released " << st.released;
  EXPECT_EQ(st.failures, 0);
  EXPECT_EQ(st.acquired, kLocks);
  EXPECT_EQ(st.released, kLocks);
  EXPECT_TRUE(st.all_on_loop_thread);
  EXPECT_EQ(st.threads_seen, threads_before);
  EXPECT_EQ(ThreadCount(), threads_before);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{many/0}"}), "0");
  // All of it went over a few connections: pipelined, not one connection per request.
  std::string clients = redis_.Cli({"CLIENT", "LIST"});
  EXPECT_LE(std::count(clients.begin(), clients.end(), '\n') + 1, 4) << clients;
  dlock_client_close(c);
}

struct Handoff {
  Loop* loop;
  dlock_lock* first = nullptr;
  Clock::time_point released_at = {};
  Clock::duration handoff{};
  uint32_t attempts = 0;
  dlock_status second_status = DLOCK_EINTERNAL;
};

TEST_F(RedisAsyncTest, TwoClientsOnOneBaseHandOffThroughPubSub) {
  dlock_client* a = OpenOn(redis_.url(), loop_.base());
  dlock_client* b = OpenOn(redis_.url(), loop_.base());
  Handoff h{&loop_};
  ASSERT_EQ(dlock_acquire_async(a, "baton", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    auto* h = static_cast<Handoff*>(arg);
    ASSERT_EQ(s, DLOCK_OK);
    h->first = l;
  }, &h), DLOCK_OK);
  Options waiting;
  waiting.wait(20000).retry(5000, 10000);  // only the release message can make it quick
  loop_.After(100ms, [&] {
    ASSERT_EQ(dlock_acquire_async(b, "baton", waiting.get(), [](dlock_status s, dlock_lock* l, void* arg) {
      auto* h = static_cast<Handoff*>(arg);
      h->second_status = s;
      h->handoff = Clock::now() - h->released_at;
      h->attempts = dlock_lock_attempts(l);
      dlock_release(l);  // a blocking release works on the loop's thread too
      h->loop->Exit();
    }, &h), DLOCK_OK);
  });
  loop_.After(400ms, [&] {
    h.released_at = Clock::now();
    ASSERT_EQ(dlock_release_async(h.first, nullptr, nullptr), DLOCK_OK);
  });
  ASSERT_TRUE(loop_.Run());
  EXPECT_EQ(h.second_status, DLOCK_OK);
  EXPECT_LT(h.handoff, 1000ms);
  EXPECT_LE(h.attempts, 4u);
  dlock_client_close(a);
  dlock_client_close(b);
}

TEST_F(RedisAsyncTest, CancelWhileWaiting) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  Client holder(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK);
  struct Ctx {
    Loop* loop;
    dlock_status status = DLOCK_OK;
    int calls = 0;
    std::string error = "";
  } ctx{&loop_};
  Options forever;
  forever.wait(-1);
  ASSERT_EQ(dlock_acquire_async(c, "busy", forever.get(), [](dlock_status s, dlock_lock* l, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    ctx->status = s;
    ctx->calls++;
    ctx->error = dlock_last_error();
    EXPECT_EQ(l, nullptr);
  }, &ctx), DLOCK_OK);
  loop_.After(200ms, [&] { EXPECT_EQ(dlock_acquire_cancel(c, &ctx), DLOCK_OK); });
  loop_.After(500ms, [&] { loop_.Exit(); });
  ASSERT_TRUE(loop_.Run());
  EXPECT_EQ(ctx.status, DLOCK_ECANCELLED);
  EXPECT_EQ(ctx.calls, 1);
  EXPECT_NE(ctx.error.find("cancelled"), std::string::npos) << ctx.error;
  EXPECT_EQ(dlock_acquire_cancel(c, &ctx), DLOCK_EINVAL);  // nothing pending any more
  EXPECT_EQ(dlock_release(held), DLOCK_OK);  // the holder was never disturbed
  dlock_client_close(c);
}

TEST_F(RedisAsyncTest, CloseCancelsPendingAcquiresAndReleasesHeldLocks) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  Client holder(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "taken", nullptr, &held), DLOCK_OK);
  struct Ctx {
    dlock_status waiting = DLOCK_OK;
    dlock_lock* mine = nullptr;
  } ctx;
  Options forever;
  forever.wait(-1);
  ASSERT_EQ(dlock_acquire_async(c, "taken", forever.get(), [](dlock_status s, dlock_lock*, void* arg) {
    static_cast<Ctx*>(arg)->waiting = s;
  }, &ctx), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_async(c, "mine", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    EXPECT_EQ(s, DLOCK_OK);
    static_cast<Ctx*>(arg)->mine = l;
  }, &ctx), DLOCK_OK);
  loop_.After(300ms, [&] { loop_.Exit(); });
  ASSERT_TRUE(loop_.Run());
  ASSERT_NE(ctx.mine, nullptr);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{mine}"}), "1");
  dlock_client_close(c);
  EXPECT_EQ(ctx.waiting, DLOCK_ECANCELLED);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{mine}"}), "0");
  EXPECT_EQ(dlock_release(ctx.mine), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
}

TEST_F(RedisAsyncTest, ReleaseAndCloseFromInsideCallbacks) {
  struct Ctx {
    Loop* loop;
    dlock_client* client;
    bool closed = false;
  } ctx{&loop_, OpenOn(redis_.url(), loop_.base())};
  ASSERT_EQ(dlock_acquire_async(ctx.client, "inside", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    ASSERT_EQ(s, DLOCK_OK);
    EXPECT_EQ(dlock_release_async(l, [](dlock_status s, void* arg) {
      auto* ctx = static_cast<Ctx*>(arg);
      EXPECT_EQ(s, DLOCK_OK);
      dlock_client_close(ctx->client);  // from inside the client's own callback
      ctx->closed = true;
      ctx->loop->After(50ms, [ctx] { ctx->loop->Exit(); });
    }, arg), DLOCK_OK);
  }, &ctx), DLOCK_OK);
  ASSERT_TRUE(loop_.Run());
  EXPECT_TRUE(ctx.closed);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{inside}"}), "0");
}

TEST_F(RedisAsyncTest, LostCallbackRunsOnTheLoopThreadAndMayClose) {
  struct Ctx {
    Loop* loop;
    dlock_client* client;
    dlock_lock* lock = nullptr;
    std::thread::id thread = {};
    int calls = 0;
  } ctx{&loop_, OpenOn(redis_.url(), loop_.base())};
  Options opts;
  opts.lease(2000).heartbeat(100).on_lost([](const char* name, uint64_t, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    EXPECT_STREQ(name, "fragile");
    ctx->thread = std::this_thread::get_id();
    ctx->calls++;
    EXPECT_EQ(dlock_lock_is_valid(ctx->lock), 0);
    EXPECT_EQ(dlock_release(ctx->lock), DLOCK_NOT_HELD);
    dlock_client_close(ctx->client);
    ctx->loop->After(50ms, [ctx] { ctx->loop->Exit(); });
  }, &ctx);
  ASSERT_EQ(dlock_acquire_async(ctx.client, "fragile", opts.get(), [](dlock_status s, dlock_lock* l, void* arg) {
    ASSERT_EQ(s, DLOCK_OK);
    static_cast<Ctx*>(arg)->lock = l;
  }, &ctx), DLOCK_OK);
  loop_.After(200ms, [&] { redis_.Cli({"DEL", "dlock:{fragile}"}); });
  ASSERT_TRUE(loop_.Run());
  EXPECT_EQ(ctx.calls, 1);
  EXPECT_EQ(ctx.thread, std::this_thread::get_id());
}

TEST_F(RedisAsyncTest, WaitingCallsAreRefusedOnTheLoopThreadAndWorkFromOthers) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  dlock_lock* l = nullptr;
  Options waits;
  waits.wait(1000);
  EXPECT_EQ(dlock_acquire(c, "x", waits.get(), &l), DLOCK_EINVAL);  // would wait for this loop
  EXPECT_NE(std::string(dlock_last_error()).find("dlock_acquire_async"), std::string::npos);
  ASSERT_EQ(dlock_acquire(c, "x", nullptr, &l), DLOCK_OK);  // one try needs no loop
  EXPECT_EQ(dlock_extend(l, 5000), DLOCK_EINVAL);            // would wait for this loop
  EXPECT_NE(std::string(dlock_last_error()).find("dlock_extend_async"), std::string::npos);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  // From another thread, while this one runs the loop, blocking calls work (waiting included).
  Client holder(redis_.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "x", nullptr, &held), DLOCK_OK);
  std::thread worker([&] {
    Options opts;
    opts.wait(5000);
    dlock_lock* mine;
    EXPECT_EQ(dlock_acquire(c, "x", opts.get(), &mine), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(mine), DLOCK_OK);
    loop_.Exit();  // event_base_loopbreak is thread-safe with evthread
  });
  loop_.After(300ms, [&] { dlock_release(held); });
  ASSERT_TRUE(loop_.Run());
  worker.join();
  dlock_client_close(c);
}

TEST_F(RedisAsyncTest, ArgumentErrorsAreReturnedAndDoneIsNotCalled) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  auto never = [](dlock_status, dlock_lock*, void*) { ADD_FAILURE() << "done called"; };
  EXPECT_EQ(dlock_acquire_async(nullptr, "x", nullptr, never, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_async(c, "", nullptr, never, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_async(c, "x", nullptr, nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_release_async(nullptr, nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_extend_async(nullptr, 100, nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_cancel(nullptr, nullptr), DLOCK_EINVAL);
  dlock_client* d = nullptr;
  EXPECT_EQ(dlock_client_open_evbase(redis_.url().c_str(), nullptr, &d), DLOCK_EINVAL);
  EXPECT_EQ(dlock_client_open_evbase("redis://nope:1:2", loop_.base(), &d), DLOCK_EINVAL);
  loop_.After(100ms, [&] { loop_.Exit(); });
  loop_.Run();
  dlock_client_close(c);
}

TEST_F(RedisAsyncTest, ExtendAsyncAndNotHeld) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  struct Ctx {
    Loop* loop;
    RedisServer* redis;
    dlock_lock* lock = nullptr;
    std::vector<dlock_status> results = {};
  } ctx{&loop_, &redis_};
  Options opts;
  opts.lease(1000).heartbeat(0);
  ASSERT_EQ(dlock_acquire_async(c, "ext", opts.get(), [](dlock_status s, dlock_lock* l, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    ASSERT_EQ(s, DLOCK_OK);
    ctx->lock = l;
    EXPECT_EQ(dlock_extend_async(l, 60000, [](dlock_status s, void* arg) {
      auto* ctx = static_cast<Ctx*>(arg);
      ctx->results.push_back(s);
      EXPECT_GT(std::stoi(ctx->redis->Cli({"PTTL", "dlock:{ext}"})), 50000);
      ctx->redis->Cli({"DEL", "dlock:{ext}"});
      EXPECT_EQ(dlock_extend_async(ctx->lock, 60000, [](dlock_status s, void* arg) {
        auto* ctx = static_cast<Ctx*>(arg);
        ctx->results.push_back(s);
        EXPECT_EQ(dlock_release_async(ctx->lock, [](dlock_status s, void* arg) {
          auto* ctx = static_cast<Ctx*>(arg);
          ctx->results.push_back(s);
          ctx->loop->Exit();
        }, arg), DLOCK_OK);
      }, arg), DLOCK_OK);
    }, arg), DLOCK_OK);
  }, &ctx), DLOCK_OK);
  ASSERT_TRUE(loop_.Run());
  ASSERT_EQ(ctx.results.size(), 3u);
  EXPECT_EQ(ctx.results[0], DLOCK_OK);
  EXPECT_EQ(ctx.results[1], DLOCK_NOT_HELD);
  EXPECT_EQ(ctx.results[2], DLOCK_NOT_HELD);
  dlock_client_close(c);
}

TEST(AsyncOnOwnedThreadTest, CallbacksRunOnTheClientsThread) {
  RedisServer redis;
  Client client(redis.url());
  struct Ctx {
    std::promise<std::thread::id> where;
    dlock_lock* lock = nullptr;
  } ctx;
  ASSERT_EQ(dlock_acquire_async(client.get(), "owned", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    EXPECT_EQ(s, DLOCK_OK);
    ctx->lock = l;
    ctx->where.set_value(std::this_thread::get_id());
  }, &ctx), DLOCK_OK);
  auto future = ctx.where.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  EXPECT_NE(future.get(), std::this_thread::get_id());
  std::promise<dlock_status> released;
  ASSERT_EQ(dlock_release_async(ctx.lock, [](dlock_status s, void* arg) {
    static_cast<std::promise<dlock_status>*>(arg)->set_value(s);
  }, &released), DLOCK_OK);
  EXPECT_EQ(released.get_future().get(), DLOCK_OK);
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{owned}"}), "0");
}

TEST(AsyncOnOwnedThreadTest, CloseFromInsideACallback) {
  RedisServer redis;
  dlock_client* c;
  ASSERT_EQ(dlock_client_open(redis.url().c_str(), &c), DLOCK_OK);
  struct Ctx {
    dlock_client* client;
    std::promise<void> closed = {};
  } ctx{c};
  ASSERT_EQ(dlock_acquire_async(c, "owned-close", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    EXPECT_EQ(s, DLOCK_OK);
    dlock_client_close(ctx->client);  // releases l's lock on the server; the handle stays ours
    EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
    ctx->closed.set_value();
  }, &ctx), DLOCK_OK);
  ctx.closed.get_future().wait();
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{owned-close}"}), "0");
  std::this_thread::sleep_for(100ms);  // the detached teardown finishes
}

}  // namespace
}  // namespace dlock_test
