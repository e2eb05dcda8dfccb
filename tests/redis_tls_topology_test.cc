// tls=1 on redis-cluster:// and redis-sentinel:// against real TLS deployments: a 3 + 3 cluster
// whose nodes listen with TLS only and talk TLS to each other (bus, replication, MIGRATE), and
// a Sentinel group whose data nodes and sentinels do the same. Every node wants a client
// certificate, so each of the client's connections (commands, pub/sub, sentinel lookups and
// +switch-master subscriptions) must present the one from the URL.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_cluster.h"
#include "support/redis_sentinel.h"
#include "support/redis_server.h"
#include "support/tls_certs.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Bounds of the error cases: connect_timeout_ms + timeout_ms = 1.6 s per node tried, with slack
// for busy cores.
constexpr const char* kTimeouts = "connect_timeout_ms=800&timeout_ms=800";
// A waiter woken by a release, not by its retry timer (set to 5 s).
constexpr int64_t kHandoffBoundMs = 10000;


int64_t MsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

// tls=1 with the run's CA and the client certificate every node asks for.
std::string TlsQuery(const TestCertificates& certs) {
  return "tls=1&ca=" + certs.ca_cert() + "&cert=" + certs.client_cert() +
         "&key=" + certs.client_key();
}

// Opens url as a user would; the status, with the error and how long it took.
dlock_status Open(const std::string& url, std::string* error, Clock::duration* took) {
  dlock_client* c = nullptr;
  const auto start = Clock::now();
  dlock_status s = dlock_client_open(url.c_str(), &c);
  *took = Clock::now() - start;
  *error = s == DLOCK_OK ? "" : dlock_last_error();
  dlock_client_close(c);
  return s;
}

// The owner label in a holder key's value ("<random token>|<label>", as GET on the node that
// serves it answers); a description of the value when it has none.
std::string HolderLabel(const std::string& value) {
  const size_t bar = value.rfind('|');
  return bar == std::string::npos ? "(no label in '" + value + "')" : value.substr(bar + 1);
}

// Takes `name` for the label "tls-holder" with a minute's lease; null after a failure.
dlock_lock* Hold(dlock_client* client, const std::string& name) {
  Options o;
  o.owner("tls-holder").lease(60000);
  dlock_lock* l = nullptr;
  const dlock_status s = dlock_acquire(client, name.c_str(), o.get(), &l);
  if (s != DLOCK_OK) {
    ADD_FAILURE() << name << ": " << dlock_status_str(s) << ": " << dlock_last_error();
    return nullptr;
  }
  return l;
}

// A waiter (through waiter_client) queues on `name` while `held` is held, then the holder
// releases, once in_line() (the line on the master serving `name`) shows the waiter: the waiter
// must have the lock within kHandoffBoundMs of the release (its retries are 20 s apart, so only
// the release's message can wake it that soon), with a higher token. How long it took, -1 when
// it did not get the lock.
int64_t ExpectHandOff(dlock_lock* held, dlock_client* waiter_client, const std::string& name,
                      const std::function<int()>& in_line) {
  const uint64_t held_token = dlock_lock_fencing_token(held);
  std::atomic<bool> acquired{false};
  Clock::time_point got_it;
  uint64_t token = 0;
  std::string error;
  std::thread waiter([&] {
    Options o;
    o.owner("waiter").wait(30000).retry(20000, 20000);
    dlock_lock* l = nullptr;
    dlock_status s = dlock_acquire(waiter_client, name.c_str(), o.get(), &l);
    if (s != DLOCK_OK) {
      error = std::string(dlock_status_str(s)) + ": " + dlock_last_error();
      return;
    }
    got_it = Clock::now();
    token = dlock_lock_fencing_token(l);
    acquired = true;
    dlock_release(l);
  });
  // The waiter tried once, was refused, and took its place in line.
  EXPECT_TRUE(WaitFor([&] { return in_line() == 1; }, 20000ms))
      << name << ": the waiter never took its place in line (" << in_line() << ")";
  const auto released = Clock::now();
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << name << ": " << dlock_last_error();
  waiter.join();
  if (!acquired) {
    ADD_FAILURE() << name << ": the waiter did not get the lock: " << error;
    return -1;
  }
  const int64_t handoff = MsBetween(released, got_it);
  EXPECT_LT(handoff, kHandoffBoundMs) << name << ": woken by the retry timer, not the release";
  EXPECT_GT(token, held_token) << name;
  return handoff;
}

