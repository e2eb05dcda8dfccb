// PostgresServer: a real PostgreSQL starts (as the postgres user when the tests run as root),
// answers SQL, keeps what was committed across a crash and a restart on its port, hangs while
// stopped, and is gone, by pid, with its object.
#include "support/postgres_server.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <string>

namespace dlock_test {
namespace {

TEST(PostgresServerTest, StartsAnswersSurvivesACrashAndIsStoppedByPid) {
  pid_t pid = -1;
  {
    PostgresServer pg;
    ASSERT_TRUE(pg.running()) << pg.LogTail();
    pid = pg.pid();
    EXPECT_EQ(pg.url(), "postgres://dlock@127.0.0.1:" + std::to_string(pg.port()) + "/dlock");
    EXPECT_EQ(pg.Sql("SELECT current_user"), "dlock\n");
    ASSERT_TRUE(pg.Sql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)"));
    std::string error;
    EXPECT_FALSE(pg.Sql("SELECT * FROM no_such_table", &error));
    EXPECT_NE(error.find("no_such_table"), std::string::npos) << error;

    pg.Kill();
    EXPECT_FALSE(pg.running());
    EXPECT_FALSE(pg.Sql("SELECT 1"));
    ASSERT_TRUE(pg.Restart()) << pg.LogTail();
    EXPECT_EQ(pg.Sql("SELECT v FROM t"), "7\n") << "a committed row was lost in the crash";
    EXPECT_EQ(pg.Sql("SELECT datname FROM pg_database WHERE datname = 'dlock'"), "dlock\n");
    pid = pg.pid();
  }
  EXPECT_EQ(kill(pid, 0), -1) << "the server outlived its object";
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace dlock_test
