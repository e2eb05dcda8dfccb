// dlock's etcd layout=mutex beside etcd's own lock tools on the same keys: `etcdctl lock` (Debian's
// etcd-client, the recipe of Go's concurrency.Mutex). Each excludes the other, each waiter is
// woken by the other's release, and the fencing tokens both export rise together
// (docs/etcd.md, "Sharing locks with etcdctl and Go").
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/etcd_cluster.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class EtcdMutexInterop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { etcd_ = new EtcdCluster(); }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(etcd_->ready());
    etcdctl_ = FindOnPath("etcdctl", "DLOCK_ETCDCTL");
    ASSERT_FALSE(etcdctl_.empty()) << "etcdctl not found on PATH (scripts/setup installs etcd-client)";
    url_ = etcd_->url() + "?layout=mutex";
    dir_ = fs::temp_directory_path() / ("dlock-etcd-interop-" + std::to_string(getpid()) + "-" +
                                        std::to_string(Clock::now().time_since_epoch().count()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }
  // `etcdctl lock NAME -- sh -c SCRIPT`, on every endpoint (ETCDCTL_API=3 is its default).
  std::unique_ptr<ChildProcess> EtcdctlLock(const std::string& name, const std::string& script) {
    auto p = std::make_unique<ChildProcess>(std::vector<std::string>{etcdctl_, "--endpoints=" + etcd_->endpoints(),
                                                                     "lock", name, "--", "/bin/sh", "-c", script},
                                            ChildOptions::Env({"ETCDCTL_API=3"}));
    EXPECT_TRUE(p->started()) << p->error();
    return p;
  }
  // Keys under NAME/: the holder's and the waiters'.
  static int KeysOf(const std::string& name) { return etcd_->Count(name + "/", name + "0"); }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static EtcdCluster* etcd_;
  std::string etcdctl_, url_;
  fs::path dir_;
};

EtcdCluster* EtcdMutexInterop::etcd_ = nullptr;

// Made to meet: etcdctl holds (until told), `dlock inspect` shows it, a single try is refused,
// and a dlock waiter that took its place behind it is woken by its release, with a token above
// etcdctl's ETCD_LOCK_REV.
TEST_F(EtcdMutexInterop, ADlockWaiterBehindEtcdctlIsWokenByItsRelease) {
  const std::string name = "/locks/behind-etcdctl";  // names with '/', as etcdctl users write them
  auto holder = EtcdctlLock(name, "echo $ETCD_LOCK_REV > " + Path("rev") + "; while [ ! -e " + Path("go") +
                                      " ]; do sleep 0.01; done");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(Path("rev")) && !Slurp(Path("rev")).empty(); }, 20s)) << holder->output();
  const uint64_t etcdctl_rev = std::stoull(Slurp(Path("rev")));

  ChildProcess inspect({DLOCK_CLI, "--url", url_, "inspect", name});
  EXPECT_EQ(inspect.Wait(20s), 0) << inspect.output();
  EXPECT_NE(inspect.output().find(name + ": held by 'etcd lock key " + name + "/"), std::string::npos)
      << inspect.output();
  EXPECT_NE(inspect.output().find("fencing token unknown"), std::string::npos) << inspect.output();

  Client c(url_);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), nullptr, &l), DLOCK_NOT_ACQUIRED) << "dlock took etcdctl's lock";
  EXPECT_EQ(KeysOf(name), 1) << "a refused single try left its key";

  Clock::time_point released{};
  std::thread release([&] {
    // Once the waiter stands in line (its key behind etcdctl's), etcdctl lets go.
    EXPECT_TRUE(WaitFor([&] { return KeysOf(name) == 2; }, 20s)) << "the waiter never took its place";
    released = Clock::now();
    std::ofstream(Path("go")) << "go";
  });
  Options o;
  o.wait(30000).retry(20000, 30000);  // retries this slow cannot be what serves it
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const auto waited = Clock::now() - released;
  release.join();
  EXPECT_EQ(holder->Wait(20s), 0) << holder->output();
  // etcdctl's release: its process ends, deletes its key and revokes its session. The hand-over
  // measured a few ms here; the bound is generous for busy machines and sanitizers.
  EXPECT_LT(waited, 3s) << "woken by a retry, not by etcdctl's release";
  std::printf("etcdctl's release to the dlock waiter's return: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
  EXPECT_GT(dlock_lock_fencing_token(l), etcdctl_rev);
  EXPECT_LE(dlock_lock_attempts(l), 2u);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(KeysOf(name), 0);
}

