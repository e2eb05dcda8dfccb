// dlock beside another Redis lock library on the same keys: node-redlock v5 (bench/peers/node's),
// which takes a lock with SET NX PX (in a script) and releases it by compare-and-delete, as
// redsync and redis-py's Lock do. Locking dlock's holder key dlock:{NAME}, it excludes dlock's
// exclusive holds and is excluded by them, on one Redis and on Redlock's masters alike
// (docs/redis.md, "Other lock clients").
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kPeer = std::string(DLOCK_SOURCE_DIR) + "/tests/interop/redlock_peer.js";
const std::string kNodeModules = std::string(DLOCK_SOURCE_DIR) + "/bench/peers/node/node_modules";

// One Redis server, or three independent masters for redlock://.
class RedisInteropTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    node_ = FindOnPath("node", "DLOCK_NODE");
    ASSERT_FALSE(node_.empty()) << "node not found on PATH (scripts/setup installs it)";
    ASSERT_TRUE(fs::exists(kNodeModules + "/redlock")) << "no node-redlock in " << kNodeModules
                                                       << ": run scripts/setup (npm ci in bench/peers/node)";
    for (int i = 0; i < GetParam(); ++i) servers_.push_back(std::make_unique<RedisServer>());
    url_ = GetParam() == 1 ? "redis://" + servers_[0]->address() : "redlock://";
    for (size_t i = 0; i < servers_.size(); ++i) {
      ports_ += (i ? "," : "") + std::to_string(servers_[i]->port());
      if (GetParam() > 1) url_ += (i ? "," : "") + servers_[i]->address();
    }
    dir_ = fs::temp_directory_path() / ("dlock-interop-" + std::to_string(getpid()) + "-" +
                                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  // node-redlock on the holder key of lock `name`.
  std::unique_ptr<ChildProcess> Peer(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv{node_, kPeer, ports_, Key(name)};
    for (std::string& a : args) argv.push_back(std::move(a));
    auto peer = std::make_unique<ChildProcess>(argv, ChildOptions::Env({"NODE_PATH=" + kNodeModules}));
    EXPECT_TRUE(peer->started()) << peer->error();
    return peer;
  }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

  std::string node_, ports_, url_;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  fs::path dir_;
};

// Made to meet: each side tries while the other holds, and is refused.
TEST_P(RedisInteropTest, EachRefusesWhileTheOtherHolds) {
  Client c(url_);
  dlock_lock* mine = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "x", nullptr, &mine), DLOCK_OK) << dlock_last_error();
  auto refused = Peer("x", {"hold", Path("never")});
  EXPECT_EQ(refused->AwaitLine("RESULT ", 20s), "RESULT REFUSED") << refused->output();
  EXPECT_EQ(refused->Wait(20s), 0) << refused->output();
  ASSERT_EQ(dlock_release(mine), DLOCK_OK) << dlock_last_error();

  auto holder = Peer("x", {"hold", Path("release")});
  ASSERT_EQ(holder->AwaitLine("RESULT ", 20s), "RESULT HELD") << holder->output();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), "x", nullptr, &l), DLOCK_NOT_ACQUIRED) << "dlock took a lock node-redlock held";
  Options shared;
  shared.shared();
  EXPECT_EQ(dlock_acquire(c.get(), "x", shared.get(), &l), DLOCK_NOT_ACQUIRED)
      << "a shared hold beside node-redlock's lock";

  // A dlock waiter gets it once node-redlock lets go. Its release publishes nothing: the
  // waiter's own retries find the key gone.
  std::thread release([&] {
    std::this_thread::sleep_for(300ms);
    std::ofstream(Path("release")) << "go";
  });
  Options waiting;
  waiting.wait(20000).retry(20, 200);
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(dlock_acquire(c.get(), "x", waiting.get(), &l), DLOCK_OK) << dlock_last_error();
  release.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 10s) << "the waiter slept out node-redlock's lease";
  EXPECT_EQ(holder->Wait(20s), 0) << holder->output();
  EXPECT_NE(holder->output().find("RELEASED"), std::string::npos) << holder->output();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

// What dlock's shared holds do not keep out: they live under other keys, so a SET NX of the
// holder key succeeds beside them (docs/redis.md says so).
TEST_P(RedisInteropTest, ASharedHoldDoesNotKeepOutAForeignSetNx) {
  Client c(url_);
  Options shared;
  shared.shared();
  dlock_lock* reader = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "s", shared.get(), &reader), DLOCK_OK) << dlock_last_error();
  auto peer = Peer("s", {"hold", Path("release")});
  EXPECT_EQ(peer->AwaitLine("RESULT ", 20s), "RESULT HELD") << peer->output();
  std::ofstream(Path("release")) << "go";
  EXPECT_EQ(peer->Wait(20s), 0) << peer->output();
  EXPECT_EQ(dlock_release(reader), DLOCK_OK) << dlock_last_error();
}

// Two node-redlock processes and two dlock threads increment one counter file under the lock,
// read, pause, write: no update is lost.
TEST_P(RedisInteropTest, CountersUnderEitherLibraryLoseNothing) {
  constexpr int kRounds = 100;
  const std::string counter = Path("counter");
  std::ofstream(counter) << "0";
  std::vector<std::unique_ptr<ChildProcess>> peers;
  for (int i = 0; i < 2; ++i) peers.push_back(Peer("count", {"count", counter, std::to_string(kRounds)}));
  Client c(url_);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      Options o;
      o.wait(60000).retry(5, 20);
      for (int i = 0; i < kRounds; ++i) {
        dlock_lock* l = nullptr;
        ASSERT_EQ(dlock_acquire(c.get(), "count", o.get(), &l), DLOCK_OK) << dlock_last_error();
        long n = 0;
        std::ifstream(counter) >> n;
        std::this_thread::sleep_for(1ms);  // a window for a lost update, if the lock let two in
        std::ofstream(counter) << n + 1;
        ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& p : peers) {
    EXPECT_EQ(p->Wait(120s), 0) << p->output();
    EXPECT_NE(p->output().find("DONE"), std::string::npos) << p->output();
  }
  long total = 0;
  std::ifstream(counter) >> total;
  EXPECT_EQ(total, 4 * kRounds) << "updates were lost: two holders at once";
}

INSTANTIATE_TEST_SUITE_P(Interop, RedisInteropTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? std::string("redis") : std::string("redlock3");
                         });

}  // namespace
}  // namespace dlock_test
