// redis-sentinel:// against real sentinels: finding the master. Everything else runs against
// Sentinel in the conformance suite; failovers in failover_test.cc.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dlock_test
