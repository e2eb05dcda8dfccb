// Completion queues (dlock_queue) on owned-thread clients, against a real redis-server (acquire,
// extend, release, NOT_ACQUIRED and LOST entries in the _queued style, on every backend, are in
// conformance/):
//   - the fd protocol: readable when an entry waits, re-armed by the pop that finds it empty;
//     many operations in flight from several threads and clients on one queue, each tag once;
//   - ECANCELLED entries, and a LOST queue outliving its handle;
//   - what freeing the queue or closing the client does to operations still in flight (locks
//     come back, entries still arrive, nothing leaks: the suite also runs under ASan/LSan);
//   - argument errors (nothing queued), pops with NULL out pointers;
//   - the point of the feature: a consumer that does not pop never holds up heartbeats.
// Waits poll(2) the queue's fd with a deadline; nothing sleeps blindly except the test that
// shows a consumer which does not pop for a while.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "queue_util.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Who holds it, as a user checks: another client's acquire (one try, or waiting up to wait_ms;
// a wait ends early when the holder releases), released again at once when it succeeds.
dlock_status TryAcquire(const Client& other, const char* name, int64_t wait_ms = 0) {
  Options opts;
  opts.wait(wait_ms);
  dlock_lock* l = nullptr;
  dlock_status s = dlock_acquire(other.get(), name, opts.get(), &l);
  if (s == DLOCK_OK) {
    EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  }
  return s;
}

class RedisQueueTest : public ::testing::Test {
 protected:
  std::string Key(const std::string& name) const { return "dlock:{" + name + "}"; }
  uint64_t Fence(const std::string& name) const {
    std::string v = redis_.Cli({"GET", Key(name) + ":fence"});
    return v == "(nil)" ? 0 : std::stoull(v);
  }

  RedisServer redis_;
};

// ----- the fd protocol ---------------------------------------------------------------------

TEST_F(RedisQueueTest, FdIsReadableWhileEntriesWaitAndReArmedByTheEmptyPop) {
  Client client(redis_.url());
  Queue q;
  ASSERT_GE(q.fd(), 0);
  EXPECT_FALSE(Readable(q.fd(), 0ms)) << "a new queue has nothing";
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);

  const char* names[] = {"fd/a", "fd/b", "fd/c"};
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(dlock_acquire_queued(client.get(), names[i], nullptr, q.get(), 1 + i), DLOCK_OK);
  }
  ASSERT_TRUE(Readable(q.fd(), 5000ms)) << "an entry arrived but the fd never became readable";
  EXPECT_TRUE(Readable(q.fd(), 0ms)) << "the fd stays readable until the queue is popped empty";
  std::vector<Entry> first = Collect(q.get(), 3);  // ends with the pop that found it empty
  ASSERT_EQ(first.size(), 3u);
  EXPECT_FALSE(Readable(q.fd(), 0ms)) << "popped empty, yet the fd is still readable";
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);
  EXPECT_FALSE(Readable(q.fd(), 0ms));

  // A second batch makes it readable again.
  std::map<uint64_t, Entry> acquired = ByTag(first);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(acquired[1 + i].status, DLOCK_OK) << acquired[1 + i];
    ASSERT_EQ(dlock_release_queued(acquired[1 + i].lock, q.get(), 11 + i), DLOCK_OK);
  }
  ASSERT_TRUE(Readable(q.fd(), 5000ms)) << "the fd was not re-armed for the second batch";
  std::vector<Entry> second = Collect(q.get(), 3);
  ASSERT_EQ(second.size(), 3u);
  for (const auto& [tag, e] : ByTag(second)) {
    EXPECT_GE(tag, 11u);
    EXPECT_EQ(e.status, DLOCK_OK) << e;
  }
  EXPECT_FALSE(Readable(q.fd(), 0ms));
}

