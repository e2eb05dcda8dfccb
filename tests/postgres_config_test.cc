// The PostgreSQL backend's URL: what libpq is given, and clear refusals that never
// show the password.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/url.h"
#include "postgres/postgres_config.h"

namespace dlock::postgres {
namespace {

Status ParsePostgres(const std::string& text, PostgresConfig* out) {
  Url url;
  Status s = ParseUrl(text, &url);
  return s.ok() ? ParsePostgresUrl(url, out) : s;
}

std::map<std::string, std::string> Keywords(const PostgresConfig& c) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : c.ConnectParams()) m[k] = v;
  return m;
}

TEST(PostgresUrlTest, HostsDatabaseAndLibpqKeywords) {
  PostgresConfig c;
  ASSERT_TRUE(ParsePostgres("postgres://app:s3cret@db1,db2:5433/locks?target_session_attrs=read-write&table=jobs_locks", &c).ok());
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[0].port, 5432);
  EXPECT_EQ(c.database, "locks");
  EXPECT_EQ(c.table, "jobs_locks");
  EXPECT_FALSE(c.unlogged);
  EXPECT_EQ(c.Describe(), "postgres db1:5432,db2:5433/locks");
  auto k = Keywords(c);
  EXPECT_EQ(k["host"], "db1,db2");
  EXPECT_EQ(k["port"], "5432,5433");
  EXPECT_EQ(k["dbname"], "locks");
  EXPECT_EQ(k["user"], "app");
  EXPECT_EQ(k["password"], "s3cret");
  EXPECT_EQ(k["target_session_attrs"], "read-write");
  EXPECT_EQ(k["sslmode"], "disable");

  ASSERT_TRUE(ParsePostgres("postgresql://[::1]/d?unlogged=1", &c).ok());
  EXPECT_TRUE(c.unlogged);
  EXPECT_EQ(c.table, "dlock_locks");
  EXPECT_EQ(c.Describe(), "postgres [::1]:5432/d");
  EXPECT_EQ(Keywords(c).count("user"), 0u) << "no user in the URL: libpq's default";
}

TEST(PostgresUrlTest, TlsParametersMapOntoLibpqs) {
  PostgresConfig c;
  ASSERT_TRUE(ParsePostgres("postgres://h/d?tls=1", &c).ok());
  EXPECT_EQ(Keywords(c)["sslmode"], "verify-full");
  ASSERT_TRUE(ParsePostgres("postgres://h/d?tls=1&tls_verify=0", &c).ok());
  EXPECT_EQ(Keywords(c)["sslmode"], "require");
  EXPECT_NE(c.Describe().find("tls_verify=0"), std::string::npos);
}

TEST(PostgresUrlTest, BadUrlsSayWhatIsWrongAndNeverThePassword) {
  PostgresConfig c;
  auto error = [&](const std::string& url) {
    Status s = ParsePostgres(url, &c);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << url;
    EXPECT_EQ(s.message().find("s3cret"), std::string::npos) << s.message();
    return s.message();
  };
  EXPECT_NE(error("postgres://u:s3cret@h").find("name the database"), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/a/b").find("one segment"), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?unlogged=yes").find("unlogged="), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?prefix=app:").find("takes no prefix="), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?table=").find("table="), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?table=" + std::string(49, 't')).find("table="), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?target_session_attrs=leader").find("target_session_attrs='leader'"),
            std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?tls=1&sni=x").find("sni="), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?ca=/x").find("TLS is off"), std::string::npos);
  EXPECT_NE(error("postgres://u:s3cret@h/d?sslmode=disable").find("unknown URL parameter 'sslmode'"), std::string::npos);
}

}  // namespace
}  // namespace dlock::postgres
