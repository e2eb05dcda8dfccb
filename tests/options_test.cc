// Option validation and the heartbeat default.
#include <gtest/gtest.h>

#include <string>

#include "core/options.h"

namespace dlock {
namespace {

TEST(OptionsTest, HeartbeatDefaultsToAThirdOfTheLease) {
  AcquireOptions o;
  EXPECT_EQ(o.HeartbeatFor(9000), 3000u);
  EXPECT_EQ(o.HeartbeatFor(0), 0u);  // no expiry, nothing to renew
  o.heartbeat_ms = 0;
  EXPECT_EQ(o.HeartbeatFor(9000), 0u);
}

TEST(OptionsTest, HeartbeatMustBeShorterThanTheLease) {
  AcquireOptions o;
  o.lease_ms = 1000;
  o.heartbeat_ms = 1000;
  Status s = o.Validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("heartbeat_ms"), std::string::npos);
  o.heartbeat_ms = 999;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(OptionsTest, NamesAreCheckedForNullEmptyAndLength) {
  EXPECT_EQ(CheckLockName(nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckLockName("").code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckLockName(std::string(1024, 'x').c_str()).ok());
  Status s = CheckLockName(std::string(1025, 'x').c_str());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("1024"), std::string::npos);
}

TEST(OptionsTest, LeaseBounds) {
  EXPECT_TRUE(CheckLease(0).ok());
  EXPECT_TRUE(CheckLease(kMaxLeaseMs).ok());
  EXPECT_EQ(CheckLease(kMaxLeaseMs + 1).code(), Code::kInvalidArgument);
  AcquireOptions o;
  o.lease_ms = 5;
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dlock
