// The async API on Redis: pipelining, callbacks that release and close, the evbase threading
// rules. (Acquire, extend, release, handoff, cancel and close in the _async style, on every
// backend, are in conformance/.)
#include <event2/event.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

TEST_F(RedisAsyncTest, ThousandAcquiresInFlightSharePipelinedConnections) {
  dlock_client* c = OpenOn(redis_.url(), loop_.base());
  ASSERT_NE(c, nullptr);
  struct State {
    std::vector<dlock_lock*> locks;
    int failures = 0;
  } st;
  constexpr int kLocks = 1000;
  for (int i = 0; i < kLocks; ++i) {
    std::string name = "many/" + std::to_string(i);
    ASSERT_EQ(dlock_acquire_async(c, name.c_str(), nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
      auto* st = static_cast<State*>(arg);
      if (s == DLOCK_OK) {
        st->locks.push_back(l);
      } else {
        st->failures++;
      }
    }, &st), DLOCK_OK);
  }
  ASSERT_TRUE(loop_.RunUntil([&] { return st.locks.size() + st.failures == kLocks; }, 30000ms));
  EXPECT_EQ(st.failures, 0);
  // All of it went over a few connections: pipelined, not one connection per request.
  std::string clients = redis_.Cli({"CLIENT", "LIST"});
  EXPECT_LE(std::count(clients.begin(), clients.end(), '\n') + 1, 4) << clients;
  for (dlock_lock* l : st.locks) EXPECT_EQ(dlock_release(l), DLOCK_OK);
  dlock_client_close(c);
  EXPECT_TRUE(loop_.Drain(10000ms));
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
    RedisServer* redis;
    dlock_lock* lock = nullptr;
    std::thread::id thread = {};
    int calls = 0;
  } ctx{&loop_, OpenOn(redis_.url(), loop_.base()), &redis_};
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
    auto* ctx = static_cast<Ctx*>(arg);
    ctx->lock = l;
    // Held: now it is deleted behind its back (a later turn of the loop, not this callback).
    ctx->loop->After(0ms, [ctx] { ctx->redis->Cli({"DEL", "dlock:{fragile}"}); });
  }, &ctx), DLOCK_OK);
  ASSERT_TRUE(loop_.Run(20000ms));
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
  std::atomic<bool> worker_done{false};
  std::thread worker([&] {
    Options opts;
    opts.wait(20000);
    dlock_lock* mine;
    EXPECT_EQ(dlock_acquire(c, "x", opts.get(), &mine), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(mine), DLOCK_OK);
    worker_done = true;
  });
  // Released once the worker waits: its first attempt refused, it is in line.
  EXPECT_TRUE(loop_.RunUntil([&] { return redis_.Cli({"ZCARD", "dlock:{x}:line"}) == "1"; }, 20000ms))
      << "the waiting acquire never took its place in line";
  dlock_release(held);
  EXPECT_TRUE(loop_.RunUntil([&] { return worker_done.load(); }, 30000ms));
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

TEST(AsyncOnOwnedThreadTest, CloseFromInsideACallback) {
  RedisServer redis;
  // A thread started and joined first: a sanitizer's runtime starts its own background thread
  // with the process's first one, and it must not count as the client's.
  std::thread([] {}).join();
  const int threads_before = ThreadCount();
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
  // The detached teardown finishes: the client's thread ends (ASan's leak check follows).
  EXPECT_TRUE(WaitFor([&] { return ThreadCount() <= threads_before; }, 10000ms))
      << "the client's thread outlived its close";
}

}  // namespace
}  // namespace dlock_test
