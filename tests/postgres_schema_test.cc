// The PostgreSQL backend's protocol (src/postgres/schema.sql, issue 40) on a real PostgreSQL,
// called as the backend will call it: who gets a lock, tokens rising across release, expiry on
// the server's clock and a table that lost its rows, the lock kinds, renewals and inspect.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "postgres/lock_protocol.h"
#include "support/postgres_server.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

// schema.sql with its placeholders filled in for table t (a plain identifier here), as the
// backend's prepare fills them in.
std::string Schema(const std::string& t, bool unlogged) {
  dlock::postgres::PostgresConfig config;
  config.table = t;
  config.unlogged = unlogged;
  return dlock::postgres::SchemaFor(config, "\"" + t + "\"", [&](const std::string& f) { return "\"" + t + "_" + f + "\""; });
}

// An answer's fields: one row, columns split on '|'.
std::vector<std::string> Fields(const std::string& row) {
  std::vector<std::string> out;
  std::string line = row.substr(0, row.find('\n'));
  size_t start = 0;
  for (size_t bar; (bar = line.find('|', start)) != std::string::npos; start = bar + 1) {
    out.push_back(line.substr(start, bar - start));
  }
  out.push_back(line.substr(start));
  return out;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

struct Try {
  bool acquired = false;
  uint64_t token = 0;
  std::string ttl_ms;  // "" = none given
  std::string why;
};

class PostgresSchemaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = new PostgresServer();
    std::string error;
    ASSERT_TRUE(pg_->Sql(Schema("dlock_locks", false), &error)) << error;
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(pg_ != nullptr && pg_->running()); }

  static std::string Q(const std::string& v) { return "'" + v + "'"; }  // the tests' values hold no quote
  static Try Acquire(const std::string& name, const std::string& hold, char kind, const std::string& owner,
                     int64_t lease_ms, int permits = 0, int take = 1) {
    std::string error;
    auto out = pg_->Sql("SELECT * FROM dlock_locks_acquire(" + Q(name) + ", " + Q(hold) + ", '" + kind + "', " +
                            std::to_string(permits) + ", " + std::to_string(take) + ", " + Q(owner) + ", " +
                            std::to_string(lease_ms) + ", NULL)",
                        &error);
    EXPECT_TRUE(out.has_value()) << error;
    Try t;
    if (!out) return t;
    auto f = Fields(*out);
    EXPECT_EQ(f.size(), 4u) << *out;
    if (f.size() != 4) return t;
    t.acquired = f[0] == "t";
    t.token = std::stoull(f[1]);
    t.ttl_ms = f[2];
    t.why = f[3];
    return t;
  }
  static std::string Release(const std::string& name, const std::string& hold, const std::string& owner) {
    auto out = pg_->Sql("SELECT dlock_locks_release(" + Q(name) + ", " + Q(hold) + ", " + Q(owner) + ")");
    return out ? out->substr(0, out->find('\n')) : "error";
  }
  static uint64_t ServerMicros() {
    auto out = pg_->Sql("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint");
    return out ? std::stoull(*out) : 0;
  }

  static PostgresServer* pg_;
};

PostgresServer* PostgresSchemaTest::pg_ = nullptr;

TEST_F(PostgresSchemaTest, OneHolderAtATimeAndTokensRise) {
  const uint64_t before = ServerMicros();
  Try a = Acquire("job", "h1", 'x', "secret1|worker-1", 10000);
  ASSERT_TRUE(a.acquired);
  EXPECT_GE(a.token, before) << "the token's floor is the server's clock in µs";
  Try b = Acquire("job", "h2", 'x', "secret2", 10000);
  EXPECT_FALSE(b.acquired);
  EXPECT_GT(std::stoll(b.ttl_ms), 9000);
  EXPECT_LE(std::stoll(b.ttl_ms), 10000);
  Try again = Acquire("job", "h1", 'x', "secret1|worker-1", 10000);
  EXPECT_TRUE(again.acquired) << "an earlier try whose answer was lost";
  EXPECT_EQ(again.token, a.token);

  EXPECT_EQ(Release("job", "h1", "secret2"), "f") << "released by another owner";
  EXPECT_EQ(Release("job", "h1", "secret1|worker-1"), "t");
  EXPECT_EQ(Release("job", "h1", "secret1|worker-1"), "f") << "released twice";
  Try c = Acquire("job", "h2", 'x', "secret2", 0);
  ASSERT_TRUE(c.acquired);
  EXPECT_GT(c.token, a.token);
  Try d = Acquire("job", "h3", 'x', "secret3", 10000);
  EXPECT_FALSE(d.acquired);
  EXPECT_EQ(d.ttl_ms, "-1") << "a hold without a lease never ends by itself";
  EXPECT_EQ(Release("job", "h2", "secret2"), "t");
}

