// A master dies and a replica takes its place: in a Redis Cluster (the cluster promotes it),
// under Sentinel (the sentinels do), and in etcd (the leader dies, Raft elects another). The
// same promises for all: clients follow without a restart, no update is lost behind a fence, a
// lock that could not be kept is reported lost, and tokens keep rising on the new master.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/etcd_cluster.h"
#include "support/redis_cluster.h"
#include "support/redis_sentinel.h"
#include "test_util.h"
#include "worker_process.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


// A deployment whose master can be killed and replaced. Locks are named by name.
class Topology {
 public:
  virtual ~Topology() = default;
  virtual bool ready() const = 0;
  virtual std::string url() const = 0;
  // A URL whose acquires are on a replica too before they return.
  virtual std::string durable_url() const { return url() + "?wait_replicas=1"; }
  // SIGKILLs the master serving the lock; false when there is none.
  virtual bool KillMasterOf(const std::string& name) = 0;
  // Waits until another node serves the lock as master; false on timeout.
  virtual bool AwaitNewMasterOf(const std::string& name, std::chrono::milliseconds timeout) = 0;
  // "1" when the master serving it now has the lock's key, "0" when not.
  virtual std::string ExistsOnMaster(const std::string& name) = 0;
  // How many fair waiters stand in the lock's line on its master; -1 when the backend keeps
  // no line (etcd) or the master does not answer.
  virtual int InLine(const std::string& /*name*/) { return -1; }
};

// redis-cli's answer as a count; -1 for anything else.
int CountAnswer(const std::string& answer) {
  return answer.empty() || answer.find_first_not_of("0123456789") != std::string::npos ? -1
                                                                                       : std::stoi(answer);
}

class ClusterTopology : public Topology {
 public:
  bool ready() const override { return cluster_.ready(); }
  std::string url() const override { return "redis-cluster://" + cluster_.seeds(); }
  bool KillMasterOf(const std::string& name) override {
    killed_ = cluster_.MasterOf(Key(name));
    if (killed_ < 0) return false;
    cluster_.node(killed_).Kill();
    return true;
  }
  bool AwaitNewMasterOf(const std::string& name, std::chrono::milliseconds timeout) override {
    return WaitFor([&] {
      int m = cluster_.MasterOf(Key(name));
      return m >= 0 && m != killed_;
    }, timeout);
  }
  std::string ExistsOnMaster(const std::string& name) override {
    int m = cluster_.MasterOf(Key(name));
    return m < 0 ? "no master" : cluster_.node(m).Cli({"EXISTS", Key(name)});
  }
  int InLine(const std::string& name) override {
    int m = cluster_.MasterOf(Key(name));
    return m < 0 ? -1 : CountAnswer(cluster_.node(m).Cli({"ZCARD", Key(name) + ":line"}));
  }

 private:
  RedisCluster cluster_;
  int killed_ = -1;
};

class SentinelTopology : public Topology {
 public:
  bool ready() const override { return group_.ready(); }
  std::string url() const override {
    return "redis-sentinel://" + group_.sentinels() + "/" + group_.master_name();
  }
  bool KillMasterOf(const std::string&) override {
    killed_ = group_.CurrentMaster();
    if (killed_ < 0) return false;
    group_.data_node(killed_).Kill();
    return true;
  }
  bool AwaitNewMasterOf(const std::string&, std::chrono::milliseconds timeout) override {
    return WaitFor([&] {
      int m = group_.CurrentMaster();
      return m >= 0 && m != killed_;
    }, timeout);
  }
  std::string ExistsOnMaster(const std::string& name) override {
    int m = group_.CurrentMaster();
    return m < 0 ? "no master" : group_.data_node(m).Cli({"EXISTS", Key(name)});
  }
  int InLine(const std::string& name) override {
    int m = group_.CurrentMaster();
    return m < 0 ? -1 : CountAnswer(group_.data_node(m).Cli({"ZCARD", Key(name) + ":line"}));
  }

 private:
  RedisSentinelGroup group_;
  int killed_ = -1;
};

