// The Sentinel harness itself, and the Sentinel behaviour the redis-sentinel:// client relies on
// (redis 7.0.15): who is named master before, during and after a failover, and what is published.
#include "support/redis_sentinel.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness_util.h"
#include "support/redis_wire.h"
#include "support/tls_certs.h"

namespace {

using dlock_test::CountOf;
using dlock_test::RedisSentinelGroup;
using dlock_test::RedisSentinelOptions;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

long long MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Polls a data node until GET key answers want (replication reached it); the last answer.
std::string AwaitValue(dlock_test::RedisServer& node, const std::string& key,
                       const std::string& want, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  std::string got;
  while ((got = node.Cli({"GET", key})) != want && Clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  return got;
}

// A subscriber on one sentinel's own pub/sub, with hiredis's blocking API.
class SentinelSubscriber {
 public:
  SentinelSubscriber(int port, const std::string& password, const std::string& channel) {
    timeval tv = {2, 0};
    c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c_ || c_->err) {
      error_ = c_ ? c_->errstr : "no context";
      return;
    }
    redisSetTimeout(c_, tv);
    if (!password.empty()) {
      auto* r = static_cast<redisReply*>(redisCommand(c_, "AUTH %s", password.c_str()));
      bool ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      if (!ok) {
        error_ = "AUTH refused";
        return;
      }
    }
    auto* r = static_cast<redisReply*>(redisCommand(c_, "SUBSCRIBE %s", channel.c_str()));
    ok_ = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3;
    if (!ok_) error_ = "SUBSCRIBE failed";
    if (r) freeReplyObject(r);
  }
  ~SentinelSubscriber() {
    if (c_) redisFree(c_);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  // The payload of the next message, "" if none comes within timeout.
  std::string Next(std::chrono::milliseconds timeout) {
    if (!ok_) return "";
    timeval tv = {static_cast<time_t>(timeout.count() / 1000),
                  static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    redisSetTimeout(c_, tv);
    void* raw = nullptr;
    if (redisGetReply(c_, &raw) != REDIS_OK || !raw) {
      ok_ = false;  // a timed-out hiredis context is unusable
      return "";
    }
    auto* r = static_cast<redisReply*>(raw);
    std::string payload;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
      payload.assign(r->element[2]->str, r->element[2]->len);
    }
    freeReplyObject(r);
    return payload;
  }

 private:
  redisContext* c_ = nullptr;
  bool ok_ = false;
  std::string error_;
};

TEST(RedisSentinelTest, ComesUpWithTheMasterNamedByEverySentinel) {
  std::vector<pid_t> pids;
  {
    const auto start = Clock::now();
    RedisSentinelGroup group;
    ASSERT_TRUE(group.ready());
    RecordProperty("startup_ms", std::to_string(MsSince(start)));
    EXPECT_EQ(group.master_name(), "dlock-master");
    EXPECT_EQ(group.CurrentMaster(), 0);
    std::set<int> ports;
    for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
      EXPECT_EQ(group.MasterNamedBy(s), 0) << "sentinel " << s;
      EXPECT_EQ(group.SentinelCli(s, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.master_name()}),
                "127.0.0.1\n" + std::to_string(group.data_node(0).port()));
      std::string master = group.SentinelCli(s, {"SENTINEL", "MASTER", group.master_name()});
      EXPECT_NE(master.find("\nflags\nmaster\n"), std::string::npos) << master;
      EXPECT_NE(master.find("\nnum-slaves\n2\n"), std::string::npos) << master;
      EXPECT_NE(master.find("\nnum-other-sentinels\n2\n"), std::string::npos) << master;
      EXPECT_NE(master.find("\nquorum\n2\n"), std::string::npos) << master;
      std::string quorum = group.SentinelCli(s, {"SENTINEL", "CKQUORUM", group.master_name()});
      EXPECT_EQ(quorum.rfind("OK 3 ", 0), 0u) << quorum;
      EXPECT_NE(group.SentinelCli(s, {"INFO", "server"}).find("redis_mode:sentinel"),
                std::string::npos);
      EXPECT_TRUE(group.sentinel_running(s));
      ports.insert(group.sentinel_port(s));
      pids.push_back(group.sentinel_pid(s));
    }
    EXPECT_EQ(ports.size(), 3u);
    EXPECT_EQ(group.sentinels(), group.sentinel_address(0) + "," + group.sentinel_address(1) + "," +
                                     group.sentinel_address(2));
    EXPECT_EQ(CountOf(group.sentinels(), "127.0.0.1:"), 3);
    for (int d = 0; d < RedisSentinelGroup::kDataNodes; ++d) {
      EXPECT_TRUE(group.data_node(d).running());
      EXPECT_EQ(group.DataNodeByPort(group.data_node(d).port()), d);
      pids.push_back(group.data_node(d).pid());
    }
  }
  // Every process stopped and reaped when the group goes.
  for (pid_t pid : pids) EXPECT_FALSE(ProcessExists(pid)) << pid;
}

