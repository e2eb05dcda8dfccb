// The async API on the caller's event_base against a real dynalite: curl transfers, timers and
// heartbeats all on the caller's loop, with no thread of ours.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ddb_test_util.h"
#include "event_loop_util.h"

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;

class DynamoAsyncTest : public DynamoTest {
 public:
  dlock_client* OpenOnLoop() {
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open_evbase(url().c_str(), loop_.base(), &c), DLOCK_OK) << dlock_last_error();
    return c;
  }
  Loop loop_;
};

TEST_F(DynamoAsyncTest, HundredLocksOnOneLoopWithNoThreadOfOurs) {
  const int threads_before = ThreadCount();
  dlock_client* c = OpenOnLoop();
  ASSERT_NE(c, nullptr);
  struct State {
    Loop* loop = nullptr;
    std::vector<dlock_lock*> locks;
    int acquired = 0, released = 0, failures = 0, threads_seen = 0;
    std::thread::id loop_thread = std::this_thread::get_id();
    bool all_on_loop_thread = true;
  } st;
  st.loop = &loop_;
  const int kLocks = 100;
  for (int i = 0; i < kLocks; ++i) {
    std::string name = "many/" + std::to_string(i);
    ASSERT_EQ(dlock_acquire_async(c, name.c_str(), nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
      auto* st = static_cast<State*>(arg);
      st->all_on_loop_thread &= std::this_thread::get_id() == st->loop_thread;
      if (s != DLOCK_OK) {
        ADD_FAILURE() << dlock_status_str(s) << ": " << dlock_last_error();
        st->failures++;
        if (st->acquired + st->failures == 100) st->loop->Exit();
        return;
      }
      st->locks.push_back(l);
      if (++st->acquired < 100) return;
      st->threads_seen = ThreadCount();
      for (dlock_lock* held : st->locks) {
        EXPECT_EQ(dlock_release_async(held, [](dlock_status s, void* arg) {
          auto* st = static_cast<State*>(arg);
          EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
          if (++st->released == 100) st->loop->Exit();
        }, st), DLOCK_OK);
      }
    }, &st), DLOCK_OK);
  }
  ASSERT_TRUE(loop_.Run(30000ms)) << "acquired " << st.acquired << ", released " << st.released;
  EXPECT_EQ(st.failures, 0);
  EXPECT_EQ(st.released, kLocks);
  EXPECT_TRUE(st.all_on_loop_thread);
  EXPECT_EQ(st.threads_seen, threads_before);
  EXPECT_EQ(ThreadCount(), threads_before);
  EXPECT_EQ(S(Item("many/0"), "owner"), "") << "released: the item stays, without an owner";
  EXPECT_GT(N(Item("many/0"), "fence"), 0u);
  dlock_client_close(c);
}

TEST_F(DynamoAsyncTest, TwoClientsOnOneBaseHandOff) {
  dlock_client* a = OpenOnLoop();
  dlock_client* b = OpenOnLoop();
  struct Ctx {
    Loop* loop;
    dlock_lock* first = nullptr;
    uint64_t first_token = 0, second_token = 0;
    dlock_status second = DLOCK_EINTERNAL;
  } ctx{&loop_};
  ASSERT_EQ(dlock_acquire_async(a, "baton", nullptr, [](dlock_status s, dlock_lock* l, void* arg) {
    ASSERT_EQ(s, DLOCK_OK) << dlock_last_error();
    auto* ctx = static_cast<Ctx*>(arg);
    ctx->first = l;
    ctx->first_token = dlock_lock_fencing_token(l);
  }, &ctx), DLOCK_OK);
  Options waiting;
  waiting.wait(10000).retry(20, 100);  // no pub/sub on DynamoDB: a short retry is the wake-up
  loop_.After(200ms, [&] {
    ASSERT_EQ(dlock_acquire_async(b, "baton", waiting.get(), [](dlock_status s, dlock_lock* l, void* arg) {
      auto* ctx = static_cast<Ctx*>(arg);
      ctx->second = s;
      if (s == DLOCK_OK) {
        ctx->second_token = dlock_lock_fencing_token(l);
        dlock_release(l);  // blocking release on the loop thread works too
      }
      ctx->loop->Exit();
    }, &ctx), DLOCK_OK);
  });
  loop_.After(500ms, [&] { ASSERT_EQ(dlock_release_async(ctx.first, nullptr, nullptr), DLOCK_OK); });
  ASSERT_TRUE(loop_.Run(15000ms));
  EXPECT_EQ(ctx.second, DLOCK_OK);
  EXPECT_GT(ctx.second_token, ctx.first_token);
  dlock_client_close(a);
  dlock_client_close(b);
}

