// Shared holds and semaphores on DynamoDB, against a real dynalite: the map of holds in the
// lock's one item, the writer's announcement, takeover of a vanished holder's hold on the
// waiter's clock, tokens from one counter for every kind, and the holder limit of one item.
// (What every backend does with kinds is in conformance/kinds_test.cc.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class DynamoKindsTest : public DynamoTest {
 protected:
  static void Shared(Options* o) { ASSERT_EQ(dlock_options_set_kind(o->mutable_get(), DLOCK_SHARED), DLOCK_OK); }
  static void Permits(Options* o, uint32_t n) {
    ASSERT_EQ(dlock_options_set_permits(o->mutable_get(), n), DLOCK_OK);
  }
  // Holders of `name` as its item stores them.
  size_t StoredHolds(const std::string& name) {
    nlohmann::json item = Item(name);
    return item.contains("holds") ? item["holds"]["M"].size() : 0;
  }
  struct Snapshot {
    dlock_kind kind = DLOCK_EXCLUSIVE;
    uint32_t permits = 0;
    std::vector<std::string> owners;
    std::vector<int64_t> remaining;
    std::vector<uint64_t> tokens;
  };
  static Snapshot Inspect(dlock_client* c, const std::string& name) {
    Snapshot s;
    dlock_info* info = nullptr;
    EXPECT_EQ(dlock_inspect(c, name.c_str(), &info), DLOCK_OK) << dlock_last_error();
    if (info == nullptr) return s;
    s.kind = dlock_info_kind(info);
    s.permits = dlock_info_permits(info);
    for (uint32_t k = 0; k < dlock_info_holders(info); ++k) {
      s.owners.push_back(dlock_info_owner(info, k));
      s.remaining.push_back(dlock_info_remaining_ms(info, k));
      s.tokens.push_back(dlock_info_fencing_token(info, k));
    }
    dlock_info_free(info);
    return s;
  }
};