// How many fair waiters stand in line for `name` on `node`; -1 when the node answers otherwise.
int LineLength(const RedisServer& node, const std::string& name) {
  const std::string n = node.Cli({"ZCARD", Key(name) + ":line"});
  return n.empty() || n.find_first_not_of("0123456789") != std::string::npos ? -1 : std::stoi(n);
}

// The options of a Deployment (RedisCluster, RedisSentinelGroup) for TLS everywhere with certs,
// every node wanting a client certificate.
template <typename Deployment>
typename Deployment::Options TlsOptions(const TestCertificates* certs) {
  typename Deployment::Options options;
  options.tls = RedisTls{.certs = certs, .require_client_cert = true};
  return options;
}

// A suite's certificates and the TLS Deployment made with them, shared by its tests.
template <typename Deployment>
class TlsSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TestCertificates();
    const auto start = Clock::now();
    deployment_ = new Deployment(TlsOptions<Deployment>(certs_));
    std::cout << ::testing::UnitTest::GetInstance()->current_test_suite()->name() << ": ready in "
              << MsBetween(start, Clock::now()) << " ms\n";
  }
  static void TearDownTestSuite() {
    delete deployment_;
    deployment_ = nullptr;
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok());
    ASSERT_TRUE(deployment_->ready());
  }

  static inline TestCertificates* certs_ = nullptr;
  static inline Deployment* deployment_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// A TLS cluster.

class TlsClusterTest : public TlsSuite<RedisCluster> {
 protected:
  static std::string url(const std::string& query = "") {
    return "redis-cluster://" + deployment_->seeds() + "?" + TlsQuery(*certs_) +
           (query.empty() ? "" : "&" + query);
  }
  // The masters now, by node index.
  static std::vector<int> Masters() {
    std::vector<int> out;
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      if (deployment_->node(i).Cli({"ROLE"}).rfind("master\n", 0) == 0) out.push_back(i);
    }
    return out;
  }
  // One name served by each master: {master, name}.
  static std::map<int, std::string> OneNamePerMaster(const std::string& prefix) {
    std::map<int, std::string> out;
    for (int i = 0; out.size() < RedisCluster::kMasters && i < 1000; ++i) {
      const std::string name = prefix + std::to_string(i);
      out.emplace(deployment_->MasterOf(Key(name)), name);
    }
    out.erase(-1);
    return out;
  }
};

// CLUSTER SLOTS over TLS names the TLS ports: the client follows the map to every master, and
// each lock stands on the master of its slot, with its holder's label.
TEST_F(TlsClusterTest, LocksSpreadOverEveryMasterWithTheirHoldersLabel) {
  Client client(url());
  ASSERT_NE(client.get(), nullptr);
  Options o;
  o.owner("tls-holder");
  std::vector<dlock_lock*> held;
  std::map<int, int> per_master;
  for (int i = 0; i < 30; ++i) {
    const std::string name = "tls-spread-" + std::to_string(i);
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), o.get(), &l), DLOCK_OK)
        << dlock_last_error();
    held.push_back(l);
    const int master = deployment_->MasterOf(Key(name));
    ASSERT_GE(master, 0) << name;
    EXPECT_EQ(HolderLabel(deployment_->node(master).Cli({"GET", Key(name)})), "tls-holder") << name;
    ++per_master[master];
  }
  EXPECT_EQ(per_master.size(), 3u) << "30 names should land on all three masters";
  std::map<std::string, uint64_t> tokens;
  for (int i = 0; i < 30; ++i) {
    tokens["tls-spread-" + std::to_string(i)] = dlock_lock_fencing_token(held[i]);
    EXPECT_EQ(dlock_release(held[i]), DLOCK_OK) << dlock_last_error();
  }
  // Released on every master; taken again, each with a higher token.
  for (const auto& [name, token] : tokens) {
    EXPECT_EQ(deployment_->node(deployment_->MasterOf(Key(name))).Cli({"EXISTS", Key(name)}), "0");
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), nullptr, &l), DLOCK_OK)
        << dlock_last_error();
    EXPECT_GT(dlock_lock_fencing_token(l), token) << name;
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  }
}

// Sharded pub/sub over TLS on each master: a waiter is woken by the release, not by its retry.
TEST_F(TlsClusterTest, AWaiterIsWokenByAReleaseOnEveryMaster) {
  Client holder(url()), waiter(url());
  const std::map<int, std::string> names = OneNamePerMaster("tls-woken-");
  ASSERT_EQ(names.size(), 3u);
  for (const auto& [master, name] : names) {
    dlock_lock* held = Hold(holder.get(), name);
    ASSERT_NE(held, nullptr);
    const int node = master;
    const std::string waited = name;
    const int64_t handoff = ExpectHandOff(held, waiter.get(), name, [&] {
      return LineLength(deployment_->node(node), waited);
    });
    std::cout << "TLS cluster, master " << deployment_->node(master).address() << ": handoff in "
              << handoff << " ms\n";
  }
}