TEST_F(DynamoAsyncTest, CancelWhileWaitingAndLostCallbackOnTheLoopThread) {
  dlock_client* c = OpenOnLoop();
  Client holder(url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK) << dlock_last_error();
  struct Ctx {
    Loop* loop;
    dlock_status waited = DLOCK_OK;
    dlock_lock* mine = nullptr;
    int lost_calls = 0;
    std::thread::id lost_thread = {};
  } ctx{&loop_};
  Options forever;
  forever.wait(-1);
  ASSERT_EQ(dlock_acquire_async(c, "busy", forever.get(), [](dlock_status s, dlock_lock*, void* arg) {
    static_cast<Ctx*>(arg)->waited = s;
  }, &ctx), DLOCK_OK);
  loop_.After(300ms, [&] { EXPECT_EQ(dlock_acquire_cancel(c, &ctx), DLOCK_OK); });
  // A lock of our own, taken away behind our back: on_lost runs on this (the loop's) thread.
  Options fragile;
  fragile.lease(3000).heartbeat(200).on_lost([](const char*, uint64_t, void* arg) {
    auto* ctx = static_cast<Ctx*>(arg);
    ctx->lost_calls++;
    ctx->lost_thread = std::this_thread::get_id();
    EXPECT_EQ(dlock_release(ctx->mine), DLOCK_NOT_HELD);
    ctx->loop->Exit();
  }, &ctx);
  ASSERT_EQ(dlock_acquire_async(c, "fragile", fragile.get(), [](dlock_status s, dlock_lock* l, void* arg) {
    ASSERT_EQ(s, DLOCK_OK) << dlock_last_error();
    static_cast<Ctx*>(arg)->mine = l;
  }, &ctx), DLOCK_OK);
  loop_.After(500ms, [&] {
    EXPECT_EQ(ddb_.Call("DeleteItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:fragile"}}})").status, 200);
  });
  ASSERT_TRUE(loop_.Run(10000ms));
  EXPECT_EQ(ctx.waited, DLOCK_ECANCELLED);
  EXPECT_EQ(ctx.lost_calls, 1);
  EXPECT_EQ(ctx.lost_thread, std::this_thread::get_id());
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
  dlock_client_close(c);
}

TEST_F(DynamoAsyncTest, CloseGivesBackAnAcquireThatWasInFlight) {
  dlock_client* c = OpenOnLoop();
  AcquireResult stuck;
  Options no_expiry;
  no_expiry.lease(0);  // left behind, it would stay forever
  std::string name = CatchAcquireInFlight(loop_, c, no_expiry.get(), &stuck, [&](const std::string& n) {
    return !S(Item(n), "owner").empty();
  });
  ASSERT_FALSE(name.empty()) << "never caught an acquire in flight";
  dlock_client_close(c);
  EXPECT_EQ(stuck.s, DLOCK_ECANCELLED);
  event_base_dispatch(loop_.base());  // the close finishes on the loop
  EXPECT_EQ(S(Item(name), "owner"), "") << "an orphan lock was left behind";
  EXPECT_GT(N(Item(name), "fence"), 0u);
}

}  // namespace
}  // namespace dlock_test