// Eight acquires of one free name, made to meet: each session first waits on an advisory lock
// a ninth holds, and once all eight wait, the ninth is ended and they go at once. A trigger
// the test adds makes every write of a name's row take 50 ms, so that each acquire's look at
// the holds and its writes lie far apart. Round 0's name is new (its row is made by one of
// them: the others wait on that insert); the others' rows stand from an earlier hold, and each
// acquire locks it (FOR UPDATE) before it looks. Exactly one gets the lock each time (without
// the row lock, several did: checked by removing it).
TEST_F(PostgresSchemaTest, ConcurrentAcquiresOfAFreeNameLetOneIn) {
  constexpr int kSessions = 8;
  ASSERT_TRUE(pg_->Sql(
      "CREATE FUNCTION slow_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); "
      "RETURN NEW; END $$; CREATE TRIGGER slow_write BEFORE UPDATE ON dlock_locks FOR EACH ROW WHEN (OLD.hold = '') "
      "EXECUTE FUNCTION slow_write()"));
  for (int round = 0; round < 3; ++round) {
    const std::string name = "race" + std::to_string(round);
    if (round > 0) {  // a name used before: its row stands, the name free
      ASSERT_TRUE(Acquire(name, "first", 'x', "s", 10000).acquired);
      ASSERT_EQ(Release(name, "first", "s"), "t");
    }
    auto gate = pg_->SqlInBackground("SELECT pg_advisory_lock(4242), pg_sleep(60)");
    auto gate_pid = [&] {
      return pg_->Sql("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted");
    };
    ASSERT_TRUE(WaitUntil([&] { return !gate_pid().value_or("").empty(); }, 20s));
    std::vector<std::unique_ptr<ChildProcess>> sessions;
    for (int i = 0; i < kSessions; ++i) {
      const std::string n = std::to_string(i);
      sessions.push_back(pg_->SqlInBackground("SELECT pg_advisory_lock_shared(4242); SELECT acquired FROM dlock_locks_acquire(" +
                                              Q(name) + ", 'h" + n + "', 'x', 0, 1, 's" + n + "', 10000, NULL)"));
    }
    ASSERT_TRUE(WaitUntil([&] {
      return pg_->Sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted") ==
             std::to_string(kSessions) + "\n";
    }, 20s));
    ASSERT_TRUE(pg_->Sql("SELECT pg_terminate_backend(" + gate_pid().value_or("0") + ")"));
    int winners = 0;
    for (auto& s : sessions) {
      EXPECT_EQ(s->Wait(30s), 0) << s->output();
      const std::string out = s->output();
      winners += out.find("t\n") != std::string::npos;
    }
    EXPECT_EQ(winners, 1) << name;
    EXPECT_EQ(pg_->Sql("SELECT count(*) FROM dlock_locks_inspect('" + name + "')"), "1\n");
  }
  EXPECT_TRUE(pg_->Sql("DROP TRIGGER slow_write ON dlock_locks; DROP FUNCTION slow_write()"));
}