// Heartbeats over TLS renew locks on every master past several leases.
TEST_F(TlsClusterTest, HeartbeatsKeepLocksPastTheirLease) {
  Client client(url()), other(url());
  const std::map<int, std::string> names = OneNamePerMaster("tls-renewed-");
  ASSERT_EQ(names.size(), 3u);
  Options short_lease;
  short_lease.lease(1000).heartbeat(100);  // a renewal may come 900 ms late on a busy machine
  std::map<std::string, dlock_lock*> held;
  for (const auto& [master, name] : names) {
    ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), short_lease.get(), &held[name]), DLOCK_OK)
        << dlock_last_error();
  }
  std::this_thread::sleep_for(2500ms);  // two and a half leases
  Options once;
  once.wait(0);
  for (const auto& [master, name] : names) {
    EXPECT_EQ(dlock_lock_is_valid(held[name]), 1) << name;
    const std::string pttl = deployment_->node(master).Cli({"PTTL", Key(name)});
    EXPECT_GT(atol(pttl.c_str()), 0) << name << " on " << deployment_->node(master).address();
    dlock_lock* l = nullptr;
    EXPECT_EQ(dlock_acquire(other.get(), name.c_str(), once.get(), &l), DLOCK_NOT_ACQUIRED) << name;
    EXPECT_EQ(dlock_release(held[name]), DLOCK_OK) << dlock_last_error();
  }
}

// A slot moves to another master (MIGRATING/IMPORTING, MIGRATE over TLS): the old master
// answers ASK with the new one's TLS port, and the client follows it (ASKING over TLS). A held
// lock whose keys moved is renewed there; a new lock, which Redis will not create on either
// side while the slot is open (TRYAGAIN: its two keys are missing), is granted once the slot is
// the new master's, within the call's budget.
TEST_F(TlsClusterTest, ASlotMigrationIsFollowedThroughAskAndTryAgain) {
  // Names "{tlsmig}...": keys dlock:{{tlsmig}...}, whose hash tag is "{tlsmig": one slot.
  const std::string moved_name = "{tlsmig}held", new_name = "{tlsmig}new";
  const std::string slot = deployment_->node(0).Cli({"CLUSTER", "KEYSLOT", Key(moved_name)});
  const int from = deployment_->MasterOf(Key(moved_name));
  ASSERT_GE(from, 0);
  int to = -1;
  for (int m : Masters()) {
    if (m != from) to = m;
  }
  ASSERT_GE(to, 0);
  RedisServer& a = deployment_->node(from);
  RedisServer& b = deployment_->node(to);
  a.Cli({"CONFIG", "RESETSTAT"});
  b.Cli({"CONFIG", "RESETSTAT"});

  Client client(url());
  dlock_lock* held = Hold(client.get(), moved_name);
  ASSERT_NE(held, nullptr);
  const uint64_t held_token = dlock_lock_fencing_token(held);

  const std::string a_id = deployment_->NodeId(from), b_id = deployment_->NodeId(to);
  ASSERT_EQ(b.Cli({"CLUSTER", "SETSLOT", slot, "IMPORTING", a_id}), "OK");
  ASSERT_EQ(a.Cli({"CLUSTER", "SETSLOT", slot, "MIGRATING", b_id}), "OK");
  // The held lock's keys move: the old master connects to the new one's TLS port (tls-cluster).
  ASSERT_EQ(a.Cli({"MIGRATE", "127.0.0.1", std::to_string(b.port()), "", "0", "5000", "KEYS",
                   Key(moved_name), Key(moved_name) + ":fence"}),
            "OK");
  EXPECT_EQ(dlock_extend(held, 60000), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ErrorCount(a, "ASK"), 1) << "the old master did not redirect the extend";

  std::atomic<bool> acquired{false};
  dlock_lock* fresh = nullptr;
  std::string error;
  // Its call is retried (TRYAGAIN) while the slot is open, for up to its timeout_ms: 20 s, so
  // that the test may wait for the refusal it needs to see.
  Client patient(url("timeout_ms=20000"));
  std::thread acquirer([&] {
    Options o;
    o.owner("tls-holder");
    dlock_status s = dlock_acquire(patient.get(), new_name.c_str(), o.get(), &fresh);
    if (s == DLOCK_OK) {
      acquired = true;
    } else {
      error = std::string(dlock_status_str(s)) + ": " + dlock_last_error();
    }
  });
  // The acquire has been sent on (ASK) and refused by the new master (TRYAGAIN).
  EXPECT_TRUE(WaitFor([&] { return ErrorCount(b, "TRYAGAIN") > 0; }, 15000ms));
  EXPECT_FALSE(acquired.load()) << "granted while the slot was open";
  for (int m : Masters()) {
    EXPECT_EQ(deployment_->node(m).Cli({"CLUSTER", "SETSLOT", slot, "NODE", b_id}), "OK");
  }
  acquirer.join();
  ASSERT_TRUE(acquired.load()) << error;

  EXPECT_EQ(deployment_->MasterOf(Key(moved_name)), to);
  EXPECT_EQ(HolderLabel(b.Cli({"GET", Key(moved_name)})), "tls-holder");
  EXPECT_EQ(HolderLabel(b.Cli({"GET", Key(new_name)})), "tls-holder");
  EXPECT_GT(atol(b.Cli({"PTTL", Key(moved_name)}).c_str()), 55000) << "the extend did not reach it";
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(fresh), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(b.Cli({"EXISTS", Key(moved_name), Key(new_name)}), "0");
  // The fence counter moved with the lock: tokens keep rising on the new master.
  dlock_lock* again = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), moved_name.c_str(), nullptr, &again), DLOCK_OK)
      << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(again), held_token);
  EXPECT_EQ(dlock_release(again), DLOCK_OK);
  std::cout << "TLS slot migration: ASK " << ErrorCount(a, "ASK") << ", TRYAGAIN "
            << ErrorCount(b, "TRYAGAIN") << "\n";
}