// etcd: the "master" is the Raft leader; every write is on a quorum before it is answered.
class EtcdTopology : public Topology {
 public:
  bool ready() const override { return etcd_.ready(); }
  std::string url() const override { return etcd_.url(); }
  std::string durable_url() const override { return etcd_.url(); }
  bool KillMasterOf(const std::string&) override {
    killed_ = etcd_.Leader();
    if (killed_ < 0) return false;
    etcd_.Kill(killed_);
    return true;
  }
  bool AwaitNewMasterOf(const std::string&, std::chrono::milliseconds timeout) override {
    return WaitFor([&] {
      int m = etcd_.Leader();
      return m >= 0 && m != killed_;
    }, timeout);
  }
  std::string ExistsOnMaster(const std::string& name) override {
    return etcd_.Get("dlock:" + name).has_value() ? "1" : "0";
  }

 private:
  EtcdCluster etcd_;
  int killed_ = -1;
};

struct TopologyKind {
  std::string name;
  std::function<std::unique_ptr<Topology>()> start;
};

class Failover : public ::testing::TestWithParam<TopologyKind> {
 protected:
  void SetUp() override {
    topology_ = GetParam().start();
    ASSERT_TRUE(topology_->ready());
  }
  std::unique_ptr<Topology> topology_;
};

// A master dies while four processes increment a fenced counter under one lock: the run
// finishes on the promoted replica, no update is lost, and a write refused by the fence always
// belongs to a lock whose loss was reported.
TEST_P(Failover, FencedCounterRunFinishesOnThePromotedReplicaLosingNoUpdate) {
  const std::string name = "failover-counter";
  char dir[] = "/tmp/dlock-failover-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string counter = std::string(dir) + "/counter";
  constexpr int kProcesses = 4, kEach = 40;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int p = 0; p < kProcesses; ++p) {
    workers.push_back(StartWorker({topology_->url(), name, "fenced", std::to_string(kEach), counter}));
  }
  auto count_now = [&] {
    long n = 0;
    std::ifstream(counter) >> n;
    return n;
  };
  // Every worker connected first: one that opens its client after the kill finds no master
  // (a failed open, not what this test is about).
  for (auto& w : workers) ASSERT_EQ(w->AwaitLine("OPEN", 30s), "OPEN") << w->output();
  ASSERT_TRUE(WaitFor([&] { return count_now() >= 20; }, 30s)) << "the run did not start";
  ASSERT_TRUE(topology_->KillMasterOf(name));
  const auto killed = Clock::now();

  long accepted = 0, refused = 0, lost = 0, errors = 0;
  for (auto& w : workers) {
    ASSERT_EQ(w->Wait(120s), 0) << w->output();
    std::smatch m;
    std::string out = w->output();
    ASSERT_TRUE(std::regex_search(
        out, m, std::regex("DONE accepted=(\\d+) refused=(\\d+) errors=(\\d+) lost=(\\d+)")))
        << out;
    accepted += std::stol(m[1]);
    refused += std::stol(m[2]);
    errors += std::stol(m[3]);
    lost += std::stol(m[4]);
  }
  std::cout << GetParam().name << " failover run: done "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count()
            << " ms after the kill; accepted " << accepted << ", refused by the fence " << refused
            << ", failed calls (retried) " << errors << ", losses reported " << lost << "\n";
  EXPECT_EQ(accepted, kProcesses * kEach);
  EXPECT_EQ(count_now(), accepted) << "an update was lost";
  EXPECT_LE(refused, lost) << "a holder was fenced off without being told its lock was lost";
  EXPECT_TRUE(topology_->AwaitNewMasterOf(name, 1s)) << "the run finished without a failover";
  std::filesystem::remove_all(dir);
}

// A lock held through a failover is either still held (renewed on the promoted replica) or
// reported lost: never silently gone. Tokens keep rising on the new master.
TEST_P(Failover, AHeldLockIsKeptOrReportedLostAndTokensKeepRising) {
  Client client(topology_->url());
  LostRecorder lost;
  Options o;
  o.lease(3000).heartbeat(500).on_lost(&LostRecorder::Fn, &lost);
  const std::string name = "through-failover";
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), o.get(), &held), DLOCK_OK) << dlock_last_error();
  const uint64_t held_token = dlock_lock_fencing_token(held);

  ASSERT_TRUE(topology_->KillMasterOf(name));
  ASSERT_TRUE(topology_->AwaitNewMasterOf(name, 30s)) << "no replica took over";
  std::this_thread::sleep_for(3000ms);  // a whole lease on the new master

  const bool still_ours = dlock_lock_is_valid(held) == 1;
  if (still_ours) {
    EXPECT_EQ(lost.calls.load(), 0);
    EXPECT_EQ(topology_->ExistsOnMaster(name), "1") << "valid, yet not on the new master";
    EXPECT_EQ(dlock_release(held), DLOCK_OK) << dlock_last_error();
  } else {
    // Reported on the client's thread, once, as it found the lock lost (maybe a moment after).
    EXPECT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 10s)) << "lost without a report";
    EXPECT_EQ(lost.calls.load(), 1);
    EXPECT_EQ(dlock_release(held), DLOCK_NOT_HELD);
  }
  dlock_lock* after = nullptr;
  Options patient;
  patient.wait(10000);
  ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), patient.get(), &after), DLOCK_OK)
      << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(after), held_token);
  EXPECT_EQ(dlock_release(after), DLOCK_OK);
  std::cout << GetParam().name << ": through the failover the lock was "
            << (still_ours ? "kept" : "reported lost") << "\n";
}

