// redis-cluster:// against a real 3-master + 3-replica cluster: what only a cluster can show.
// Everything else (holding, waiting, losing, fencing, bad input, event loops) runs against
// the cluster in the conformance suite; failovers in failover_test.cc.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <future>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_cluster.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


std::vector<int> Masters(RedisCluster& cluster) {
  std::vector<int> out;
  for (int i = 0; i < RedisCluster::kNodes; ++i) {
    if (cluster.node(i).running() && cluster.node(i).Cli({"ROLE"}).rfind("master", 0) == 0) {
      out.push_back(i);
    }
  }
  return out;
}

// One cluster for the tests that leave it whole.
class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new RedisCluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ready()); }
  static std::string url(const std::string& query = "") {
    return "redis-cluster://" + cluster_->seeds() + (query.empty() ? "" : "?" + query);
  }
  static RedisCluster* cluster_;
};
RedisCluster* ClusterTest::cluster_ = nullptr;

TEST_F(ClusterTest, LocksSpreadOverEveryMasterWithoutARedirectOnceTheMapIsLoaded) {
  for (int i = 0; i < RedisCluster::kNodes; ++i) cluster_->node(i).Cli({"CONFIG", "RESETSTAT"});
  Client client(url());
  std::vector<dlock_lock*> held;
  for (int i = 0; i < 100; ++i) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client.get(), ("spread-" + std::to_string(i)).c_str(), nullptr, &l), DLOCK_OK)
        << dlock_last_error();
    held.push_back(l);
  }
  for (dlock_lock* l : held) EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  for (int i = 0; i < RedisCluster::kNodes; ++i) {
    EXPECT_EQ(ErrorCount(cluster_->node(i), "MOVED"), 0) << cluster_->node(i).address();
    EXPECT_EQ(ErrorCount(cluster_->node(i), "ASK"), 0) << cluster_->node(i).address();
  }
  // Where they went: each name's fence counter stays on the master serving its slot.
  std::map<int, int> per_master;
  for (int i = 0; i < 100; ++i) {
    const std::string fence = Key("spread-" + std::to_string(i)) + ":fence";
    const int master = cluster_->MasterOf(fence);
    ASSERT_GE(master, 0);
    EXPECT_EQ(cluster_->node(master).Cli({"EXISTS", fence}), "1") << fence;
    ++per_master[master];
  }
  EXPECT_EQ(per_master.size(), 3u) << "100 names should land on all three masters";
}

TEST_F(ClusterTest, HeartbeatsRenewLocksOnEveryMaster) {
  Client client(url());
  Options short_lease;
  short_lease.lease(1000).heartbeat(100);  // a renewal may come 900 ms late on a busy machine
  std::vector<dlock_lock*> held;
  for (int i = 0; i < 30; ++i) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client.get(), ("renewed-" + std::to_string(i)).c_str(), short_lease.get(), &l),
              DLOCK_OK)
        << dlock_last_error();
    held.push_back(l);
  }
  std::this_thread::sleep_for(2500ms);  // two and a half leases
  for (int i = 0; i < 30; ++i) {
    const std::string name = "renewed-" + std::to_string(i);
    EXPECT_EQ(dlock_lock_is_valid(held[i]), 1) << name;
    EXPECT_EQ(cluster_->node(cluster_->MasterOf(Key(name))).Cli({"EXISTS", Key(name)}), "1") << name;
    EXPECT_EQ(dlock_release(held[i]), DLOCK_OK) << dlock_last_error();
  }
}

TEST_F(ClusterTest, SeedsThatDoNotAnswerAreSkippedAndNamedWhenNoneDoes) {
  // Port 1 on loopback: nothing listens there.
  Client client("redis-cluster://127.0.0.1:1," + cluster_->seeds());
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "seeded", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);

  dlock_client* none = nullptr;
  EXPECT_EQ(dlock_client_open("redis-cluster://127.0.0.1:1,127.0.0.1:2?connect_timeout_ms=500", &none),
            DLOCK_EIO);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("127.0.0.1:1"), std::string::npos) << error;
  EXPECT_NE(error.find("127.0.0.1:2"), std::string::npos) << error;
}

TEST_F(ClusterTest, AServerThatIsNotAClusterIsAClearError) {
  RedisServer plain;
  ASSERT_TRUE(plain.running());
  dlock_client* c = nullptr;
  EXPECT_NE(dlock_client_open(("redis-cluster://" + plain.address()).c_str(), &c), DLOCK_OK);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("cluster support disabled"), std::string::npos) << error;
  EXPECT_NE(error.find(plain.address()), std::string::npos) << error;
}