TEST_F(TlsClusterTest, APlainClientIsToldToUseTls) {
  std::string error;
  Clock::duration took;
  EXPECT_EQ(Open("redis-cluster://" + deployment_->seeds() + "?" + kTimeouts, &error, &took),
            DLOCK_EIO);
  EXPECT_NE(error.find("rediss:// or tls=1"), std::string::npos) << error;
  EXPECT_NE(error.find(deployment_->node(0).address()), std::string::npos) << error;
  // Every seed is tried; each refuses at once.
  EXPECT_LT(took, RedisCluster::kNodes * 1600ms + 2s);
  std::cout << "plain client at the TLS cluster: refused in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
}

TEST_F(TlsClusterTest, AClientWithoutTheCertificateTheNodesWantIsToldSo) {
  std::string error;
  Clock::duration took;
  const dlock_status s = Open("redis-cluster://" + deployment_->seeds() + "?" + kTimeouts +
                                  "&tls=1&ca=" + certs_->ca_cert(),
                              &error, &took);
  EXPECT_TRUE(s == DLOCK_EAUTH || s == DLOCK_EIO) << dlock_status_str(s);
  EXPECT_NE(error.find("client certificate"), std::string::npos) << error;
  EXPECT_LT(took, RedisCluster::kNodes * 1600ms + 2s);
}

// ---------------------------------------------------------------------------------------------
// A TLS Sentinel group.

std::string SentinelUrl(const RedisSentinelGroup& group, const TestCertificates& certs,
                        const std::string& query = "") {
  return "redis-sentinel://" + group.sentinels() + "/" + group.master_name() + "?" +
         TlsQuery(certs) + (query.empty() ? "" : "&" + query);
}

class TlsSentinelTest : public TlsSuite<RedisSentinelGroup> {
 protected:
  static std::string url() { return SentinelUrl(*deployment_, *certs_); }
};