TEST_F(RedisQueueTest, ManyOperationsInFlightFromSeveralThreadsAndClients) {
  // A queue serves any number of clients and threads; every operation reports once, by tag.
  constexpr int kThreads = 2, kPerThread = 100, kTotal = kThreads * kPerThread;
  Client client_a(redis_.url());
  Client client_b(redis_.url());
  Queue q;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      dlock_client* c = (t % 2 == 0 ? client_a : client_b).get();
      for (int i = t * kPerThread; i < (t + 1) * kPerThread; ++i) {
        std::string name = "many/" + std::to_string(i);
        EXPECT_EQ(dlock_acquire_queued(c, name.c_str(), nullptr, q.get(), 1000 + i), DLOCK_OK)
            << dlock_last_error();
      }
    });
  }
  for (auto& t : threads) t.join();

  std::vector<Entry> acquires = Collect(q.get(), kTotal, 20000ms);
  ASSERT_EQ(acquires.size(), static_cast<size_t>(kTotal));
  std::map<uint64_t, Entry> by_tag = ByTag(acquires);
  ASSERT_EQ(by_tag.size(), static_cast<size_t>(kTotal));
  std::vector<std::string> exists{"EXISTS"};
  for (int i = 0; i < kTotal; ++i) {
    const Entry& e = by_tag[1000 + i];
    ASSERT_EQ(e.kind, DLOCK_QUEUE_DONE) << e;
    ASSERT_EQ(e.status, DLOCK_OK) << e;
    ASSERT_NE(e.lock, nullptr);
    EXPECT_EQ(dlock_lock_name(e.lock), "many/" + std::to_string(i)) << "tag and lock mixed up";
    EXPECT_GT(dlock_lock_fencing_token(e.lock), 0u);
    exists.push_back(Key("many/" + std::to_string(i)));
  }
  EXPECT_EQ(redis_.Cli(exists), std::to_string(kTotal)) << "every lock is held on the server";

  for (int i = 0; i < kTotal; ++i) {
    ASSERT_EQ(dlock_release_queued(by_tag[1000 + i].lock, q.get(), 5000 + i), DLOCK_OK);
  }
  std::vector<Entry> releases = Collect(q.get(), kTotal, 20000ms);
  ASSERT_EQ(releases.size(), static_cast<size_t>(kTotal));
  for (const auto& [tag, e] : ByTag(releases)) {
    EXPECT_TRUE(tag >= 5000 && tag < 5000 + kTotal) << e;
    EXPECT_EQ(e.status, DLOCK_OK) << e;
  }
  EXPECT_EQ(redis_.Cli(exists), "0") << "every lock was released";
  EXPECT_FALSE(Readable(q.fd(), 0ms));
}

// dlock_queue_fd_dup: the copy a binding hands to a runtime that closes what it watches. It
// must not leak into children (close-on-exec), must be its own descriptor, and must see what
// the queue's fd sees.
TEST_F(RedisQueueTest, FdDupIsACloseOnExecCopyThatBecomesReadable) {
  Client client(redis_.url());
  Queue q;
  const int dup = dlock_queue_fd_dup(q.get());
  ASSERT_GE(dup, 0) << dlock_last_error();
  EXPECT_NE(dup, q.fd());
  const int flags = fcntl(dup, F_GETFD);
  ASSERT_GE(flags, 0);
  EXPECT_NE(flags & FD_CLOEXEC, 0) << "the duplicate would leak into exec'd children";
  EXPECT_FALSE(Readable(dup, 0ms));
  ASSERT_EQ(dlock_acquire_queued(client.get(), "fddup/a", nullptr, q.get(), 7), DLOCK_OK);
  ASSERT_TRUE(Readable(dup, 5000ms)) << "an entry arrived but the duplicate never became readable";
  std::vector<Entry> got = Collect(q.get(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, DLOCK_OK) << got[0];
  if (got[0].lock != nullptr) {
    EXPECT_EQ(dlock_release(got[0].lock), DLOCK_OK);
  }
  EXPECT_FALSE(Readable(dup, 0ms)) << "popped empty, yet the duplicate is still readable";
  // The caller owns the copy: closing it leaves the queue's own fd working.
  EXPECT_EQ(close(dup), 0);
  EXPECT_GE(fcntl(q.fd(), F_GETFD), 0);

  EXPECT_EQ(dlock_queue_fd_dup(nullptr), -1);
  EXPECT_NE(std::string(dlock_last_error()).find("NULL"), std::string::npos) << dlock_last_error();
}

// ----- LOST entries ----------------------------------------------------------------------

TEST_F(RedisQueueTest, OptionsKeepTheQueueForLostEntriesAfterItsHandleIsFreed) {
  // The options (and the locks acquired with them) hold the queue: freeing its handle first
  // is allowed, and a later loss is then dropped quietly.
  Client client(redis_.url());
  auto q = std::make_unique<Queue>();
  Options opts;
  opts.lease(600).heartbeat(150);
  ASSERT_EQ(dlock_options_set_on_lost_queued(opts.mutable_get(), q->get(), 5), DLOCK_OK);
  q.reset();
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "lost/orphan-queue", opts.get(), &l), DLOCK_OK);
  ASSERT_EQ(redis_.Cli({"DEL", Key("lost/orphan-queue")}), "1");
  EXPECT_TRUE(WaitFor([&] { return dlock_lock_is_valid(l) == 0; }, 2000ms));
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  // NULL clears it again; NULL options are refused.
  EXPECT_EQ(dlock_options_set_on_lost_queued(opts.mutable_get(), nullptr, 0), DLOCK_OK);
  EXPECT_EQ(dlock_options_set_on_lost_queued(nullptr, nullptr, 0), DLOCK_EINVAL);
}