TEST(RedisSentinelTest, ReplicasAreInSyncWithTheMaster) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  const std::string master_port = std::to_string(group.data_node(0).port());
  EXPECT_EQ(group.data_node(0).Cli({"ROLE"}).rfind("master\n", 0), 0u);
  for (int r = 1; r < RedisSentinelGroup::kDataNodes; ++r) {
    std::string role = group.data_node(r).Cli({"ROLE"});
    EXPECT_EQ(role.rfind("slave\n127.0.0.1\n" + master_port + "\nconnected\n", 0), 0u) << role;
    EXPECT_EQ(group.data_node(r).Cli({"SET", "k", "v"}).rfind("ERR: READONLY", 0), 0u);
  }
  EXPECT_EQ(group.data_node(0).Cli({"SET", "k", "v"}), "OK");
  std::string why;
  EXPECT_TRUE(group.WaitReplicated(5s, &why)) << why;
  EXPECT_EQ(group.data_node(1).Cli({"GET", "k"}), "v");
  EXPECT_EQ(group.data_node(2).Cli({"GET", "k"}), "v");
}

TEST(RedisSentinelTest, KillingTheMasterPromotesAReplicaThatTheOtherFollows) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  ASSERT_EQ(group.data_node(0).Cli({"SET", "before", "1"}), "OK");
  std::string why;
  ASSERT_TRUE(group.WaitReplicated(5s, &why)) << why;
  std::vector<std::unique_ptr<SentinelSubscriber>> subscribers;
  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
    subscribers.push_back(
        std::make_unique<SentinelSubscriber>(group.sentinel_port(s), "", "+switch-master"));
    ASSERT_TRUE(subscribers.back()->ok()) << subscribers.back()->error();
  }
  const int old_port = group.data_node(0).port();

  const auto start = Clock::now();
  const int promoted = group.KillMasterAndAwaitFailover(20s, &why);
  RecordProperty("failover_ms", std::to_string(MsSince(start)));
  ASSERT_TRUE(promoted == 1 || promoted == 2) << promoted << ": " << why;
  EXPECT_FALSE(group.data_node(0).running());
  const int other = 3 - promoted;
  const std::string new_port = std::to_string(group.data_node(promoted).port());

  EXPECT_EQ(group.CurrentMaster(), promoted);
  EXPECT_EQ(group.data_node(promoted).Cli({"ROLE"}).rfind("master\n", 0), 0u);
  std::string role = group.data_node(other).Cli({"ROLE"});
  EXPECT_EQ(role.rfind("slave\n127.0.0.1\n" + new_port + "\nconnected\n", 0), 0u) << role;
  EXPECT_EQ(group.data_node(promoted).Cli({"GET", "before"}), "1");  // it was in sync
  ASSERT_EQ(group.data_node(promoted).Cli({"SET", "after", "2"}), "OK");
  EXPECT_EQ(AwaitValue(group.data_node(other), "after", "2", 5s), "2");

  // Every sentinel announced the switch on its own pub/sub, in this format.
  const std::string want = group.master_name() + " 127.0.0.1 " + std::to_string(old_port) +
                           " 127.0.0.1 " + new_port;
  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
    EXPECT_EQ(subscribers[s]->Next(2s), want) << "sentinel " << s;
  }
}

