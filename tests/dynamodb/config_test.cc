// dynamodb:// URL parsing, region/endpoint resolution from the environment and shared config,
// and lock-name-to-key mapping.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

#include "dynamodb/dynamodb_config.h"
#include "support/dynalite_server.h"

namespace dlock::dynamodb {
namespace {

Status Parse(const std::string& text, DynamoConfig* out) {
  Url url;
  Status s = ParseUrl(text, &url);
  if (!s.ok()) return s;
  return ParseDynamoUrl(url, out);
}

class DynamoConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { dlock_test::UseTestCredentials(); }
};

TEST_F(DynamoConfigTest, DefaultsAndParameters) {
  DynamoConfig c;
  ASSERT_TRUE(Parse("dynamodb://locks?region=eu-west-1", &c).ok());
  EXPECT_EQ(c.table, "locks");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_EQ(c.endpoint, "https://dynamodb.eu-west-1.amazonaws.com");
  EXPECT_EQ(c.host_header, "dynamodb.eu-west-1.amazonaws.com");
  EXPECT_EQ(c.partition_key, "id");
  EXPECT_EQ(c.sort_key, "");
  EXPECT_FALSE(c.trust_local_time);
  EXPECT_TRUE(c.tls_verify);
  EXPECT_EQ(c.params.prefix, "dlock:");

  ASSERT_TRUE(Parse("dynamodb://My_Table.v2?region=cn-north-1&partition_key=pk&sort_key=sk"
                    "&trust_local_time=1&tls_verify=0&prefix=&timeout_ms=500",
                    &c).ok());
  EXPECT_EQ(c.table, "My_Table.v2");
  EXPECT_EQ(c.endpoint, "https://dynamodb.cn-north-1.amazonaws.com.cn");
  EXPECT_EQ(c.partition_key, "pk");
  EXPECT_EQ(c.sort_key, "sk");
  EXPECT_TRUE(c.trust_local_time);
  EXPECT_FALSE(c.tls_verify);
  EXPECT_EQ(c.params.prefix, "");
  EXPECT_EQ(c.params.timeout_ms, 500);
}

TEST_F(DynamoConfigTest, EndpointHostHeaderKeepsOnlyANonDefaultPort) {
  DynamoConfig c;
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=http://127.0.0.1:4567/", &c).ok());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:4567");
  EXPECT_EQ(c.host_header, "127.0.0.1:4567");
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=https://ddb.example.com:443", &c).ok());
  EXPECT_EQ(c.host_header, "ddb.example.com");
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=http://[::1]:8000", &c).ok());
  EXPECT_EQ(c.host_header, "[::1]:8000");
}

TEST_F(DynamoConfigTest, RegionAndEndpointComeFromTheEnvironmentInSdkOrder) {
  DynamoConfig c;
  setenv("AWS_REGION", "ap-south-1", 1);
  setenv("AWS_DEFAULT_REGION", "sa-east-1", 1);
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.region, "ap-south-1");
  unsetenv("AWS_REGION");
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.region, "sa-east-1");

  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1111", 1);
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:1111");
  setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:2222", 1);
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:2222");
  ASSERT_TRUE(Parse("dynamodb://locks?endpoint=http://127.0.0.1:3333", &c).ok());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:3333") << "the URL wins";
  setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.endpoint, "https://dynamodb.sa-east-1.amazonaws.com");
  unsetenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
}

TEST_F(DynamoConfigTest, RegionAndEndpointFromTheProfileInTheConfigFile) {
  unsetenv("AWS_REGION");
  char path[] = "/tmp/dlock-aws-config-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "[default]\nregion = us-west-1\n\n[profile dev]\n# a comment\n"
                         "region = eu-central-1\nendpoint_url = http://127.0.0.1:9999\n"
                         "s3 =\n  region = nowhere\n";
  setenv("AWS_CONFIG_FILE", path, 1);
  DynamoConfig c;
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.region, "us-west-1");
  setenv("AWS_PROFILE", "dev", 1);
  ASSERT_TRUE(Parse("dynamodb://locks", &c).ok());
  EXPECT_EQ(c.region, "eu-central-1");
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:9999");
  unlink(path);
}