// ----- cancel ------------------------------------------------------------------------------

TEST_F(RedisQueueTest, CancelMatchesClientQueueAndTag) {
  Client holder(redis_.url());
  Client client(redis_.url());
  Client bystander(redis_.url());
  Queue q, elsewhere;
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "cancel/busy", nullptr, &held), DLOCK_OK);

  Options forever;
  forever.wait(-1);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "cancel/busy", forever.get(), q.get(), 5), DLOCK_OK);
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "it should be waiting for the holder";

  // None of these names the pending acquire: each is refused, and it keeps waiting.
  EXPECT_EQ(dlock_acquire_cancel_queued(client.get(), q.get(), 6), DLOCK_EINVAL);  // other tag
  EXPECT_NE(std::string(dlock_last_error()).find("pending"), std::string::npos)
      << dlock_last_error();
  EXPECT_EQ(dlock_acquire_cancel_queued(client.get(), elsewhere.get(), 5), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire_cancel_queued(bystander.get(), q.get(), 5), DLOCK_EINVAL);
  // An arg that happens to equal the tag is not the queued acquire's key.
  EXPECT_EQ(dlock_acquire_cancel(client.get(), reinterpret_cast<void*>(uintptr_t{5})),
            DLOCK_EINVAL);
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "a cancel that did not match it ended it";
  EXPECT_FALSE(Readable(elsewhere.fd(), 0ms));

  ASSERT_EQ(dlock_acquire_cancel_queued(client.get(), q.get(), 5), DLOCK_OK) << dlock_last_error();
  Entry e = CollectOne(q.get());
  EXPECT_EQ(e.kind, DLOCK_QUEUE_DONE);
  EXPECT_EQ(e.tag, 5u);
  EXPECT_EQ(e.status, DLOCK_ECANCELLED) << e;
  EXPECT_EQ(e.lock, nullptr);
  EXPECT_EQ(dlock_acquire_cancel_queued(client.get(), q.get(), 5), DLOCK_EINVAL)
      << "nothing is pending any more";
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "one entry per operation";
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << "the holder kept its lock throughout";
}

// ----- freeing the queue -------------------------------------------------------------------

TEST_F(RedisQueueTest, FreeingTheQueueGivesBackALockNobodyPopped) {
  Client client(redis_.url());  // stays open: the queue, not the client, gives it back
  Client other(redis_.url());
  Queue q;
  ASSERT_EQ(dlock_acquire_queued(client.get(), "free/unpopped", nullptr, q.get(), 1), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("free/unpopped")}), "1") << "the entry carries a held lock";
  q.reset();
  // Its lease is 10 s: getting it within 8 s means it was released, not left to expire.
  EXPECT_EQ(TryAcquire(other, "free/unpopped", 8000), DLOCK_OK) << dlock_last_error();
}

