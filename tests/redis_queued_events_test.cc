// Client events through a completion queue (dlock_client_set_event_queue, DLOCK_QUEUE_EVENT,
// dlock_queue_pop_event, dlock_event_free), against a real redis-server:
//   - each step of a lock's life arrives once, in order, with what a log line needs (type, name,
//     attempts, elapsed, fencing token, status, detail), from blocking calls on the caller's
//     thread and from the _queued calls and heartbeats on the client's loop thread;
//   - one hook or queue per client: a second call of either setter is DLOCK_EINVAL;
//   - the older pops (dlock_queue_pop, dlock_queue_pop_leader) take EVENT entries too and drop
//     the event; events left in a queue when it is freed, and those made after, are dropped
//     without a leak (the suite also runs under ASan/LSan).
// Waits poll(2) the queue's fd with a deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "queue_util.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

// One entry popped with dlock_queue_pop_event; for an EVENT entry, the event's fields.
struct Popped {
  int kind = DLOCK_QUEUE_EMPTY;
  uint64_t tag = 0;
  dlock_status status = DLOCK_EINTERNAL;
  dlock_lock* lock = nullptr;
  std::string type, name, detail;
  uint32_t attempts = 0;
  int64_t elapsed_ms = -1;
  uint64_t token = 0;
  dlock_status event_status = DLOCK_EINTERNAL;
};

std::ostream& operator<<(std::ostream& os, const Popped& p) {
  os << "{kind " << p.kind << ", tag " << p.tag << ", " << dlock_status_str(p.status);
  if (p.kind == DLOCK_QUEUE_EVENT) {
    os << ", " << p.type << " '" << p.name << "' attempts " << p.attempts << " elapsed " << p.elapsed_ms
       << " token " << p.token << " " << dlock_status_str(p.event_status) << " \"" << p.detail << "\"";
  }
  return os << "}";
}

// Pops until the queue is empty (which re-arms its fd), reading and freeing each event.
void PopAllEvents(dlock_queue* q, std::vector<Popped>* out) {
  for (;;) {
    Popped p;
    dlock_info* leader = reinterpret_cast<dlock_info*>(uintptr_t{1});
    dlock_event* e = reinterpret_cast<dlock_event*>(uintptr_t{1});
    p.kind = dlock_queue_pop_event(q, &p.tag, &p.status, &p.lock, &leader, &e);
    EXPECT_EQ(leader, nullptr) << "no observer uses this queue";
    if (p.kind == DLOCK_QUEUE_EMPTY) {
      EXPECT_EQ(e, nullptr);
      return;
    }
    if (p.kind == DLOCK_QUEUE_EVENT) {
      EXPECT_NE(e, nullptr);
      EXPECT_EQ(p.status, DLOCK_OK);
      EXPECT_EQ(p.lock, nullptr);
      EXPECT_STREQ(dlock_last_error(), "");
      if (e == nullptr) continue;
      p.type = dlock_event_type_name(dlock_event_type_of(e));
      p.name = dlock_event_lock_name(e);
      p.detail = dlock_event_detail(e);
      p.attempts = dlock_event_attempts(e);
      p.elapsed_ms = dlock_event_elapsed_ms(e);
      p.token = dlock_event_fencing_token(e);
      p.event_status = dlock_event_status(e);
      dlock_event_free(e);
    } else {
      EXPECT_EQ(e, nullptr) << "only EVENT entries carry an event";
    }
    out->push_back(std::move(p));
  }
}

// Waits on the fd and pops until n entries came or `limit` passed.
std::vector<Popped> CollectEvents(dlock_queue* q, size_t n, std::chrono::milliseconds limit = 5000ms) {
  std::vector<Popped> got;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (got.size() < n) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left <= 0ms) break;
    if (Readable(dlock_queue_fd(q), left)) PopAllEvents(q, &got);
  }
  return got;
}

std::string Kinds(const std::vector<Popped>& got) {
  std::string s;
  for (const Popped& p : got) {
    if (!s.empty()) s += ' ';
    s += p.kind == DLOCK_QUEUE_EVENT ? p.type : p.kind == DLOCK_QUEUE_DONE ? "DONE" : std::to_string(p.kind);
  }
  return s;
}

void NoEventHook(const dlock_event*, void*) {}

class RedisQueuedEventsTest : public ::testing::Test {
 protected:
  std::string Key(const std::string& name) const { return "dlock:{" + name + "}"; }

  RedisServer redis_;
};