// After a failover, a waiter is woken by a release on the new master: the client's wake-ups
// (pub/sub) moved with the master. (An acquire already waiting when the master dies ends with
// DLOCK_EIO, as with one server: its caller tries again.)
TEST_P(Failover, WaitersAreWokenByReleasesOnTheNewMaster) {
  // The grant reaches a replica before the acquire returns (replication is asynchronous: a
  // master killed at once could otherwise take it along, and CI saw that happen).
  Client holder_client(topology_->durable_url()), waiter_client(topology_->url());
  const std::string name = "waited-after-failover";
  dlock_lock* held = nullptr;
  Options long_lease;
  long_lease.lease(60000);
  ASSERT_EQ(dlock_acquire(holder_client.get(), name.c_str(), long_lease.get(), &held), DLOCK_OK);
  // Both clients have talked to the old master.
  dlock_lock* refused = nullptr;
  EXPECT_EQ(dlock_acquire(waiter_client.get(), name.c_str(), nullptr, &refused), DLOCK_NOT_ACQUIRED);
  ASSERT_TRUE(topology_->KillMasterOf(name));
  ASSERT_TRUE(topology_->AwaitNewMasterOf(name, 30s)) << "no replica took over";
  // The holder's calls reach the new master once its client found it (the first may fail).
  ASSERT_TRUE(WaitFor([&] { return dlock_extend(held, 60000) == DLOCK_OK; }, 10s)) << dlock_last_error();

  std::atomic<bool> acquired{false};
  std::string error;
  Clock::time_point got_it;
  std::thread waiter([&] {
    Options o;
    o.lease(60000).wait(30000).retry(20000, 20000);  // a retry would come far too late
    dlock_lock* l = nullptr;
    for (auto until = Clock::now() + 10s; Clock::now() < until;) {
      dlock_status s = dlock_acquire(waiter_client.get(), name.c_str(), o.get(), &l);
      if (s == DLOCK_OK) {
        got_it = Clock::now();
        acquired = true;
        dlock_release(l);
        return;
      }
      error = dlock_last_error();
      if (s != DLOCK_EIO) return;  // its client finds the new master after a failed call
    }
  });
  if (topology_->InLine(name) >= 0) {
    // Its first attempt refused, the waiter took its place in line.
    EXPECT_TRUE(WaitFor([&] { return topology_->InLine(name) == 1; }, 20s))
        << "the waiter never took its place in line";
  } else {
    // etcd shows no line: give the waiter time to wait. (One that has not started yet takes
    // the lock at its first attempt, which proves less but cannot fail.)
    std::this_thread::sleep_for(1000ms);
  }
  const auto released = Clock::now();
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << dlock_last_error();
  waiter.join();
  ASSERT_TRUE(acquired.load()) << error;
  const auto handoff = std::chrono::duration_cast<std::chrono::milliseconds>(got_it - released).count();
  EXPECT_LT(handoff, 10000) << "woken by the retry timer (20 s away), not by the release";
  std::cout << GetParam().name << ": handoff after the failover in " << handoff << " ms\n";
}

std::vector<TopologyKind> Topologies() {
  return {{"cluster", [] { return std::make_unique<ClusterTopology>(); }},
          {"sentinel", [] { return std::make_unique<SentinelTopology>(); }},
          {"etcd", [] { return std::make_unique<EtcdTopology>(); }}};
}

INSTANTIATE_TEST_SUITE_P(Topology, Failover, ::testing::ValuesIn(Topologies()),
                         [](const ::testing::TestParamInfo<TopologyKind>& info) { return info.param.name; });

}  // namespace
}  // namespace dlock_test