TEST(RedisSentinelTest, DuringAFailoverSentinelsNameTheOldMasterUntilTheyNameTheNewOne) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  const auto start = Clock::now();
  group.data_node(0).Kill();
  // Each sentinel's answer goes from the dead master straight to the new one: never nil, never
  // unknown, never a third node, and never back.
  std::vector<std::vector<int>> seen(RedisSentinelGroup::kSentinels);
  const auto until = Clock::now() + 20s;
  auto all_switched = [&] {
    for (auto& answers : seen) {
      if (answers.empty() || answers.back() == 0) return false;
    }
    return true;
  };
  while (!all_switched() && Clock::now() < until) {
    for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
      int named = group.MasterNamedBy(s);
      if (seen[s].empty() || seen[s].back() != named) {
        seen[s].push_back(named);
        if (seen[s].size() == 2) {
          RecordProperty("sentinel" + std::to_string(s) + "_switched_ms",
                         std::to_string(MsSince(start)));
        }
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  int promoted = -1;
  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
    ASSERT_EQ(seen[s].size(), 2u) << "sentinel " << s << " named "
                                  << ::testing::PrintToString(seen[s]);
    EXPECT_EQ(seen[s][0], 0);
    if (promoted < 0) promoted = seen[s][1];
    EXPECT_EQ(seen[s][1], promoted);
  }
  EXPECT_TRUE(promoted == 1 || promoted == 2) << promoted;
  std::string why;
  EXPECT_TRUE(group.WaitSettled(20s, &why)) << why;
  RecordProperty("settled_ms", std::to_string(MsSince(start)));
  EXPECT_EQ(group.CurrentMaster(), promoted);
}

TEST(RedisSentinelTest, OldMasterRejoinsAsReplicaAndASecondFailoverWorks) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  std::string why;
  const int first = group.KillMasterAndAwaitFailover(20s, &why);
  ASSERT_GE(first, 1) << why;
  ASSERT_TRUE(group.RestartDataNodeAsReplica(0, 20s, &why)) << why;
  std::string role = group.data_node(0).Cli({"ROLE"});
  EXPECT_EQ(role.rfind("slave\n127.0.0.1\n" + std::to_string(group.data_node(first).port()), 0), 0u)
      << role;
  ASSERT_EQ(group.data_node(first).Cli({"SET", "k", "v"}), "OK");
  ASSERT_TRUE(group.WaitReplicated(5s, &why)) << why;  // on both replicas: either may be promoted
  EXPECT_EQ(group.data_node(0).Cli({"GET", "k"}), "v");

  const int second = group.KillMasterAndAwaitFailover(20s, &why);
  ASSERT_GE(second, 0) << why;
  EXPECT_NE(second, first);
  EXPECT_EQ(group.data_node(second).Cli({"GET", "k"}), "v");
}

