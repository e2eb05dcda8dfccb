// Shared holds and semaphores on DynamoDB, against a real dynalite: the map of holds in the
// lock's one item, the writer's announcement, takeover of a vanished holder's hold on the
// waiter's clock, tokens from one counter for every kind, and the holder limit of one item.
// (What every backend does with kinds is in conformance/kinds_test.cc.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
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

TEST_F(DynamoKindsTest, AVanishedPermitIsTakenOverAfterItsLeaseAndLiveOnesAreRenewed) {
  Client gone(url()), alive(url()), waiter(url());
  Options vanishing, renewed, patient;
  Permits(&vanishing, 2);
  Permits(&renewed, 2);
  Permits(&patient, 2);
  vanishing.lease(1500).heartbeat(0);
  renewed.lease(1000).heartbeat(100);  // kept by heartbeats (one may come 900 ms late)
  patient.wait(5000).retry(20, 100);
  dlock_lock *g, *a, *w;
  ASSERT_EQ(dlock_acquire(gone.get(), "permits", vanishing.get(), &g), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(alive.get(), "permits", renewed.get(), &a), DLOCK_OK) << dlock_last_error();
  auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(waiter.get(), "permits", patient.get(), &w), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 1500 - 5);
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
  shared.lease(900).heartbeat(100);  // a renewal may come 800 ms late on a busy machine
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

// The permits an item's holds take, as stored (each entry's `take`, absent = 1).
uint64_t StoredTakes(const nlohmann::json& item) {
  uint64_t sum = 0;
  if (!item.contains("holds")) return 0;
  for (const nlohmann::json& entry : item["holds"]["M"]) {
    sum += entry["M"].contains("take") ? std::stoull(entry["M"]["take"]["N"].get<std::string>()) : 1;
  }
  return sum;
}

// A permit hold that took k > 1 stores k as `take` in its entry (a hold of one stores none);
// renewals leave it alone; a waiter counts each entry's take against n, a foreign one's too.
TEST_F(DynamoKindsTest, AHoldsTakeIsStoredInItsEntryAndCountedAgainstThePermits) {
  Client a(url()), b(url()), c(url());
  Options three, one, two;
  three.permits(5).take(3).owner("three").lease(900).heartbeat(100);
  one.permits(5).owner("one");
  two.permits(5).take(2);
  dlock_lock *l3, *l1, *l2 = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "weights", three.get(), &l3), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "weights", one.get(), &l1), DLOCK_OK) << dlock_last_error();
  auto check_entries = [&] {
    nlohmann::json holds = Item("weights")["holds"]["M"];
    ASSERT_EQ(holds.size(), 2u);
    for (auto it = holds.begin(); it != holds.end(); ++it) {
      const std::string& owner = it.key();
      const nlohmann::json& entry = it.value();
      if (owner.size() > 6 && owner.substr(owner.size() - 6) == "|three") {
        ASSERT_TRUE(entry["M"].contains("take")) << entry.dump();
        EXPECT_EQ(entry["M"]["take"]["N"], "3");
      } else {
        EXPECT_FALSE(entry["M"].contains("take")) << "a hold of one permit stores none: " << entry.dump();
      }
    }
  };
  check_entries();
  EXPECT_EQ(N(Item("weights"), "permits"), 5u);
  EXPECT_EQ(dlock_acquire(c.get(), "weights", two.get(), &l2), DLOCK_NOT_ACQUIRED) << "3 + 1 + 2 of 5";
  ASSERT_EQ(dlock_extend(l3, 20000), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(300ms);  // a few heartbeats
  check_entries();
  EXPECT_EQ(dlock_acquire(c.get(), "weights", two.get(), &l2), DLOCK_NOT_ACQUIRED);
  ASSERT_EQ(dlock_release(l3), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "weights", two.get(), &l2), DLOCK_OK) << "1 + 2 of 5: " << dlock_last_error();
  EXPECT_EQ(StoredTakes(Item("weights")), 3u);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);

  // A hold written by another client (a crashed one: lease 0, never expires) with take 2, in a
  // semaphore of 3: room for one permit, not two.
  nlohmann::json item = {
      {"id", {{"S", "dlock:foreign-take"}}},
      {"fence", {{"N", "1000"}}},
      {"permits", {{"N", "3"}}},
      {"holds",
       {{"M",
         {{"0123456789abcdef0123456789abcdef|gone",
           {{"M",
             {{"recordVersion", {{"S", "v1"}}},
              {"leaseMs", {{"N", "0"}}},
              {"renewedAtMs", {{"N", "1"}}},
              {"token", {{"N", "1000"}}},
              {"take", {{"N", "2"}}}}}}}}}}}};
  RawResponse put = ddb_.Call("PutItem", nlohmann::json({{"TableName", "locks"}, {"Item", item}}).dump());
  ASSERT_EQ(put.status, 200) << put.body;
  Options pair, single;
  pair.permits(3).take(2);
  single.permits(3);
  dlock_lock *p = nullptr, *s1, *s2 = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), "foreign-take", pair.get(), &p), DLOCK_NOT_ACQUIRED) << "2 + 2 of 3";
  ASSERT_EQ(dlock_acquire(c.get(), "foreign-take", single.get(), &s1), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_lock_fencing_token(s1), 1001u);
  EXPECT_EQ(dlock_acquire(c.get(), "foreign-take", single.get(), &s2), DLOCK_NOT_ACQUIRED) << "2 + 1 + 1 of 3";
  EXPECT_EQ(StoredTakes(Item("foreign-take")), 3u);
  EXPECT_EQ(dlock_release(s1), DLOCK_OK);
}

