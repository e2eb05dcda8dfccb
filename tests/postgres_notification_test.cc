// The notifications the PostgreSQL backend hears on its table's channel (schema.sql sends them,
// lock_protocol.h reads them): a release, a waiter served, a release request. Anyone who may
// NOTIFY there can send anything: what is not one of these is ignored.
#include <gtest/gtest.h>

#include "postgres/lock_protocol.h"

namespace dlock::postgres {
namespace {

TEST(PostgresNotificationTest, ReleasesAndHandOversNameTheirLock) {
  Notification n;
  ASSERT_TRUE(ParseNotification("r jobs nightly", &n));
  EXPECT_FALSE(n.granted);
  EXPECT_FALSE(n.requested);
  EXPECT_EQ(n.name, "jobs nightly");
  ASSERT_TRUE(ParseNotification("g 0a1b 1700000000000001 jobs nightly", &n));
  EXPECT_TRUE(n.granted);
  EXPECT_EQ(n.hold, "0a1b");
  EXPECT_EQ(n.token, 1700000000000001u);
  EXPECT_EQ(n.name, "jobs nightly");
  ASSERT_TRUE(ParseNotification("v jobs nightly", &n));
  EXPECT_TRUE(n.changed);
  EXPECT_FALSE(n.granted);
  EXPECT_EQ(n.name, "jobs nightly");
}

// The reason's length comes first, so that a reason and a name may both hold spaces.
TEST(PostgresNotificationTest, AReleaseRequestCarriesItsIdReasonAndName) {
  Notification n;
  ASSERT_TRUE(ParseNotification("q 9f86 15 deploy 4411 now jobs nightly", &n));
  EXPECT_TRUE(n.requested);
  EXPECT_FALSE(n.granted);
  EXPECT_EQ(n.id, "9f86");
  EXPECT_EQ(n.reason, "deploy 4411 now");
  EXPECT_EQ(n.name, "jobs nightly");
  ASSERT_TRUE(ParseNotification("q 9f86 0  jobs", &n));
  EXPECT_EQ(n.reason, "");
  EXPECT_EQ(n.name, "jobs");
}

TEST(PostgresNotificationTest, AnythingElseIsIgnored) {
  Notification n;
  for (const char* payload : {"", "r ", "v ", "x name", "g hold 0 name", "g hold -3 name", "g hold 12", "q", "q id",
                              "q id 5", "q id 5 abc", "q id 99999999999999999999 a b", "q id -1 a b", "q id 05 abcde n",
                              "q id +5 abcde n", "q id 5 abcdefname", "q id 5 abcde ", "q  5 abcde n"}) {
    EXPECT_FALSE(ParseNotification(payload, &n)) << '"' << payload << '"';
  }
}

}  // namespace
}  // namespace dlock::postgres