TEST_F(ClusterTest, ANameWhoseHashTagWouldBeEmptyIsRefused) {
  Client client(url());
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "}x", nullptr, &l), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("hash slot"), std::string::npos) << dlock_last_error();
  // A '}' elsewhere leaves a tag, so one slot: fine.
  ASSERT_EQ(dlock_acquire(client.get(), "x}y", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// wait_replicas=N: a grant counts once N replicas have it; with fewer it fails, saying so, and
// the lock is given back. Each master here has one replica.
TEST_F(ClusterTest, WaitReplicasConfirmsTheGrantOrFailsAndGivesItBack) {
  Client durable(url("wait_replicas=1"));
  Options o;
  o.wait(0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(durable.get(), "durable", o.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);

  Client too_many(url("wait_replicas=2&timeout_ms=400"));
  Client observer(url());
  for (bool async : {false, true}) {
    const std::string name = async ? "undurable-async" : "undurable";
    dlock_status s;
    std::string error;
    if (!async) {
      s = dlock_acquire(too_many.get(), name.c_str(), o.get(), &l);
      error = dlock_last_error();
    } else {
      struct Result {
        std::atomic<bool> done{false};
        dlock_status status = DLOCK_EINTERNAL;
        std::string error;
      } result;
      ASSERT_EQ(dlock_acquire_async(too_many.get(), name.c_str(), o.get(),
                                    [](dlock_status st, dlock_lock*, void* arg) {
                                      auto* r = static_cast<Result*>(arg);
                                      r->status = st;
                                      r->error = dlock_last_error();  // the callback thread's
                                      r->done = true;
                                    },
                                    &result),
                DLOCK_OK);
      ASSERT_TRUE(WaitFor([&] { return result.done.load(); }, 20000ms));
      s = result.status;
      error = result.error;
    }
    EXPECT_EQ(s, DLOCK_EBACKEND) << name;
    EXPECT_NE(error.find("only 1 of 2 replicas acknowledged"), std::string::npos) << error;
    // Given back: another client takes it.
    EXPECT_TRUE(WaitFor([&] {
      dlock_lock* other = nullptr;
      if (dlock_acquire(observer.get(), name.c_str(), o.get(), &other) != DLOCK_OK) return false;
      dlock_release(other);
      return true;
    }, 10000ms)) << name << " was left held";
  }
}

// Threads take turns on a few names of one slot while the slot moves to another master, key by
// key (MIGRATING/IMPORTING + MIGRATE): calls meet ASK and TRYAGAIN, and lose nothing.
TEST_F(ClusterTest, ASlotMigratedWhileLockingLosesNothing) {
  // Names "{mig}0".."{mig}2": keys dlock:{{mig}N}, whose hash tag is "{mig": one slot.
  const int slot = std::stoi(cluster_->node(0).Cli({"CLUSTER", "KEYSLOT", Key("{mig}0")}));
  const int from = cluster_->MasterOf(Key("{mig}0"));
  ASSERT_GE(from, 0);
  int to = -1;
  for (int m : Masters(*cluster_)) {
    if (m != from) to = m;
  }
  ASSERT_GE(to, 0);
  for (int i = 0; i < RedisCluster::kNodes; ++i) cluster_->node(i).Cli({"CONFIG", "RESETSTAT"});

  // A call that meets the open slot is retried (TRYAGAIN) until the slot is closed or its
  // timeout_ms ran out: 20 s, so that the test may wait for what it needs to see.
  Client client(url("timeout_ms=20000"));
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, uint64_t> last_token;
  std::map<std::string, long> counter;
  std::atomic<long> done{0}, failures{0};
  std::string first_failure;
  auto work = [&](int t) {
    Options o;
    o.lease(5000).wait(5000).retry(5, 20);
    for (long i = 0; !stop; ++i) {
      const std::string name = "{mig}" + std::to_string((t + i) % 3);
      dlock_lock* l = nullptr;
      dlock_status s = dlock_acquire(client.get(), name.c_str(), o.get(), &l);
      if (s != DLOCK_OK) {
        std::lock_guard<std::mutex> lock(mu);
        if (failures++ == 0) first_failure = std::string(dlock_status_str(s)) + ": " + dlock_last_error();
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_GT(dlock_lock_fencing_token(l), last_token[name]) << name;
        last_token[name] = dlock_lock_fencing_token(l);
        ++counter[name];
      }
      s = dlock_release(l);
      if (s != DLOCK_OK) {
        std::lock_guard<std::mutex> lock(mu);
        if (failures++ == 0) first_failure = std::string(dlock_status_str(s)) + ": " + dlock_last_error();
      }
      ++done;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(work, t);
  // Every name taken once: its keys (the fence counters at least) are in the slot to move.
  EXPECT_TRUE(WaitFor([&] { return done.load() >= 3; }, 20000ms)) << "the threads never ran";

  RedisServer& a = cluster_->node(from);
  RedisServer& b = cluster_->node(to);
  const std::string a_id = cluster_->NodeId(from), b_id = cluster_->NodeId(to);
  const std::string s = std::to_string(slot);
  EXPECT_EQ(b.Cli({"CLUSTER", "SETSLOT", s, "IMPORTING", a_id}), "OK");
  EXPECT_EQ(a.Cli({"CLUSTER", "SETSLOT", s, "MIGRATING", b_id}), "OK");
  const std::string b_port = b.address().substr(b.address().rfind(':') + 1);
  int moved_keys = 0;
  for (int round = 0; round < 200; ++round) {
    std::string keys = a.Cli({"CLUSTER", "GETKEYSINSLOT", s, "1"});
    if (keys.empty()) break;
    // One key at a time, with locking going on in between.
    std::string answer = a.Cli({"MIGRATE", "127.0.0.1", b_port, keys, "0", "5000", "REPLACE"});
    if (answer == "OK" && ++moved_keys == 1) {
      // The migration is met: the next call on the moved key's name finds it gone from the old
      // master, which sends it on (ASK) or refuses it (TRYAGAIN). (Each call may take 20 s:
      // timeout_ms above.)
      EXPECT_TRUE(WaitFor([&] { return ErrorCount(a, "ASK") + ErrorCount(a, "TRYAGAIN") > 0; }, 15000ms))
          << "no call met the slot while it moved";
    }
    std::this_thread::sleep_for(100ms);
  }
  for (int m : Masters(*cluster_)) {
    EXPECT_EQ(cluster_->node(m).Cli({"CLUSTER", "SETSLOT", s, "NODE", b_id}), "OK");
  }
  // A few cycles on the new master, and more than 20 in all.
  const long switched = done.load();
  EXPECT_TRUE(WaitFor([&] { return done.load() >= std::max(switched + 3, 21L); }, 20000ms)) << "locking stopped";
  stop = true;
  for (auto& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_GT(moved_keys, 0);
  long total = 0;
  for (auto& [name, n] : counter) total += n;
  EXPECT_EQ(total, done.load());
  EXPECT_GT(done.load(), 20);
  EXPECT_EQ(cluster_->MasterOf(Key("{mig}0")), to);
  // The migration was met: the old master redirected with ASK (or refused with TRYAGAIN).
  EXPECT_GT(ErrorCount(a, "ASK") + ErrorCount(a, "TRYAGAIN"), 0);
  std::cout << "migration: " << moved_keys << " keys moved, " << done.load() << " cycles, ASK "
            << ErrorCount(a, "ASK") << ", TRYAGAIN " << ErrorCount(a, "TRYAGAIN") << ", MOVED "
            << ErrorCount(a, "MOVED") << "\n";
}

// A slot left mid-migration (MIGRATING on its master, IMPORTING on another, the lock's keys on
// neither): the old master answers ASK, the new one TRYAGAIN, until the call's time is up. The
// error then says TRYAGAIN, the reason, not the ASK met last on the way.
TEST_F(ClusterTest, ASlotStuckMidMigrationFailsSayingTryAgain) {
  const std::string name = "{stuck}0";
  const std::string s = cluster_->node(0).Cli({"CLUSTER", "KEYSLOT", Key(name)});
  const int from = cluster_->MasterOf(Key(name));
  ASSERT_GE(from, 0);
  int to = -1;
  for (int m : Masters(*cluster_)) {
    if (m != from) to = m;
  }
  ASSERT_GE(to, 0);
  RedisServer& a = cluster_->node(from);
  RedisServer& b = cluster_->node(to);
  ASSERT_EQ(b.Cli({"CLUSTER", "SETSLOT", s, "IMPORTING", cluster_->NodeId(from)}), "OK");
  ASSERT_EQ(a.Cli({"CLUSTER", "SETSLOT", s, "MIGRATING", cluster_->NodeId(to)}), "OK");

  Client client(url("connect_timeout_ms=200&timeout_ms=300"));
  Options once;
  once.wait(0);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), name.c_str(), once.get(), &l), DLOCK_EBACKEND);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find("TRYAGAIN"), std::string::npos) << error;
  EXPECT_EQ(error.find("ASK "), std::string::npos) << error;
  // The same through the async path.
  std::promise<std::pair<dlock_status, std::string>> outcome;
  ASSERT_EQ(dlock_acquire_async(client.get(), name.c_str(), once.get(),
                                [](dlock_status st, dlock_lock* lock, void* arg) {
                                  if (lock != nullptr) dlock_release(lock);
                                  static_cast<std::promise<std::pair<dlock_status, std::string>>*>(arg)
                                      ->set_value({st, dlock_last_error()});
                                },
                                &outcome),
            DLOCK_OK);
  auto [status, async_error] = outcome.get_future().get();
  EXPECT_EQ(status, DLOCK_EBACKEND);
  EXPECT_NE(async_error.find("TRYAGAIN"), std::string::npos) << async_error;

  EXPECT_EQ(a.Cli({"CLUSTER", "SETSLOT", s, "STABLE"}), "OK");
  EXPECT_EQ(b.Cli({"CLUSTER", "SETSLOT", s, "STABLE"}), "OK");
  EXPECT_EQ(a.Cli({"EXISTS", Key(name)}), "0");  // nothing was granted meanwhile
  ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

}  // namespace
}  // namespace dlock_test