TEST_F(RedisQueueTest, FreeingTheQueueGivesBackALockWonAfterwards) {
  Client holder(redis_.url());
  Client client(redis_.url());
  Client other(redis_.url());
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "free/later", nullptr, &held), DLOCK_OK);
  const uint64_t holder_fence = Fence("free/later");

  Queue q;
  Options waiting;
  waiting.wait(10000);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "free/later", waiting.get(), q.get(), 1), DLOCK_OK);
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "it should be waiting for the holder";
  q.reset();  // the acquire is still waiting: its outcome will find nobody

  ASSERT_EQ(dlock_release(held), DLOCK_OK);
  // Nobody else contends, so a higher fence means the orphaned acquire won; the key then
  // disappearing long before its 10 s lease means it was given back.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Fence("free/later") > holder_fence &&
               redis_.Cli({"EXISTS", Key("free/later")}) == "0";
      },
      8000ms))
      << "fence " << Fence("free/later") << " (holder's " << holder_fence << "), key exists "
      << redis_.Cli({"EXISTS", Key("free/later")});
  EXPECT_EQ(TryAcquire(other, "free/later"), DLOCK_OK) << dlock_last_error();
}

// The process's open pipe ends (a queue's fd is a pipe's read end).
int OpenPipes() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    char target[64] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), target, sizeof target - 1) > 0) {
      n += std::string(target).rfind("pipe:", 0) == 0;
    }
  }
  closedir(d);
  return n;
}

TEST_F(RedisQueueTest, FreedQueuesCloseTheirFdsOnceNothingCanArrive) {
  // A program that makes a queue per request must not run out of fds or hold locks.
  Client client(redis_.url());
  {
    Queue warm;  // the client's async connection, so that it is not counted below
    ASSERT_EQ(dlock_acquire_queued(client.get(), "fds/warm", nullptr, warm.get(), 1), DLOCK_OK);
    Entry e = CollectOne(warm.get());
    ASSERT_EQ(e.status, DLOCK_OK) << e;
    ASSERT_EQ(dlock_release_queued(e.lock, warm.get(), 2), DLOCK_OK);
    ASSERT_EQ(CollectOne(warm.get()).status, DLOCK_OK);
  }
  const int before = OpenPipes();
  constexpr int kQueues = 100;
  std::vector<std::string> exists{"EXISTS"};
  for (int i = 0; i < kQueues; ++i) {
    dlock_queue* q = nullptr;
    ASSERT_EQ(dlock_queue_new(&q), DLOCK_OK);
    if (i % 2 == 0) {  // half of them freed with an acquire in flight
      std::string name = "fds/" + std::to_string(i);
      ASSERT_EQ(dlock_acquire_queued(client.get(), name.c_str(), nullptr, q, i), DLOCK_OK);
      exists.push_back(Key(name));
    }
    dlock_queue_free(q);
  }
  // (<=: a pipe of an earlier test's teardown may close meanwhile.)
  EXPECT_TRUE(WaitFor([&] { return OpenPipes() <= before; }, 10000ms))
      << OpenPipes() - before << " pipe fds still open";
  EXPECT_TRUE(WaitFor([&] { return redis_.Cli(exists) == "0"; }, 10000ms))
      << redis_.Cli(exists) << " locks never given back";
}

// ----- argument errors, NULL out pointers ------------------------------------------------

