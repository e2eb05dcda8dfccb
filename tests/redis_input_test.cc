// Guarantee 6 (docs/guarantees.md): bad input gets DLOCK_EINVAL with a message saying
// what was wrong. Here: Redis URLs, option setters, status names; bad names and options at
// acquire, on every backend, are in conformance/.
#include <gtest/gtest.h>

#include <string>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

std::string LastError() { return dlock_last_error(); }

class RedisInputTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisInputTest, OpenRejectsBadArguments) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(nullptr, &c), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("url"), std::string::npos);
  EXPECT_EQ(dlock_client_open(redis_.url().c_str(), nullptr), DLOCK_EINVAL);
  const char* bad[] = {"", "redis", "http://127.0.0.1:6379", "redis://127.0.0.1:notaport",
                       "redis://127.0.0.1:6379?nope=1", "redis://127.0.0.1:6379/x"};
  for (const char* url : bad) {
    EXPECT_EQ(dlock_client_open(url, &c), DLOCK_EINVAL) << url;
    EXPECT_FALSE(LastError().empty()) << url;
  }
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(dlock_client_open("http://127.0.0.1:6379", &c), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("unsupported URL scheme 'http://'"), std::string::npos) << LastError();
  EXPECT_EQ(dlock_client_open((redis_.url() + "?nope=1").c_str(), &c), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("'nope'"), std::string::npos) << LastError();
  std::string huge = "redis://" + std::string(100000, 'h') + ":1";
  EXPECT_NE(dlock_client_open(huge.c_str(), &c), DLOCK_OK);
  EXPECT_EQ(dlock_client_open((redis_.url() + "/99999").c_str(), &c), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("database 99999"), std::string::npos) << LastError();
}

TEST(OptionSettersTest, RejectBadValues) {
  Options opts;
  dlock_options* o = opts.mutable_get();
  EXPECT_EQ(dlock_options_set_lease_ms(nullptr, 1), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_wait_ms(o, -2), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("wait_ms"), std::string::npos);
  EXPECT_EQ(dlock_options_set_retry_ms(o, 0, 10), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_retry_ms(o, 20, 10), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("min_ms"), std::string::npos);
  EXPECT_EQ(dlock_options_set_lease_ms(o, UINT64_MAX), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("lease_ms"), std::string::npos);
  // Below the 10 ms minimum the setter refuses it, not the acquire that would come later.
  for (uint64_t too_short : {1u, 9u}) {
    EXPECT_EQ(dlock_options_set_lease_ms(o, too_short), DLOCK_EINVAL) << too_short;
    EXPECT_NE(LastError().find("at least 10 ms"), std::string::npos) << LastError();
  }
  EXPECT_EQ(dlock_options_set_lease_ms(o, 10), DLOCK_OK);
  EXPECT_EQ(dlock_options_set_lease_ms(o, 0), DLOCK_OK) << "0: no expiry";
  std::string long_owner(257, 'o');
  EXPECT_EQ(dlock_options_set_owner(o, long_owner.c_str()), DLOCK_EINVAL);
  EXPECT_NE(LastError().find("owner"), std::string::npos);
  EXPECT_EQ(dlock_options_set_owner(o, nullptr), DLOCK_OK);
  EXPECT_EQ(dlock_options_set_heartbeat_ms(nullptr, 1), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_on_lost(nullptr, nullptr, nullptr), DLOCK_EINVAL);
}

TEST(StatusTest, EveryStatusHasAName) {
  EXPECT_STREQ(dlock_status_str(DLOCK_OK), "DLOCK_OK");
  EXPECT_STREQ(dlock_status_str(DLOCK_NOT_ACQUIRED), "DLOCK_NOT_ACQUIRED");
  EXPECT_STREQ(dlock_status_str(DLOCK_NOT_HELD), "DLOCK_NOT_HELD");
  EXPECT_STREQ(dlock_status_str(DLOCK_EINVAL), "DLOCK_EINVAL");
  EXPECT_STREQ(dlock_status_str(DLOCK_EIO), "DLOCK_EIO");
  EXPECT_STREQ(dlock_status_str(DLOCK_EBACKEND), "DLOCK_EBACKEND");
  EXPECT_STREQ(dlock_status_str(DLOCK_EAUTH), "DLOCK_EAUTH");
  EXPECT_STREQ(dlock_status_str(DLOCK_ECANCELLED), "DLOCK_ECANCELLED");
  EXPECT_STREQ(dlock_status_str(DLOCK_ENOMEM), "DLOCK_ENOMEM");
  EXPECT_STREQ(dlock_status_str(DLOCK_EINTERNAL), "DLOCK_EINTERNAL");
  EXPECT_STREQ(dlock_status_str(static_cast<dlock_status>(42)), "DLOCK_UNKNOWN");
  std::string version = std::to_string(DLOCK_VERSION_MAJOR) + "." + std::to_string(DLOCK_VERSION_MINOR) +
                        "." + std::to_string(DLOCK_VERSION_PATCH);
  EXPECT_EQ(dlock_version(), version);
}

}  // namespace
}  // namespace dlock_test