// Two acquires that both saw room for their take on the item as read cannot both land: the
// write is conditional on the fence read, which the other's acquisition changed. Of a
// semaphore of 4 with 1 permit taken, A and B (2 each) both judge 1 + 2 <= 4; B lands first,
// A's write is refused, and A, judging again (1 + 2 + 2 > 4), is not admitted.
TEST_F(DynamoKindsTest, TwoAcquiresThatBothSawRoomForTheirTakeCannotBothLand) {
  Client first(url()), b(url());
  Options one, two;
  one.permits(4).lease(10000);
  two.permits(4).take(2).lease(10000);
  dlock_lock *l1, *lb = nullptr, *la = nullptr;
  ASSERT_EQ(dlock_acquire(first.get(), "race", one.get(), &l1), DLOCK_OK) << dlock_last_error();
  std::mutex mu;
  int updates = 0;
  dlock_status b_status = DLOCK_EIO;
  std::string a_write, a_refusal;
  const uint64_t fence = N(Item("race"), "fence");
  FakeHttpServer proxy([&](const FakeRequest& r) {
    auto target = r.headers.find("x-amz-target");
    const bool update = target != r.headers.end() && target->second.find(".UpdateItem") != std::string::npos;
    std::lock_guard<std::mutex> lock(mu);
    if (update && ++updates == 2) {
      // A's write judged from the item it read (its first one guessed a free item): B, which
      // saw the same item, lands first.
      b_status = dlock_acquire(b.get(), "race", two.get(), &lb);
      a_write = r.body;
      FakeResponse answer = ForwardTo(ddb_.endpoint(), r);
      a_refusal = answer.body;
      return answer;
    }
    return ForwardTo(ddb_.endpoint(), r);
  });
  Client a("dynamodb://locks?region=us-east-1&endpoint=" + proxy.url());
  EXPECT_EQ(dlock_acquire(a.get(), "race", two.get(), &la), DLOCK_NOT_ACQUIRED) << dlock_last_error();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(b_status, DLOCK_OK) << "B saw 1 of 4 taken";
  // The write held back was A's hold of 2, conditional on the fence A read.
  nlohmann::json write = nlohmann::json::parse(a_write, nullptr, false);
  ASSERT_TRUE(write.is_object()) << a_write;
  bool fence_value = false, take_value = false;
  for (const nlohmann::json& value : write["ExpressionAttributeValues"]) {
    if (value == nlohmann::json({{"N", std::to_string(fence)}})) fence_value = true;
    if (value.contains("M") && value["M"].contains("take")) take_value = value["M"]["take"]["N"] == "2";
  }
  EXPECT_TRUE(fence_value && take_value) << a_write;
  EXPECT_NE(a_refusal.find("ConditionalCheckFailed"), std::string::npos) << a_refusal;
  EXPECT_EQ(StoredTakes(Item("race")), 3u);
  EXPECT_EQ(Item("race")["holds"]["M"].size(), 2u);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
  EXPECT_EQ(dlock_release(lb), DLOCK_OK);
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