// The other way: etcdctl waits behind a dlock holder and is woken by its release; its
// ETCD_LOCK_REV is above dlock's token.
TEST_F(EtcdMutexInterop, AnEtcdctlWaiterBehindDlockIsWokenByItsRelease) {
  const std::string name = "behind-dlock";
  Client c(url_);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  auto waiter = EtcdctlLock(name, "echo $ETCD_LOCK_REV > " + Path("rev"));
  ASSERT_TRUE(WaitFor([&] { return KeysOf(name) == 2; }, 20s)) << "etcdctl never took its place: " << waiter->output();
  EXPECT_FALSE(fs::exists(Path("rev"))) << "etcdctl took dlock's lock";
  const auto released = Clock::now();
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(waiter->Wait(20s), 0) << waiter->output();
  const auto waited = Clock::now() - released;
  EXPECT_LT(waited, 5s) << "etcdctl was not woken by dlock's release";
  std::printf("dlock's release to the etcdctl waiter's exit: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
  ASSERT_TRUE(fs::exists(Path("rev"))) << waiter->output();
  EXPECT_GT(std::stoull(Slurp(Path("rev"))), token);
}

// Loops of `etcdctl lock` and of `dlock exec` increment one counter file (read, pause, write)
// and log the token each saw: the count is exact, and the tokens rise in the order the
// holders came, whichever tool each was.
TEST_F(EtcdMutexInterop, CountersUnderEitherToolLoseNothingAndTokensRise) {
  constexpr int kRounds = 25;
  const std::string name = "count";
  const std::string counter = Path("counter"), log = Path("tokens");
  std::ofstream(counter) << "0";
  auto body = [&](const std::string& token_var) {
    return "n=$(cat " + counter + "); sleep 0.01; echo $((n+1)) > " + counter + "; echo $" + token_var + " >> " + log;
  };
  const std::string etcdctl_loop = "for i in $(seq " + std::to_string(kRounds) + "); do ETCDCTL_API=3 '" + etcdctl_ +
                                   "' --endpoints=" + etcd_->endpoints() + " lock " + name + " -- sh -c '" +
                                   body("ETCD_LOCK_REV") + "' > /dev/null || exit 1; done";
  const std::string dlock_loop = "for i in $(seq " + std::to_string(kRounds) + "); do '" DLOCK_CLI "' --url '" + url_ +
                                 "' exec " + name + " -- sh -c '" + body("DLOCK_FENCING_TOKEN") + "' || exit 1; done";
  std::vector<std::unique_ptr<ChildProcess>> loops;
  for (const std::string& loop : {etcdctl_loop, dlock_loop, etcdctl_loop, dlock_loop}) {
    loops.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", loop}));
    ASSERT_TRUE(loops.back()->started()) << loops.back()->error();
  }
  for (auto& loop : loops) EXPECT_EQ(loop->Wait(300s), 0) << loop->output();
  EXPECT_EQ(std::stol(Slurp(counter)), 4 * kRounds) << "an update was lost";
  std::istringstream tokens(Slurp(log));
  uint64_t last = 0, token = 0;
  int n = 0;
  while (tokens >> token) {
    EXPECT_GT(token, last) << "token " << n << " did not rise";
    last = token;
    ++n;
  }
  EXPECT_EQ(n, 4 * kRounds);
}

// What etcd's recipe has and has not: a name also waits for the holders of the names under it
// (a/b's key lies under a/), shared holds, semaphores, job rules, breaks and release requests
// are refused naming the layout, and a lock is still taken and released plainly.
TEST_F(EtcdMutexInterop, WhatTheRecipeHasAndHasNot) {
  Client c(url_);
  dlock_lock* inner = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "tree/leaf", nullptr, &inner), DLOCK_OK) << dlock_last_error();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), "tree", nullptr, &l), DLOCK_NOT_ACQUIRED) << "tree/leaf's holder did not count";
  EXPECT_EQ(dlock_release(inner), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "tree", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();

  EXPECT_EQ(dlock_client_capabilities(c.get()), DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_FAIR);
  const auto refused = [&](Options& o, const char* what) {
    EXPECT_EQ(dlock_acquire(c.get(), "plain", o.get(), &l), DLOCK_EINVAL) << what;
    EXPECT_NE(std::string(dlock_last_error()).find("layout=mutex"), std::string::npos) << dlock_last_error();
  };
  Options shared, permits, min_hold, delay;
  shared.shared();
  permits.permits(3);
  min_hold.min_hold(1000);
  delay.lock_delay(1000);
  refused(shared, "shared");
  refused(permits, "permits");
  refused(min_hold, "min_hold");
  refused(delay, "lock_delay");
  EXPECT_EQ(dlock_break(c.get(), "plain", "test"), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("layout=mutex"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_request_release(c.get(), "plain", "test"), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("layout=mutex"), std::string::npos) << dlock_last_error();

  dlock_client* bad = nullptr;
  EXPECT_EQ(dlock_client_open((etcd_->url() + "?layout=recipe").c_str(), &bad), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("layout='recipe'"), std::string::npos) << dlock_last_error();
}

// A waiter whose hold has no lease still waits on one (its key must go if it dies), and the
// key it wins with is moved off it: the hold then outlives that waiting lease.
TEST_F(EtcdMutexInterop, ANoLeaseWaiterHoldsWithNoLease) {
  const std::string name = "no-lease";
  Client c(url_), other(url_);
  dlock_lock* first = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), nullptr, &first), DLOCK_OK) << dlock_last_error();
  std::thread release([&] {
    EXPECT_TRUE(WaitFor([&] { return KeysOf(name) == 2; }, 20s));
    EXPECT_EQ(dlock_release(first), DLOCK_OK) << dlock_last_error();
  });
  Options o;
  o.lease(0).wait(30000);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  release.join();
  ChildProcess get({etcdctl_, "--endpoints=" + etcd_->endpoints(), "get", "--prefix", name + "/", "-w", "json"},
                   ChildOptions::Env({"ETCDCTL_API=3"}));
  ASSERT_EQ(get.Wait(20s), 0) << get.output();
  EXPECT_NE(get.output().find("\"create_revision\""), std::string::npos) << get.output();
  EXPECT_EQ(get.output().find("\"lease\""), std::string::npos) << "the winner's key still hangs on a lease: " << get.output();
  EXPECT_EQ(dlock_lock_remaining_ms(l), INT64_MAX) << "no expiry";
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

}  // namespace
}  // namespace dlock_test