TEST_F(RedisQueuedEventsTest, OneHookOrQueuePerClientAndBadArgumentsChangeNothing) {
  Client client(redis_.url());
  Client hooked(redis_.url());
  Queue q;
  EXPECT_EQ(dlock_client_set_event_queue(nullptr, q.get(), 1), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("client"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_client_set_event_queue(client.get(), nullptr, 1), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("queue"), std::string::npos) << dlock_last_error();
  // Those changed nothing: the client still takes one.
  ASSERT_EQ(dlock_client_set_event_queue(client.get(), q.get(), 1), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_client_set_event_queue(client.get(), q.get(), 2), DLOCK_EINVAL) << "a second queue";
  EXPECT_NE(std::string(dlock_last_error()).find("one per client"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_client_set_event_hook(client.get(), NoEventHook, nullptr), DLOCK_EINVAL)
      << "a hook after a queue";
  ASSERT_EQ(dlock_client_set_event_hook(hooked.get(), NoEventHook, nullptr), DLOCK_OK);
  EXPECT_EQ(dlock_client_set_event_queue(hooked.get(), q.get(), 3), DLOCK_EINVAL) << "a queue after a hook";

  // Only the first setting took: events come with tag 1, and none of the hooked client's.
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(hooked.get(), "qev/one/hooked", nullptr, &l), DLOCK_OK);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(client.get(), "qev/one", nullptr, &l), DLOCK_OK);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  std::vector<Popped> got = CollectEvents(q.get(), 3);
  ASSERT_EQ(Kinds(got), "acquiring acquired released");
  for (const Popped& p : got) {
    EXPECT_EQ(p.tag, 1u) << p;
    EXPECT_EQ(p.name, "qev/one") << p;
  }
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "more events than steps";

  dlock_event_free(nullptr);  // NULL is ok
}

TEST_F(RedisQueuedEventsTest, EachStepArrivesInOrderWithItsFields) {
  Client client(redis_.url());
  Client other(redis_.url());
  Queue q;
  ASSERT_EQ(dlock_client_set_event_queue(client.get(), q.get(), 7), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(Readable(q.fd(), 0ms)) << "nothing happened yet";

  // A blocking cycle, on this thread.
  dlock_lock* a = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "qev/a", nullptr, &a), DLOCK_OK) << dlock_last_error();
  const uint64_t token_a = dlock_lock_fencing_token(a);
  ASSERT_EQ(dlock_release(a), DLOCK_OK);
  std::vector<Popped> got = CollectEvents(q.get(), 3);
  ASSERT_EQ(Kinds(got), "acquiring acquired released");
  for (const Popped& p : got) {
    EXPECT_EQ(p.tag, 7u) << p;
    EXPECT_EQ(p.name, "qev/a") << p;
    EXPECT_EQ(p.event_status, DLOCK_OK) << p;
    EXPECT_EQ(p.detail, "") << p;
    EXPECT_GE(p.elapsed_ms, 0) << p;
  }
  EXPECT_EQ(got[0].token, 0u) << "acquiring has no token yet";
  EXPECT_EQ(got[1].attempts, 1u);
  EXPECT_EQ(got[1].token, token_a);
  EXPECT_EQ(got[2].token, token_a);

  // A waiting acquire on the loop thread, woken by the holder's release: its events come
  // before its DONE entry, the acquired one with the attempts and token the lock has.
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), "qev/b", nullptr, &held), DLOCK_OK);
  Options waiting;
  waiting.wait(10000);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "qev/b", waiting.get(), q.get(), 100), DLOCK_OK);
  got = CollectEvents(q.get(), 1);
  ASSERT_EQ(Kinds(got), "acquiring");
  EXPECT_EQ(got[0].tag, 7u);
  EXPECT_FALSE(Readable(q.fd(), 300ms)) << "it waits (its first try found the lock held)";
  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  got = CollectEvents(q.get(), 2);
  ASSERT_EQ(Kinds(got), "acquired DONE");
  ASSERT_EQ(got[1].tag, 100u);
  ASSERT_EQ(got[1].status, DLOCK_OK);
  dlock_lock* b = got[1].lock;
  ASSERT_NE(b, nullptr);
  EXPECT_GE(got[0].attempts, 2u) << "one try while held, one after the release";
  EXPECT_EQ(got[0].attempts, dlock_lock_attempts(b));
  EXPECT_EQ(got[0].token, dlock_lock_fencing_token(b));
  EXPECT_GT(got[0].token, token_a);
  const uint64_t token_b = dlock_lock_fencing_token(b);
  ASSERT_EQ(dlock_release_queued(b, q.get(), 101), DLOCK_OK);
  got = CollectEvents(q.get(), 2);
  ASSERT_EQ(Kinds(got), "released DONE");
  EXPECT_EQ(got[0].token, token_b);
  EXPECT_EQ(got[0].event_status, DLOCK_OK);
  EXPECT_EQ(got[1].tag, 101u);

  // Not acquired: one try while another holds it.
  ASSERT_EQ(dlock_acquire(other.get(), "qev/c", nullptr, &held), DLOCK_OK);
  Options one_try;
  one_try.wait(0);
  dlock_lock* c = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "qev/c", one_try.get(), &c), DLOCK_NOT_ACQUIRED);
  got = CollectEvents(q.get(), 2);
  ASSERT_EQ(Kinds(got), "acquiring not_acquired");
  EXPECT_EQ(got[1].name, "qev/c");
  EXPECT_EQ(got[1].attempts, 1u);
  EXPECT_EQ(got[1].token, 0u);
  EXPECT_EQ(got[1].event_status, DLOCK_NOT_ACQUIRED);
  ASSERT_EQ(dlock_release(held), DLOCK_OK);

  // Lost (the heartbeat finds the key gone), then the release says NOT_HELD.
  Options beating;
  beating.lease(3000).heartbeat(100);
  dlock_lock* d = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "qev/d", beating.get(), &d), DLOCK_OK);
  const uint64_t token_d = dlock_lock_fencing_token(d);
  got = CollectEvents(q.get(), 2);
  ASSERT_EQ(Kinds(got), "acquiring acquired");
  redis_.Cli({"DEL", Key("qev/d")});
  got = CollectEvents(q.get(), 1);
  ASSERT_EQ(Kinds(got), "lost");
  EXPECT_EQ(got[0].token, token_d);
  EXPECT_EQ(got[0].event_status, DLOCK_NOT_HELD);
  ASSERT_NE(dlock_lock_lost_cause(d), nullptr);
  EXPECT_EQ(got[0].detail, dlock_lock_lost_cause(d)) << "the detail is the loss cause (\"CAUSE: details\")";
  EXPECT_EQ(dlock_release(d), DLOCK_NOT_HELD);
  got = CollectEvents(q.get(), 1);
  ASSERT_EQ(Kinds(got), "released");
  EXPECT_EQ(got[0].event_status, DLOCK_NOT_HELD);
  EXPECT_NE(got[0].detail, "");
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "more events than steps";
}