TEST_F(TlsSentinelTest, TheMasterIsFoundAndHoldsTheLock) {
  Client client(url());
  ASSERT_NE(client.get(), nullptr);
  Options o;
  o.owner("tls-holder");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "tls-found", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const int master = deployment_->CurrentMaster();
  ASSERT_GE(master, 0);
  EXPECT_EQ(HolderLabel(deployment_->data_node(master).Cli({"GET", Key("tls-found")})),
            "tls-holder");
  const uint64_t token = dlock_lock_fencing_token(l);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(deployment_->data_node(master).Cli({"EXISTS", Key("tls-found")}), "0");
  ASSERT_EQ(dlock_acquire(client.get(), "tls-found", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(l), token);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(TlsSentinelTest, AWaiterIsWokenByARelease) {
  Client holder(url()), waiter(url());
  dlock_lock* held = Hold(holder.get(), "tls-woken");
  ASSERT_NE(held, nullptr);
  std::cout << "TLS sentinel: handoff in "
            << ExpectHandOff(held, waiter.get(), "tls-woken", [&] {
                 const int master = deployment_->CurrentMaster();
                 return master < 0 ? -1 : LineLength(deployment_->data_node(master), "tls-woken");
               })
            << " ms\n";
}

TEST_F(TlsSentinelTest, APlainClientIsToldToUseTls) {
  std::string error;
  Clock::duration took;
  EXPECT_EQ(Open("redis-sentinel://" + deployment_->sentinels() + "/" + deployment_->master_name() +
                     "?" + kTimeouts,
                 &error, &took),
            DLOCK_EIO);
  EXPECT_NE(error.find("rediss:// or tls=1"), std::string::npos) << error;
  EXPECT_NE(error.find(deployment_->sentinel_address(0)), std::string::npos) << error;
  EXPECT_LT(took, RedisSentinelGroup::kSentinels * 1600ms + 2s);
}

TEST_F(TlsSentinelTest, AClientWithoutTheCertificateTheSentinelsWantIsToldSo) {
  std::string error;
  Clock::duration took;
  const dlock_status s =
      Open("redis-sentinel://" + deployment_->sentinels() + "/" + deployment_->master_name() + "?" +
               kTimeouts + "&tls=1&ca=" + certs_->ca_cert(),
           &error, &took);
  EXPECT_TRUE(s == DLOCK_EAUTH || s == DLOCK_EIO) << dlock_status_str(s);
  EXPECT_NE(error.find("client certificate"), std::string::npos) << error;
  EXPECT_LT(took, RedisSentinelGroup::kSentinels * 1600ms + 2s);
}

// The master dies; the sentinels promote a replica (all over TLS). The clients follow: the
// holder's lock (granted on a replica too: wait_replicas=1) is still its own on the promoted
// replica and renewed there, the waiter's client sees it held there, a release there wakes the
// waiter, and tokens keep rising.
TEST(TlsSentinelFailoverTest, ClientsContinueOnThePromotedReplica) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisSentinelGroup group(TlsOptions<RedisSentinelGroup>(&certs));
  ASSERT_TRUE(group.ready());
  // The grant reaches a replica before the acquire returns (replication is asynchronous).
  Client holder(SentinelUrl(group, certs, "wait_replicas=1")), waiter(SentinelUrl(group, certs));
  const std::string name = "tls-failover";
  dlock_lock* held = Hold(holder.get(), name);
  ASSERT_NE(held, nullptr);
  // The waiter has talked to the old master too.
  Options once;
  once.wait(0);
  dlock_lock* refused = nullptr;
  EXPECT_EQ(dlock_acquire(waiter.get(), name.c_str(), once.get(), &refused), DLOCK_NOT_ACQUIRED);

  const int old_master = group.CurrentMaster();
  std::string why;
  const auto killed = Clock::now();
  const int promoted = group.KillMasterAndAwaitFailover(30s, &why);
  ASSERT_GE(promoted, 0) << why;
  ASSERT_NE(promoted, old_master);
  std::cout << "TLS sentinel failover: settled " << MsBetween(killed, Clock::now())
            << " ms after the kill\n";
  // The holder's calls reach the new master once its client found it (the first may fail).
  const auto since = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return dlock_extend(held, 60000) == DLOCK_OK; }, 10s))
      << dlock_last_error();
  std::cout << "TLS sentinel failover: the holder extended on the new master after "
            << MsBetween(since, Clock::now()) << " ms\n";
  EXPECT_EQ(HolderLabel(group.data_node(promoted).Cli({"GET", Key(name)})), "tls-holder");

  // The waiter's client finds the new master too (after a failed call, if it had not yet), and
  // sees the lock held there.
  ASSERT_TRUE(WaitFor(
      [&] {
        return dlock_acquire(waiter.get(), name.c_str(), once.get(), &refused) ==
               DLOCK_NOT_ACQUIRED;
      },
      10s))
      << dlock_last_error();
  const int64_t handoff = ExpectHandOff(held, waiter.get(), name, [&] {
    return LineLength(group.data_node(promoted), name);
  });
  EXPECT_EQ(group.data_node(promoted).Cli({"EXISTS", Key(name)}), "0");
  std::cout << "TLS sentinel failover: handoff on the new master in " << handoff << " ms\n";
}

}  // namespace
}  // namespace dlock_test