TEST_F(DynamoKindsTest, ThreeSharedHoldersAtOnceEachInTheItem) {
  Client a(url()), b(url()), c(url()), viewer(url());
  dlock_lock* l[3];
  dlock_client* clients[3] = {a.get(), b.get(), c.get()};
  const char* labels[3] = {"reader-a", "reader-b", "reader-c"};
  for (int i = 0; i < 3; ++i) {
    Options o;
    Shared(&o);
    o.owner(labels[i]);
    ASSERT_EQ(dlock_acquire(clients[i], "shared3", o.get(), &l[i]), DLOCK_OK) << dlock_last_error();
  }
  EXPECT_EQ(StoredHolds("shared3"), 3u);
  EXPECT_FALSE(Item("shared3").contains("owner")) << "shared holds are not the exclusive owner";
  Snapshot s = Inspect(viewer.get(), "shared3");
  EXPECT_EQ(s.kind, DLOCK_SHARED);
  EXPECT_EQ(s.permits, 0u);
  ASSERT_EQ(s.owners.size(), 3u);
  std::vector<std::string> owners = s.owners;
  std::sort(owners.begin(), owners.end());
  EXPECT_EQ(owners, (std::vector<std::string>{"reader-a", "reader-b", "reader-c"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(s.remaining[i], 8000) << "10 s leases";
    EXPECT_LE(s.remaining[i], 10000);
    EXPECT_EQ(s.tokens[i], dlock_lock_fencing_token(l[i]));
  }
  for (auto* lock : l) EXPECT_EQ(dlock_release(lock), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(StoredHolds("shared3"), 0u);
  EXPECT_TRUE(Inspect(viewer.get(), "shared3").owners.empty());
}

TEST_F(DynamoKindsTest, ExclusiveIsRefusedWhileSharedIsHeldAndGrantedAfterRelease) {
  Client reader(url()), writer(url());
  Options shared;
  Shared(&shared);
  dlock_lock *r, *w;
  ASSERT_EQ(dlock_acquire(reader.get(), "rw", shared.get(), &r), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(writer.get(), "rw", nullptr, &w), DLOCK_NOT_ACQUIRED);
  EXPECT_FALSE(Item("rw").contains("writer")) << "a single try announces nothing";
  // And shared is refused while an exclusive holder holds it.
  ASSERT_EQ(dlock_release(r), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(writer.get(), "rw", nullptr, &w), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(reader.get(), "rw", shared.get(), &r), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_release(w), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(reader.get(), "rw", shared.get(), &r), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(r), DLOCK_OK);
}

TEST_F(DynamoKindsTest, AWaitingWriterKeepsNewReadersOutUntilItHasHadItsTurn) {
  Client first(url()), writer_client(url()), late(url());
  Options shared;
  Shared(&shared);
  dlock_lock *r1, *r2, *w = nullptr;
  ASSERT_EQ(dlock_acquire(first.get(), "pref", shared.get(), &r1), DLOCK_OK) << dlock_last_error();
  std::atomic<dlock_status> writer_status{DLOCK_EINTERNAL};
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    Options o;
    o.wait(10000).retry(20, 100).owner("the-writer");
    writer_status = dlock_acquire(writer_client.get(), "pref", o.get(), &w);
    writer_done = true;
  });
  // The writer's refused attempt announces it: a new reader is refused, though only readers hold.
  auto until = Clock::now() + 5s;
  while (!Item("pref").contains("writer") && Clock::now() < until) std::this_thread::sleep_for(10ms);
  nlohmann::json announcement = Item("pref")["writer"]["M"];
  EXPECT_EQ(announcement["owner"]["S"].get<std::string>().substr(33), "the-writer");
  EXPECT_EQ(dlock_acquire(late.get(), "pref", shared.get(), &r2), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find("pref"), std::string::npos);
  EXPECT_FALSE(writer_done.load()) << "the writer waits for the reader";
  ASSERT_EQ(dlock_release(r1), DLOCK_OK);
  writer.join();
  ASSERT_EQ(writer_status.load(), DLOCK_OK) << dlock_last_error();
  // Acquired, the writer removes its announcement (in the background).
  until = Clock::now() + 3s;
  while (Item("pref").contains("writer") && Clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(Item("pref").contains("writer"));
  EXPECT_EQ(dlock_acquire(late.get(), "pref", shared.get(), &r2), DLOCK_NOT_ACQUIRED);
  ASSERT_EQ(dlock_release(w), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(late.get(), "pref", shared.get(), &r2), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(r2), DLOCK_OK);
}

TEST_F(DynamoKindsTest, AnAbandonedAnnouncementStandsForItsQueueMsOnTheReadersClock) {
  // A writer that crashed while waiting: its announcement (queueMs 800) stays in the item.
  RawResponse put = ddb_.Call(
      "UpdateItem",
      R"({"TableName":"locks","Key":{"id":{"S":"dlock:abandoned"}},"UpdateExpression":"SET #w = :w",)"
      R"("ExpressionAttributeNames":{"#w":"writer"},"ExpressionAttributeValues":{":w":{"M":{)"
      R"("owner":{"S":"0123456789abcdef0123456789abcdef|gone"},"recordVersion":{"S":"v1"},)"
      R"("queueMs":{"N":"800"}}}}})");
  ASSERT_EQ(put.status, 200) << put.body;
  Client reader(url());
  Options once, patient;
  Shared(&once);
  Shared(&patient);
  patient.wait(5000).retry(20, 100);
  dlock_lock* r;
  auto start = Clock::now();
  EXPECT_EQ(dlock_acquire(reader.get(), "abandoned", once.get(), &r), DLOCK_NOT_ACQUIRED);
  ASSERT_EQ(dlock_acquire(reader.get(), "abandoned", patient.get(), &r), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 800 - 5);
  EXPECT_LT(ElapsedMs(start), 3000);
  EXPECT_FALSE(Item("abandoned").contains("writer")) << "the reader that found it stale removed it";
  EXPECT_EQ(dlock_release(r), DLOCK_OK);
}

TEST_F(DynamoKindsTest, ASemaphoreOfTwoRefusesAThird) {
  Client a(url()), b(url()), c(url()), viewer(url());
  Options two;
  Permits(&two, 2);
  dlock_lock *la, *lb, *lc;
  ASSERT_EQ(dlock_acquire(a.get(), "sem2", two.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "sem2", two.get(), &lb), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(c.get(), "sem2", two.get(), &lc), DLOCK_NOT_ACQUIRED);
  Snapshot s = Inspect(viewer.get(), "sem2");
  EXPECT_EQ(s.kind, DLOCK_EXCLUSIVE);
  EXPECT_EQ(s.permits, 2u);
  EXPECT_EQ(s.owners.size(), 2u);
  EXPECT_EQ(N(Item("sem2"), "permits"), 2u);
  ASSERT_EQ(dlock_release(la), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(c.get(), "sem2", two.get(), &lc), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(lb), DLOCK_OK);
  EXPECT_EQ(dlock_release(lc), DLOCK_OK);
  // Free again, the name takes any sort: a lock now.
  ASSERT_EQ(dlock_acquire(a.get(), "sem2", nullptr, &la), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(la), DLOCK_OK);
}

TEST_F(DynamoKindsTest, ContendingClientsNeverExceedThePermits) {
  constexpr int kThreads = 6, kRounds = 4;
  std::atomic<int> inside{0}, most{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Client client(url());
      Options three;
      Permits(&three, 3);
      three.wait(30000).retry(5, 50);
      for (int i = 0; i < kRounds; ++i) {
        dlock_lock* l;
        if (dlock_acquire(client.get(), "sem3", three.get(), &l) != DLOCK_OK) {
          failures++;
          continue;
        }
        int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(20ms);
        --inside;
        if (dlock_release(l) != DLOCK_OK) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 2) << "contention should have filled the semaphore at least twice over";
  EXPECT_EQ(StoredHolds("sem3"), 0u);
}

TEST_F(DynamoKindsTest, ASortMismatchIsEinvalNamingWhatTheNameIs) {
  Client a(url()), b(url());
  Options three, four, shared;
  Permits(&three, 3);
  Permits(&four, 4);
  Shared(&shared);
  dlock_lock *l, *other = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "sorts", three.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(b.get(), "sorts", four.get(), &other), DLOCK_EINVAL);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find("semaphore of 3 permits"), std::string::npos) << error;
  EXPECT_NE(error.find("asked for a semaphore of 4 permits"), std::string::npos) << error;
  EXPECT_EQ(dlock_acquire(b.get(), "sorts", shared.get(), &other), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("asked for a lock"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(b.get(), "sorts", nullptr, &other), DLOCK_EINVAL);
  EXPECT_EQ(other, nullptr);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  // Held as a lock, a semaphore acquire is refused the other way round.
  ASSERT_EQ(dlock_acquire(a.get(), "sorts", shared.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(b.get(), "sorts", three.get(), &other), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("is a lock"), std::string::npos) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(a.get(), "sorts", four.get(), &l), DLOCK_OK) << "free again: any n" << dlock_last_error();
  EXPECT_EQ(N(Item("sorts"), "permits"), 4u);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  // Past what one item can keep.
  Options huge;
  Permits(&huge, 901);
  EXPECT_EQ(dlock_acquire(a.get(), "sorts", huge.get(), &l), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("at most 900 permits"), std::string::npos) << dlock_last_error();
}

TEST_F(DynamoKindsTest, TokensRiseAcrossEveryKind) {
  Client client(url());
  Options shared, sem;
  Shared(&shared);
  Permits(&sem, 2);
  uint64_t last = 0;
  auto take = [&](const dlock_options* o, dlock_lock** l) {
    ASSERT_EQ(dlock_acquire(client.get(), "tokens", o, l), DLOCK_OK) << dlock_last_error();
    EXPECT_GT(dlock_lock_fencing_token(*l), last);
    last = dlock_lock_fencing_token(*l);
  };
  dlock_lock *x, *s1, *s2, *p1, *p2;
  take(nullptr, &x);
  ASSERT_EQ(dlock_release(x), DLOCK_OK);
  take(shared.get(), &s1);
  take(shared.get(), &s2);
  ASSERT_EQ(dlock_release(s1), DLOCK_OK);
  ASSERT_EQ(dlock_release(s2), DLOCK_OK);
  take(sem.get(), &p1);
  take(sem.get(), &p2);
  ASSERT_EQ(dlock_release(p2), DLOCK_OK);
  ASSERT_EQ(dlock_release(p1), DLOCK_OK);
  take(nullptr, &x);
  EXPECT_EQ(N(Item("tokens"), "fence"), last) << "one counter for every kind";
  ASSERT_EQ(dlock_release(x), DLOCK_OK);
  take(shared.get(), &s1);
  ASSERT_EQ(dlock_release(s1), DLOCK_OK);
}

TEST_F(DynamoKindsTest, AVanishedSharedHoldIsTakenOverAfterItsLease) {
  // The reader stops renewing (no heartbeats: as if its process were gone); its hold stays in
  // the item until a waiter has seen its recordVersion unchanged for its whole lease.
  Client gone(url()), writer(url());
  Options short_lease, patient;
  Shared(&short_lease);
  short_lease.lease(800).heartbeat(0);
  patient.wait(5000).retry(20, 100);
  dlock_lock *r, *w;
  ASSERT_EQ(dlock_acquire(gone.get(), "vanished", short_lease.get(), &r), DLOCK_OK) << dlock_last_error();
  const uint64_t reader_token = dlock_lock_fencing_token(r);
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(writer.get(), "vanished", patient.get(), &w), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 800 - 5);
  EXPECT_LT(ElapsedMs(start), 3000);
  EXPECT_GT(dlock_lock_fencing_token(w), reader_token);
  EXPECT_EQ(StoredHolds("vanished"), 0u) << "the writer removed the expired hold";
  EXPECT_EQ(dlock_release(r), DLOCK_NOT_HELD) << "the reader's hold is gone";
  EXPECT_EQ(dlock_release(w), DLOCK_OK);
}

TEST_F(DynamoKindsTest, AVanishedPermitIsTakenOverAfterItsLeaseAndLiveOnesAreRenewed) {
  Client gone(url()), alive(url()), waiter(url());
  Options vanishing, renewed, patient;
  Permits(&vanishing, 2);
  Permits(&renewed, 2);
  Permits(&patient, 2);
  vanishing.lease(700).heartbeat(0);
  renewed.lease(600);  // heartbeats every 200 ms keep it
  patient.wait(5000).retry(20, 100);
  dlock_lock *g, *a, *w;
  ASSERT_EQ(dlock_acquire(gone.get(), "permits", vanishing.get(), &g), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(alive.get(), "permits", renewed.get(), &a), DLOCK_OK) << dlock_last_error();
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(waiter.get(), "permits", patient.get(), &w), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 700 - 5);
  EXPECT_EQ(dlock_lock_is_valid(a), 1) << "the renewed permit stays";
  EXPECT_EQ(StoredHolds("permits"), 2u);
  EXPECT_EQ(dlock_release(g), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(a), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(w), DLOCK_OK);
}