TEST_F(RedisQueuedEventsTest, APoppedEventIsTheCallersAfterItsClientIsClosed) {
  dlock_client* client = nullptr;
  ASSERT_EQ(dlock_client_open(redis_.url().c_str(), &client), DLOCK_OK);
  Queue q;
  ASSERT_EQ(dlock_client_set_event_queue(client, q.get(), 3), DLOCK_OK);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client, "qev/kept", nullptr, &l), DLOCK_OK);
  const uint64_t token = dlock_lock_fencing_token(l);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  dlock_event* acquiring = nullptr;
  dlock_event* acquired = nullptr;
  ASSERT_EQ(dlock_queue_pop_event(q.get(), nullptr, nullptr, nullptr, nullptr, &acquiring),
            DLOCK_QUEUE_EVENT);
  ASSERT_EQ(dlock_queue_pop_event(q.get(), nullptr, nullptr, nullptr, nullptr, &acquired),
            DLOCK_QUEUE_EVENT);
  dlock_client_close(client);  // releases l: a released event, left in the queue
  // Read on another thread, after the client is gone.
  std::thread reader([&] {
    EXPECT_EQ(dlock_event_type_of(acquiring), DLOCK_EVENT_ACQUIRING);
    EXPECT_EQ(dlock_event_type_of(acquired), DLOCK_EVENT_ACQUIRED);
    EXPECT_STREQ(dlock_event_lock_name(acquired), "qev/kept");
    EXPECT_EQ(dlock_event_fencing_token(acquired), token);
    dlock_event_free(acquiring);
    dlock_event_free(acquired);
  });
  reader.join();
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD) << "closing the client released it";
  // The close's release, and the handle's release after it, left in the queue: freed with it.
}