TEST_F(RedisQueueTest, BadArgumentsAreRefusedAndQueueNothing) {
  Client client(redis_.url());
  Queue q;
  auto expect_einval = [](dlock_status s, const char* mentions) {
    EXPECT_EQ(s, DLOCK_EINVAL);
    EXPECT_NE(std::string(dlock_last_error()).find(mentions), std::string::npos)
        << "message \"" << dlock_last_error() << "\" should mention " << mentions;
  };
  dlock_queue* none = nullptr;
  expect_einval(dlock_queue_new(nullptr), "NULL");

  expect_einval(dlock_acquire_queued(nullptr, "bad/x", nullptr, q.get(), 1), "client");
  expect_einval(dlock_acquire_queued(client.get(), nullptr, nullptr, q.get(), 2), "name");
  expect_einval(dlock_acquire_queued(client.get(), "", nullptr, q.get(), 3), "name");
  expect_einval(dlock_acquire_queued(client.get(), std::string(2000, 'n').c_str(), nullptr,
                                     q.get(), 4),
                "name");
  expect_einval(dlock_acquire_queued(client.get(), "bad/x", nullptr, none, 5), "queue");
  Options bad;
  bad.lease(1000).heartbeat(2000);  // a heartbeat longer than the lease
  EXPECT_EQ(dlock_acquire_queued(client.get(), "bad/x", bad.get(), q.get(), 6), DLOCK_EINVAL);
  expect_einval(dlock_acquire_cancel_queued(nullptr, q.get(), 1), "client");
  expect_einval(dlock_acquire_cancel_queued(client.get(), none, 1), "queue");
  expect_einval(dlock_release_queued(nullptr, q.get(), 7), "lock");
  expect_einval(dlock_extend_queued(nullptr, 1000, q.get(), 8), "lock");
  expect_einval(dlock_options_set_on_lost_queued(nullptr, q.get(), 9), "options");
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("bad/x")}), "0");

  // With a real lock and no queue: refused, and (a failed call changes nothing) the lock is
  // still ours and still usable.
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "bad/held", nullptr, &l), DLOCK_OK);
  expect_einval(dlock_extend_queued(l, 1000, none, 10), "queue");
  expect_einval(dlock_release_queued(l, none, 11), "queue");
  EXPECT_EQ(dlock_lock_is_valid(l), 1);

  // A lease that is bad for an extend is refused either at once or by its entry, never both.
  dlock_status s = dlock_extend_queued(l, 5, q.get(), 12);  // under the 10 ms minimum
  if (s == DLOCK_OK) {
    Entry e = CollectOne(q.get());
    EXPECT_EQ(e.tag, 12u);
    EXPECT_EQ(e.status, DLOCK_EINVAL) << e;
  } else {
    EXPECT_EQ(s, DLOCK_EINVAL);
  }
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);

  // Nothing above queued anything (give a stray entry a moment to show up).
  EXPECT_FALSE(Readable(q.fd(), 300ms));
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);

  uint64_t tag = 99;
  dlock_status status = DLOCK_OK;
  dlock_lock* popped = reinterpret_cast<dlock_lock*>(uintptr_t{1});
  EXPECT_EQ(dlock_queue_pop(nullptr, &tag, &status, &popped), -1);
  EXPECT_NE(std::string(dlock_last_error()).find("queue"), std::string::npos);
  EXPECT_EQ(tag, 99u) << "outputs are not written on failure";
  EXPECT_EQ(dlock_queue_fd(nullptr), -1);
  dlock_queue_free(nullptr);
}

TEST_F(RedisQueueTest, PopWithNullOutPointersReleasesTheLockNobodyTakes) {
  Client client(redis_.url());
  Client other(redis_.url());
  Queue q;

  // All out pointers NULL.
  ASSERT_EQ(dlock_acquire_queued(client.get(), "np/all-null", nullptr, q.get(), 1), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("np/all-null")}), "1") << "it was acquired";
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_DONE);
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);
  // Lease 10 s: acquiring within 8 s means it was released in the background.
  EXPECT_EQ(TryAcquire(other, "np/all-null", 8000), DLOCK_OK) << dlock_last_error();

  // Tag and status, but no lock pointer.
  ASSERT_EQ(dlock_acquire_queued(client.get(), "np/no-lock", nullptr, q.get(), 2), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  uint64_t tag = 0;
  dlock_status status = DLOCK_EINTERNAL;
  EXPECT_EQ(dlock_queue_pop(q.get(), &tag, &status, nullptr), DLOCK_QUEUE_DONE);
  EXPECT_EQ(tag, 2u);
  EXPECT_EQ(status, DLOCK_OK);
  // Pop until empty, as always: that re-arms the fd for the next entry.
  EXPECT_EQ(dlock_queue_pop(q.get(), &tag, &status, nullptr), DLOCK_QUEUE_EMPTY);
  EXPECT_EQ(TryAcquire(other, "np/no-lock", 8000), DLOCK_OK) << dlock_last_error();

  // An entry without a lock popped with NULLs: nothing to give back, nothing breaks.
  Options one_try;
  one_try.wait(0);
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), "np/held", nullptr, &held), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "np/held", one_try.get(), q.get(), 3), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_DONE);
  EXPECT_EQ(dlock_queue_pop(q.get(), nullptr, nullptr, nullptr), DLOCK_QUEUE_EMPTY);
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
}