TEST_F(DynamoKindsTest, ExtendAndHeartbeatRewriteOnlyTheirOwnHold) {
  Client a(url()), b(url());
  Options shared;
  Shared(&shared);
  shared.lease(900);
  dlock_lock *la, *lb;
  ASSERT_EQ(dlock_acquire(a.get(), "renew", shared.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "renew", shared.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_extend(la, 20000), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(1500ms);  // past the first lease: heartbeats kept both
  EXPECT_EQ(dlock_lock_is_valid(lb), 1);
  nlohmann::json holds = Item("renew")["holds"]["M"];
  ASSERT_EQ(holds.size(), 2u);
  std::vector<uint64_t> leases;
  for (auto& entry : holds) leases.push_back(std::stoull(entry["M"]["leaseMs"]["N"].get<std::string>()));
  std::sort(leases.begin(), leases.end());
  EXPECT_EQ(leases, (std::vector<uint64_t>{900, 20000}));
  EXPECT_EQ(dlock_release(la), DLOCK_OK);
  EXPECT_EQ(dlock_release(lb), DLOCK_OK);
}

TEST_F(DynamoKindsTest, AHoldDeletedBehindItsBackIsLost) {
  Client client(url());
  LostRecorder lost;
  Options shared;
  Shared(&shared);
  shared.lease(600).on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "deleted", shared.get(), &l), DLOCK_OK) << dlock_last_error();
  RawResponse d = ddb_.Call("DeleteItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:deleted"}}})");
  ASSERT_EQ(d.status, 200) << d.body;
  auto until = Clock::now() + 3s;
  while (lost.calls.load() == 0 && Clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(lost.calls.load(), 1) << "the next renewal finds the hold gone";
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

// Writes lock `name`'s item with `count` holds of lease_ms (crashed holders: nobody renews them).
void PutHolds(DynaliteServer& ddb, const std::string& name, int count, uint64_t lease_ms,
              const std::string& label, uint32_t permits) {
  nlohmann::json holds = nlohmann::json::object();
  for (int i = 0; i < count; ++i) {
    char token[33];
    snprintf(token, sizeof token, "%032x", i);
    holds[std::string(token) + "|" + label] = {
        {"M",
         {{"recordVersion", {{"S", std::string(32, static_cast<char>('a' + i % 26))}}},
          {"leaseMs", {{"N", std::to_string(lease_ms)}}},
          {"renewedAtMs", {{"N", "99999999999999999999"}}},
          {"token", {{"N", std::to_string(10000000000000000000ull + i)}}}}}};
  }
  nlohmann::json item = {{"id", {{"S", "dlock:" + name}}},
                         {"fence", {{"N", std::to_string(10000000000000000000ull + count)}}},
                         {"holds", {{"M", holds}}}};
  if (permits != 0) item["permits"] = {{"N", std::to_string(permits)}};
  RawResponse put = ddb.Call("PutItem", nlohmann::json({{"TableName", "locks"}, {"Item", item}}).dump());
  ASSERT_EQ(put.status, 200) << put.body.substr(0, 300);
}

TEST_F(DynamoKindsTest, ManyExpiredHoldsAreClearedAcrossSeveralWrites) {
  // 250 crashed permits of a semaphore of 300: more than one write may remove (100).
  PutHolds(ddb_, "graveyard", 250, 400, "dead", 300);
  // DynamoDB refuses expressions over 4 KB (dynalite does not): the proxy measures them.
  std::atomic<size_t> longest{0};
  std::atomic<int> cleanups{0};
  FakeHttpServer proxy([&](const FakeRequest& r) {
    nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
    if (body.is_object()) {
      for (const char* e : {"ConditionExpression", "UpdateExpression"}) {
        if (body.contains(e)) longest = std::max(longest.load(), body[e].get<std::string>().size());
      }
      if (body.contains("UpdateExpression") &&
          body["UpdateExpression"].get<std::string>().rfind("REMOVE", 0) == 0) {
        cleanups++;  // removes without setting anything: a cleanup (or a release)
      }
    }
    return ForwardTo(ddb_.endpoint(), r);
  });
  const std::string proxied = "dynamodb://locks?region=us-east-1&endpoint=" + proxy.url();
  Client client(proxied), viewer(url());
  Options shared, exclusive;
  Shared(&shared);
  shared.wait(5000).retry(20, 100);
  exclusive.wait(5000).retry(20, 100);
  dlock_lock* l;
  // Until this client has seen them stand for their lease, the name is a semaphore.
  EXPECT_EQ(dlock_acquire(client.get(), "graveyard", shared.get(), &l), DLOCK_EINVAL);
  std::this_thread::sleep_for(450ms);
  // Then a shared hold makes it a lock: every expired permit goes first, and `permits` with them.
  ASSERT_EQ(dlock_acquire(client.get(), "graveyard", shared.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(StoredHolds("graveyard"), 1u);
  EXPECT_FALSE(Item("graveyard").contains("permits"));
  Snapshot s = Inspect(viewer.get(), "graveyard");
  EXPECT_EQ(s.kind, DLOCK_SHARED);
  EXPECT_EQ(s.permits, 0u);
  EXPECT_EQ(s.tokens, std::vector<uint64_t>{10000000000000000251ull});
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  // An exclusive acquire over as many expired shared holds.
  PutHolds(ddb_, "graveyard2", 250, 400, "dead", 0);
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(client.get(), "graveyard2", exclusive.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 400 - 5);
  EXPECT_EQ(StoredHolds("graveyard2"), 0u);
  EXPECT_EQ(dlock_lock_fencing_token(l), 10000000000000000251ull);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_LE(longest.load(), 4096u);
  EXPECT_GE(cleanups.load(), 2 + 2 + 2) << "250 expired holds take 2 cleanups and a write, twice (+2 releases)";
}

TEST_F(DynamoKindsTest, OneItemHoldsAtMost900HoldersAndThatManyFit) {
  // 899 holds of the largest size (a 256-byte label, 20-digit numbers) written straight into
  // the item, never expiring: the library's own 900th fits in the item, the 901st is refused.
  const std::string label(256, 'x');
  PutHolds(ddb_, "crowded", 899, 0, label, 0);
  Client client(url());
  Options shared;
  Shared(&shared);
  shared.owner(label.c_str()).lease(10ull * 366 * 24 * 3600 * 1000);  // the longest lease
  dlock_lock *l, *over = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "crowded", shared.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_lock_fencing_token(l), 10000000000000000900ull);
  EXPECT_EQ(StoredHolds("crowded"), 900u);
  EXPECT_EQ(dlock_acquire(client.get(), "crowded", shared.get(), &over), DLOCK_EINVAL);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find("900"), std::string::npos) << error;
  EXPECT_NE(error.find("400 KB"), std::string::npos) << error;
  EXPECT_EQ(over, nullptr);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

}  // namespace
}  // namespace dlock_test
