// redis-sentinel:// against real sentinels: finding the master. Everything else runs against
// Sentinel in the conformance suite; failovers in failover_test.cc.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

#include "support/redis_sentinel.h"
#include "test_util.h"

namespace dlock_test {
namespace {

class SentinelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RedisSentinelGroup::Options options;
    options.master_password = "master secret";
    options.sentinel_password = "sentinel-secret";
    group_ = new RedisSentinelGroup(options);
  }
  static void TearDownTestSuite() {
    delete group_;
    group_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(group_->ready()); }
  static std::string url(const std::string& sentinels, const std::string& master,
                         const std::string& query) {
    return "redis-sentinel://:master%20secret@" + sentinels + "/" + master + "?" + query;
  }
  static RedisSentinelGroup* group_;
};
RedisSentinelGroup* SentinelTest::group_ = nullptr;

TEST_F(SentinelTest, TheMasterIsFoundThroughTheSentinelsWithTheirOwnPassword) {
  Client client(url(group_->sentinels(), group_->master_name(), "sentinel_password=sentinel-secret"));
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "found", nullptr, &l), DLOCK_OK) << dlock_last_error();
  const int master = group_->CurrentMaster();
  ASSERT_GE(master, 0);
  EXPECT_EQ(group_->data_node(master).Cli({"EXISTS", "dlock:{found}"}), "1");
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(SentinelTest, ASentinelThatDoesNotAnswerIsSkipped) {
  Client client(url("127.0.0.1:1," + group_->sentinels(), group_->master_name(),
                    "sentinel_password=sentinel-secret"));
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "skipped", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(SentinelTest, WrongPasswordsAndUnknownMastersAreClearErrors) {
  dlock_client* c = nullptr;
  // Without the sentinels' password.
  EXPECT_EQ(dlock_client_open(url(group_->sentinels(), group_->master_name(), "").c_str(), &c),
            DLOCK_EAUTH);
  EXPECT_NE(std::string(dlock_last_error()).find(group_->sentinel_address(0)), std::string::npos)
      << dlock_last_error();
  // Without the master's password.
  EXPECT_EQ(dlock_client_open(("redis-sentinel://" + group_->sentinels() + "/" + group_->master_name() +
                               "?sentinel_password=sentinel-secret")
                                  .c_str(),
                              &c),
            DLOCK_EAUTH);
  // A master the sentinels do not know.
  EXPECT_EQ(dlock_client_open(url(group_->sentinels(), "nosuch", "sentinel_password=sentinel-secret").c_str(), &c),
            DLOCK_EBACKEND);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("does not know a master named 'nosuch'"), std::string::npos) << error;
  // No sentinel at all.
  EXPECT_EQ(dlock_client_open("redis-sentinel://127.0.0.1:1,127.0.0.1:2/m?connect_timeout_ms=300", &c),
            DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find("127.0.0.1:2"), std::string::npos) << dlock_last_error();
}

// A master that comes back empty at its address (restarted without persistence) says it is a
// master, whether or not the sentinels still name it. A client that lost its connections to
// the master must not grant locks there again before a sentinel names it: here the sentinels
// are paused, so nothing can vouch for it, and the acquire fails rather than take a lock that
// another client holds (its grant died with the old process).
TEST(SentinelRestartTest, AClientThatLostTheMasterDoesNotUseItUntilASentinelNamesIt) {
  RedisSentinelGroup group;
  ASSERT_TRUE(group.ready());
  const std::string url = "redis-sentinel://" + group.sentinels() + "/" + group.master_name() +
                          "?connect_timeout_ms=300&timeout_ms=500";
  Client holder(url);
  Client blocking(url);
  Client async(url);
  dlock_lock* held = nullptr;
  dlock_lock* held_too = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "restarted", nullptr, &held), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(holder.get(), "restarted-too", nullptr, &held_too), DLOCK_OK);
  // Both clients have used the master: a pooled connection, and the async connection.
  dlock_lock* warm = nullptr;
  ASSERT_EQ(dlock_acquire(blocking.get(), "warm", nullptr, &warm), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(warm), DLOCK_OK);
  auto acquire_async = [&](const char* name, const dlock_options* o) {
    std::promise<std::pair<dlock_status, dlock_lock*>> outcome;
    EXPECT_EQ(dlock_acquire_async(async.get(), name, o,
                                  [](dlock_status s, dlock_lock* l, void* arg) {
                                    static_cast<std::promise<std::pair<dlock_status, dlock_lock*>>*>(arg)
                                        ->set_value({s, l});
                                  },
                                  &outcome),
              DLOCK_OK);
    return outcome.get_future().get();
  };
  auto [status, lock] = acquire_async("warm", nullptr);
  ASSERT_EQ(status, DLOCK_OK);
  EXPECT_EQ(dlock_release(lock), DLOCK_OK);

  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) group.PauseSentinel(s);
  group.data_node(0).Kill();
  ASSERT_TRUE(group.data_node(0).Restart());  // empty, a master, the grant gone

  Options once;
  once.wait(0);
  const auto start = std::chrono::steady_clock::now();
  dlock_lock* second = nullptr;
  EXPECT_EQ(dlock_acquire(blocking.get(), "restarted", once.get(), &second), DLOCK_EIO);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("no sentinel named a reachable master"), std::string::npos) << error;
  auto [async_status, async_lock] = acquire_async("restarted-too", once.get());
  EXPECT_EQ(async_status, DLOCK_EIO);
  // Bound: a lookup is 2 x (connect_timeout_ms + timeout_ms) per sentinel at most (4.8 s),
  // plus the call's own; generous for sanitizers.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(group.data_node(0).Cli({"EXISTS", "dlock:{restarted}", "dlock:{restarted-too}"}), "0");
  if (second != nullptr) dlock_release(second);
  if (async_lock != nullptr) dlock_release(async_lock);

  for (int s = 0; s < RedisSentinelGroup::kSentinels; ++s) group.ResumeSentinel(s);
  dlock_release(held);  // lost with the old process: NOT_HELD or EIO, whichever comes first
  dlock_release(held_too);
}

}  // namespace
}  // namespace dlock_test