// ----- the consumer never holds up the loop ------------------------------------------------

TEST_F(RedisQueueTest, AConsumerThatDoesNotPopNeverStallsHeartbeats) {
  // With a callback, a consumer busy for 2.5 s would hold the loop thread, and a 1 s lease
  // with it. With a queue the loop thread only appends: renewals go on while entries pile up.
  // (Renewed every 100 ms: one may come 900 ms late on a busy machine.)
  Client client(redis_.url());
  Client other(redis_.url());
  Queue q;
  Options short_lease;
  short_lease.lease(1000).heartbeat(100);
  ASSERT_EQ(dlock_options_set_on_lost_queued(short_lease.mutable_get(), q.get(), 666), DLOCK_OK);

  ASSERT_EQ(dlock_acquire_queued(client.get(), "hb/A", short_lease.get(), q.get(), 1), DLOCK_OK);
  Entry a = CollectOne(q.get());
  ASSERT_EQ(a.status, DLOCK_OK) << a;
  dlock_lock* lock_a = a.lock;

  // Entries that nobody pops for a while: a lock won (its entry carries it, so it must be
  // renewed too), a one-try failure, and a wait that runs out while we are not looking.
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), "hb/held", nullptr, &held), DLOCK_OK);
  Options one_try, short_wait;
  one_try.wait(0);
  short_wait.wait(1000);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "hb/B", short_lease.get(), q.get(), 2), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "hb/held", one_try.get(), q.get(), 3), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(client.get(), "hb/held", short_wait.get(), q.get(), 4), DLOCK_OK);
  ASSERT_TRUE(Readable(q.fd(), 5000ms));

  std::this_thread::sleep_for(2500ms);  // the consumer is busy: two and a half leases go by unpopped

  EXPECT_EQ(dlock_lock_is_valid(lock_a), 1) << "A's heartbeats stalled behind the queue";
  EXPECT_GT(dlock_lock_remaining_ms(lock_a), 0);
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hb/A")}), "1");
  EXPECT_EQ(TryAcquire(other, "hb/A"), DLOCK_NOT_ACQUIRED);

  std::vector<Entry> waiting = Collect(q.get(), 3);
  ASSERT_EQ(waiting.size(), 3u);
  std::map<uint64_t, Entry> by_tag = ByTag(waiting);
  EXPECT_EQ(by_tag[3].status, DLOCK_NOT_ACQUIRED) << by_tag[3];
  EXPECT_EQ(by_tag[4].status, DLOCK_NOT_ACQUIRED) << by_tag[4];
  ASSERT_EQ(by_tag[2].status, DLOCK_OK) << by_tag[2];
  dlock_lock* lock_b = by_tag[2].lock;
  EXPECT_EQ(dlock_lock_is_valid(lock_b), 1) << "B, unpopped for 2.5 s, was not kept";
  EXPECT_EQ(redis_.Cli({"EXISTS", Key("hb/B")}), "1");
  for (const Entry& e : waiting) EXPECT_NE(e.kind, DLOCK_QUEUE_LOST) << e;

  ASSERT_EQ(dlock_release_queued(lock_a, q.get(), 10), DLOCK_OK);
  ASSERT_EQ(dlock_release_queued(lock_b, q.get(), 11), DLOCK_OK);
  std::vector<Entry> released = Collect(q.get(), 2);
  ASSERT_EQ(released.size(), 2u);
  for (const auto& [tag, e] : ByTag(released)) {
    EXPECT_EQ(e.kind, DLOCK_QUEUE_DONE) << e;
    EXPECT_EQ(e.status, DLOCK_OK) << "release of tag " << tag << ": " << e;
  }
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
}

// ----- closing the client ------------------------------------------------------------------