TEST_F(RedisQueuedEventsTest, OlderPopsTakeEventEntriesAndDropTheEvent) {
  Client client(redis_.url());
  Queue q;
  ASSERT_EQ(dlock_client_set_event_queue(client.get(), q.get(), 9), DLOCK_OK);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "qev/old", nullptr, &l), DLOCK_OK);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  // Three events are waiting (the blocking calls made them before returning).
  uint64_t tag = 0;
  dlock_status status = DLOCK_EINTERNAL;
  dlock_lock* lock = reinterpret_cast<dlock_lock*>(uintptr_t{1});
  EXPECT_EQ(dlock_queue_pop(q.get(), &tag, &status, &lock), DLOCK_QUEUE_EVENT);
  EXPECT_EQ(tag, 9u);
  EXPECT_EQ(status, DLOCK_OK);
  EXPECT_EQ(lock, nullptr);
  dlock_info* leader = reinterpret_cast<dlock_info*>(uintptr_t{1});
  lock = reinterpret_cast<dlock_lock*>(uintptr_t{1});
  EXPECT_EQ(dlock_queue_pop_leader(q.get(), &tag, &status, &lock, &leader), DLOCK_QUEUE_EVENT);
  EXPECT_EQ(leader, nullptr);
  EXPECT_EQ(lock, nullptr);
  EXPECT_EQ(dlock_queue_pop_event(q.get(), &tag, &status, nullptr, nullptr, nullptr), DLOCK_QUEUE_EVENT)
      << "event NULL: dropped";
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);
  EXPECT_FALSE(Readable(q.fd(), 0ms)) << "the empty pop re-armed the fd";
  dlock_event* e = reinterpret_cast<dlock_event*>(uintptr_t{1});
  EXPECT_EQ(dlock_queue_pop_event(q.get(), nullptr, nullptr, nullptr, nullptr, &e), DLOCK_QUEUE_EMPTY);
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(dlock_queue_pop_event(nullptr, nullptr, nullptr, nullptr, nullptr, &e), -1);
  EXPECT_EQ(e, nullptr);

  // The plain pop still hands over what else the queue carries, between events.
  ASSERT_EQ(dlock_acquire_queued(client.get(), "qev/old", nullptr, q.get(), 50), DLOCK_OK);
  std::vector<int> kinds;
  dlock_lock* won = nullptr;
  const auto until = std::chrono::steady_clock::now() + 5000ms;
  while (won == nullptr && std::chrono::steady_clock::now() < until) {
    if (!Readable(q.fd(), 100ms)) continue;
    int kind;
    while ((kind = dlock_queue_pop(q.get(), &tag, &status, &lock)) > 0) {
      kinds.push_back(kind);
      if (kind == DLOCK_QUEUE_DONE) {
        EXPECT_EQ(tag, 50u);
        won = lock;
      } else {
        EXPECT_EQ(lock, nullptr);
      }
    }
  }
  ASSERT_NE(won, nullptr);
  EXPECT_EQ(kinds, (std::vector<int>{DLOCK_QUEUE_EVENT, DLOCK_QUEUE_EVENT, DLOCK_QUEUE_DONE}));
  EXPECT_EQ(dlock_release(won), DLOCK_OK);
}

TEST_F(RedisQueuedEventsTest, EventsLeftInAFreedQueueAndLaterOnesAreDropped) {
  dlock_client* client = nullptr;
  ASSERT_EQ(dlock_client_open(redis_.url().c_str(), &client), DLOCK_OK);
  dlock_queue* q = nullptr;
  ASSERT_EQ(dlock_queue_new(&q), DLOCK_OK);
  ASSERT_EQ(dlock_client_set_event_queue(client, q, 1), DLOCK_OK);
  for (int i = 0; i < 5; ++i) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client, "qev/freed", nullptr, &l), DLOCK_OK);
    ASSERT_EQ(dlock_release(l), DLOCK_OK);
  }
  ASSERT_TRUE(Readable(dlock_queue_fd(q), 5000ms));
  dlock_queue_free(q);  // fifteen events never popped: freed with it (LSan would say otherwise)
  // The client keeps what it needs: its events from now on are dropped, not written anywhere freed.
  for (int i = 0; i < 5; ++i) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client, "qev/freed", nullptr, &l), DLOCK_OK);
    ASSERT_EQ(dlock_release(l), DLOCK_OK);
  }
  // Heartbeats and losses on the loop thread too.
  Options beating;
  beating.lease(2000).heartbeat(50);
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(client, "qev/freed/beating", beating.get(), &held), DLOCK_OK);
  std::this_thread::sleep_for(200ms);
  redis_.Cli({"DEL", Key("qev/freed/beating")});
  const auto until = std::chrono::steady_clock::now() + 5000ms;
  while (dlock_lock_is_valid(held) == 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(dlock_lock_is_valid(held), 0) << "the loss was not found";
  EXPECT_EQ(dlock_release(held), DLOCK_NOT_HELD);
  dlock_client_close(client);
}

}  // namespace
}  // namespace dlock_test