TEST_F(PostgresSchemaTest, LeasesEndOnTheServersClockAndTheTokenFloorOutlivesLostRows) {
  Try a = Acquire("lease", "h1", 'x', "secret1", 200);
  ASSERT_TRUE(a.acquired);
  std::this_thread::sleep_for(300ms);
  Try b = Acquire("lease", "h2", 'x', "secret2", 10000);
  ASSERT_TRUE(b.acquired) << "the lease did not end on the server";
  EXPECT_GT(b.token, a.token);
  EXPECT_EQ(Release("lease", "h1", "secret1"), "f") << "an expired holder released it";

  // The counter far ahead (as tokens issued before a clock that jumped back), then every row
  // of the name lost (an unlogged table after a crash): tokens still rise, from the clock.
  ASSERT_TRUE(pg_->Sql("UPDATE dlock_locks SET token = token + 1000000000 WHERE name = 'lease' AND hold = ''"));
  Try c = Acquire("lease", "h3", 'x', "secret3", 10000);
  EXPECT_FALSE(c.acquired);
  ASSERT_EQ(Release("lease", "h2", "secret2"), "t");
  c = Acquire("lease", "h3", 'x', "secret3", 10000);
  ASSERT_TRUE(c.acquired);
  EXPECT_GT(c.token, b.token + 1000000000 - 1);
  ASSERT_TRUE(pg_->Sql("DELETE FROM dlock_locks WHERE name = 'lease'"));
  Try d = Acquire("lease", "h4", 'x', "secret4", 10000);
  ASSERT_TRUE(d.acquired);
  EXPECT_GT(d.token, b.token) << "tokens went back after the rows were lost";
}

TEST_F(PostgresSchemaTest, SharedHoldsAndSemaphores) {
  ASSERT_TRUE(Acquire("rw", "r1", 's', "s1", 10000).acquired);
  ASSERT_TRUE(Acquire("rw", "r2", 's', "s2", 10000).acquired);
  EXPECT_FALSE(Acquire("rw", "w1", 'x', "s3", 10000).acquired);
  Try sem = Acquire("rw", "p1", 'p', "s4", 10000, 3);
  EXPECT_FALSE(sem.acquired);
  EXPECT_EQ(sem.why, "sort 0") << "a lock while held, asked for as a semaphore";
  EXPECT_EQ(Release("rw", "r1", "s1"), "t");
  EXPECT_EQ(Release("rw", "r2", "s2"), "t");

  ASSERT_TRUE(Acquire("sem", "p1", 'p', "s1", 10000, 3, 2).acquired);
  EXPECT_FALSE(Acquire("sem", "p2", 'p', "s2", 10000, 3, 2).acquired) << "2 + 2 of 3 permits";
  ASSERT_TRUE(Acquire("sem", "p3", 'p', "s3", 10000, 3, 1).acquired);
  EXPECT_EQ(Acquire("sem", "p4", 'p', "s4", 10000, 5).why, "sort 3");
  EXPECT_EQ(Acquire("sem", "x1", 'x', "s5", 10000).why, "sort 3");
  auto holders = pg_->Sql("SELECT kind, permits, take, label, remaining_ms > 9000 FROM dlock_locks_inspect('sem')");
  ASSERT_TRUE(holders);
  EXPECT_EQ(*holders, "p|3|2||t\np|3|1||t\n");
}

TEST_F(PostgresSchemaTest, RenewalsInOneCallAndInspectShowsLabelsNotSecrets) {
  ASSERT_TRUE(Acquire("r1", "h1", 'x', "secret1|node-7", 300).acquired);
  ASSERT_TRUE(Acquire("r2", "h2", 'x', "secret2", 300).acquired);
  auto renewed = pg_->Sql(
      "SELECT * FROM dlock_locks_renew(ARRAY['r1','r2','r3'], ARRAY['h1','h2','h3'], "
      "ARRAY['secret1|node-7','wrong','secret3'], ARRAY[10000,10000,10000]::bigint[]) ORDER BY 1");
  ASSERT_TRUE(renewed);
  EXPECT_EQ(*renewed, "1\n") << "only the first is still its owner's";
  std::this_thread::sleep_for(400ms);
  auto seen = pg_->Sql("SELECT label, remaining_ms > 9000 FROM dlock_locks_inspect('r1')");
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, "node-7|t\n") << "the renewal did not hold, or inspect showed the secret";
  EXPECT_EQ(pg_->Sql("SELECT count(*) FROM dlock_locks_inspect('r2')"), "0\n") << "the unrenewed lease held";
}

}  // namespace
}  // namespace dlock_test