TEST_F(DynamoConfigTest, BadUrlsAreRefused) {
  DynamoConfig c;
  for (const char* text :
       {"dynamodb://locks?region=r&colour=red", "dynamodb://locks?region=r&partition_key=owner",
        "dynamodb://locks?region=r&sort_key=recordVersion", "dynamodb://locks?region=r&sort_key=leaseMs",
        "dynamodb://locks?region=r&partition_key=renewedAtMs", "dynamodb://locks?region=r&sort_key=id",
        "dynamodb://locks?region=r&partition_key=", "dynamodb://x?region=r",
        "dynamodb://locks?region=r&endpoint=localhost:8000", "dynamodb://locks?region=r_1",
        "dynamodb://locks?region=r&tls_verify=2", "dynamodb://a:1@locks?region=r",
        "dynamodb://locks,other?region=r", "dynamodb://locks?region=r&partition_key=guid",
        "dynamodb://locks?region=r&sort_key=ownerName"}) {
    SCOPED_TRACE(text);
    Status s = Parse(text, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.message();
    EXPECT_FALSE(s.message().empty());
  }
}

TEST_F(DynamoConfigTest, DescribeSaysWhenTheCertificateIsNotVerified) {
  DynamoConfig c;
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=https://ddb.example:8443&tls_verify=0", &c).ok());
  EXPECT_NE(c.Describe().find("certificate not verified"), std::string::npos) << c.Describe();
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=https://ddb.example:8443", &c).ok());
  EXPECT_EQ(c.Describe(), "dynamodb table 'locks' at https://ddb.example:8443");
  // Plain http has no certificate to check.
  ASSERT_TRUE(Parse("dynamodb://locks?region=r1&endpoint=http://127.0.0.1:1&tls_verify=0", &c).ok());
  EXPECT_EQ(c.Describe(), "dynamodb table 'locks' at http://127.0.0.1:1");
}

TEST_F(DynamoConfigTest, UnclearUrlsWithAnAtEchoNothingOfThem) {
  DynamoConfig c;
  for (const char* text : {"dynamodb://u:Xq7/Zk9@locks?region=r1", "dynamodb://locks/Xq7Zk9@x?region=r1",
                           "dynamodb://u:Xq7?Zk9@locks?region=r1"}) {
    Status s = Parse(text, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
    EXPECT_EQ(s.message().find("Xq7"), std::string::npos) << text << ": " << s.message();
    EXPECT_EQ(s.message().find("Zk9"), std::string::npos) << text << ": " << s.message();
  }
}

TEST_F(DynamoConfigTest, LockNamesMapOntoKeys) {
  DynamoConfig c;
  ASSERT_TRUE(Parse("dynamodb://locks?region=r", &c).ok());
  std::string p, s;
  ASSERT_TRUE(SplitLockName(c, "a/b", &p, &s).ok());
  EXPECT_EQ(p, "dlock:a/b");
  EXPECT_EQ(s, "");
  ASSERT_TRUE(Parse("dynamodb://locks?region=r&sort_key=sk&prefix=app.", &c).ok());
  ASSERT_TRUE(SplitLockName(c, "orders/42/line/7", &p, &s).ok());
  EXPECT_EQ(p, "app.orders");
  EXPECT_EQ(s, "42/line/7");
  EXPECT_EQ(SplitLockName(c, "orders", &p, &s).code(), Code::kInvalidArgument);
  EXPECT_EQ(SplitLockName(c, "orders/", &p, &s).code(), Code::kInvalidArgument);
  EXPECT_EQ(SplitLockName(c, "/42", &p, &s).code(), Code::kInvalidArgument);
}

TEST_F(DynamoConfigTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xbc" "n\xc3\xaf" "code \xe1\x88\xb4 \xf0\x9f\x94\x92"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));            // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));        // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));    // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

}  // namespace
}  // namespace dlock::dynamodb