TEST_F(RedisQueueTest, ClosingTheClientStillDeliversEveryEntry) {
  Client holder(redis_.url());
  Client other(redis_.url());
  dlock_client* client = nullptr;
  ASSERT_EQ(dlock_client_open(redis_.url().c_str(), &client), DLOCK_OK);
  Queue q;
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "close/busy", nullptr, &held), DLOCK_OK);

  // Two locks held through the queue, for an extend and a release in flight at close.
  ASSERT_EQ(dlock_acquire_queued(client, "close/extended", nullptr, q.get(), 10), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(client, "close/released", nullptr, q.get(), 11), DLOCK_OK);
  std::vector<Entry> got = Collect(q.get(), 2);
  ASSERT_EQ(got.size(), 2u);
  std::map<uint64_t, Entry> locks = ByTag(got);
  ASSERT_EQ(locks[10].status, DLOCK_OK);
  ASSERT_EQ(locks[11].status, DLOCK_OK);
  dlock_lock* extended = locks[10].lock;

  Options forever, a_while;
  forever.wait(-1);
  a_while.wait(10000);
  ASSERT_EQ(dlock_acquire_queued(client, "close/busy", forever.get(), q.get(), 1), DLOCK_OK);
  ASSERT_EQ(dlock_acquire_queued(client, "close/busy", a_while.get(), q.get(), 2), DLOCK_OK);
  EXPECT_FALSE(Readable(q.fd(), 200ms)) << "the waiting acquires ended early";
  // Then three that race the close.
  ASSERT_EQ(dlock_acquire_queued(client, "close/fresh", nullptr, q.get(), 3), DLOCK_OK);
  ASSERT_EQ(dlock_extend_queued(extended, 30000, q.get(), 4), DLOCK_OK);
  ASSERT_EQ(dlock_release_queued(locks[11].lock, q.get(), 5), DLOCK_OK);
  dlock_client_close(client);

  std::vector<Entry> entries = Collect(q.get(), 5, 6000ms);
  ASSERT_EQ(entries.size(), 5u) << "an operation in flight at close never reported";
  std::map<uint64_t, Entry> by_tag = ByTag(entries);
  for (uint64_t tag = 1; tag <= 5; ++tag) {
    EXPECT_EQ(by_tag[tag].kind, DLOCK_QUEUE_DONE) << by_tag[tag];
  }
  EXPECT_EQ(by_tag[1].status, DLOCK_ECANCELLED) << by_tag[1];
  EXPECT_EQ(by_tag[2].status, DLOCK_ECANCELLED) << by_tag[2];
  EXPECT_EQ(by_tag[1].lock, nullptr);
  EXPECT_EQ(by_tag[2].lock, nullptr);
  // The others raced the close: finished, or cut short; never anything else.
  EXPECT_TRUE(by_tag[3].status == DLOCK_OK || by_tag[3].status == DLOCK_ECANCELLED) << by_tag[3];
  // (The extend and the release may also find the connection shut under them: EIO.)
  EXPECT_TRUE(by_tag[4].status == DLOCK_OK || by_tag[4].status == DLOCK_ECANCELLED ||
              by_tag[4].status == DLOCK_NOT_HELD || by_tag[4].status == DLOCK_EIO)
      << by_tag[4];
  EXPECT_TRUE(by_tag[5].status == DLOCK_OK || by_tag[5].status == DLOCK_NOT_HELD ||
              by_tag[5].status == DLOCK_EIO)
      << by_tag[5];
  EXPECT_FALSE(Readable(q.fd(), 300ms)) << "more entries than operations";

  // Close released everything, including a lock won at the last moment.
  if (by_tag[3].lock != nullptr) {
    EXPECT_EQ(dlock_release(by_tag[3].lock), DLOCK_NOT_HELD);
  }
  for (const char* name : {"close/extended", "close/released", "close/fresh"}) {
    EXPECT_EQ(TryAcquire(other, name, 8000), DLOCK_OK) << name << ": " << dlock_last_error();
  }
  // Handles that outlive their client: queued calls say NOT_HELD at once and queue nothing.
  EXPECT_EQ(dlock_extend_queued(extended, 1000, q.get(), 20), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release_queued(extended, q.get(), 21), DLOCK_NOT_HELD);  // frees it
  EXPECT_FALSE(Readable(q.fd(), 200ms));
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << "the other client's lock was untouched";
}

}  // namespace
}  // namespace dlock_test