TEST(RedisSentinelTest, PasswordsOnDataNodesAndSentinels) {
  RedisSentinelOptions options;
  options.master_name = "pw-master";
  options.master_password = "data secret";  // a space: quoted in the sentinel config
  options.sentinel_password = "sentinel-secret";
  RedisSentinelGroup group(options);
  ASSERT_TRUE(group.ready());
  EXPECT_EQ(group.CurrentMaster(), 0);
  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
    // Without the sentinel password a sentinel refuses everything but AUTH/HELLO.
    std::string refused =
        group.SentinelCli(s, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", "pw-master"}, false);
    EXPECT_EQ(refused.rfind("ERR: NOAUTH", 0), 0u) << refused;
    std::string wrong = group.SentinelCli(s, {"AUTH", "wrong"}, false);
    EXPECT_EQ(wrong.rfind("ERR: WRONGPASS", 0), 0u) << wrong;
    EXPECT_EQ(group.SentinelCli(s, {"SENTINEL", "CKQUORUM", "pw-master"}).rfind("OK 3 ", 0), 0u);
  }
  // The data nodes want the master password (Cli sends it).
  EXPECT_EQ(group.data_node(0).Cli({"SET", "k", "v"}), "OK");
  std::string why;
  EXPECT_TRUE(group.WaitReplicated(5s, &why)) << why;
  // And a failover still works: the sentinels vote over connections that need the password.
  const int promoted = group.KillMasterAndAwaitFailover(20s, &why);
  ASSERT_GE(promoted, 1) << why;
  EXPECT_EQ(group.data_node(promoted).Cli({"GET", "k"}), "v");
}

TEST(RedisSentinelTest, SentinelsCanBeStoppedPausedAndRestarted) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  const int port = group.sentinel_port(0);
  group.StopSentinel(0);
  EXPECT_FALSE(group.sentinel_running(0));
  EXPECT_EQ(group.SentinelCli(0, {"PING"}).rfind("CONNECT FAILED", 0), 0u);
  EXPECT_EQ(group.MasterNamedBy(0), -1);
  EXPECT_EQ(group.CurrentMaster(), 0);  // from the other two
  EXPECT_EQ(CountOf(group.sentinels(), ","), 2);  // still listed

  ASSERT_TRUE(group.RestartSentinel(0));
  EXPECT_EQ(group.sentinel_port(0), port);
  EXPECT_EQ(group.MasterNamedBy(0), 0);

  group.PauseSentinel(1);
  EXPECT_EQ(group.CurrentMaster(), 0);  // a paused sentinel is not asked
  group.ResumeSentinel(1);
  EXPECT_EQ(group.MasterNamedBy(1), 0);
  std::string why;
  EXPECT_TRUE(group.WaitSettled(10s, &why)) << why;
}

// TLS everywhere: the sentinels listen over TLS only, watch TLS-only data nodes and know each
// other (over TLS), and the replicas replicate over TLS. (A failover over TLS is in
// redis_tls_topology_test.cc.)
TEST(RedisSentinelTest, ATlsGroupTalksTlsOnly) {
  dlock_test::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  RedisSentinelOptions options;
  options.tls = dlock_test::RedisTls{.certs = &certs, .require_client_cert = true};
  const auto start = Clock::now();
  RedisSentinelGroup group(options);
  ASSERT_TRUE(group.ready());
  RecordProperty("startup_ms", std::to_string(MsSince(start)));
  EXPECT_EQ(group.CurrentMaster(), 0);
  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) {
    std::string master = group.SentinelCli(s, {"SENTINEL", "MASTER", group.master_name()});
    EXPECT_NE(master.find("\nnum-slaves\n2\n"), std::string::npos) << master;
    EXPECT_NE(master.find("\nnum-other-sentinels\n2\n"), std::string::npos) << master;
    dlock_test::wire::Connection plain(group.sentinel_port(s), "", std::nullopt, "", 1000, 1000);
    EXPECT_EQ(plain.ok() ? plain.Command({"PING"}) : nullptr, nullptr) << "sentinel " << s;
  }
  EXPECT_EQ(group.data_node(0).Cli({"CONFIG", "GET", "port"}), "port\n0");
  EXPECT_EQ(group.data_node(0).Cli({"SET", "k", "v"}), "OK");
  std::string why;
  EXPECT_TRUE(group.WaitReplicated(5s, &why)) << why;
  EXPECT_EQ(group.data_node(1).Cli({"GET", "k"}), "v");
  EXPECT_EQ(group.data_node(2).Cli({"GET", "k"}), "v");
}

}  // namespace
