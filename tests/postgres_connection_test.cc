// The PostgreSQL backend's connection on the loop (src/postgres/connection.h, issue 40) against a
// real PostgreSQL: statements with parameters answered in order, errors that name what failed,
// notifications, and every call bounded, whatever the server does (stopped, killed, gone). With
// the blocking pool (blocking_session.h): statements prepared once per connection, and sent
// again as text when the server cannot run them by name.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/url.h"
#include "loop/event_loop.h"
#include "postgres/blocking_session.h"
#include "postgres/connection.h"
#include "support/postgres_server.h"

namespace dlock::postgres {
namespace {

using namespace std::chrono_literals;
using dlock_test::PostgresServer;

struct Outcome {
  Status status;
  Answer answer;
};

class PostgresConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pg_.running());
    ASSERT_TRUE(EventLoop::Start(&loop_).ok());
  }
  void TearDown() override {
    if (loop_) loop_->RunSync([this] { conns_.clear(); });
    if (loop_) loop_->Stop();
  }
  // A config that outlives the connections that use it (kept until the fixture goes).
  const PostgresConfig* Config(const std::string& url_text) {
    Url url;
    configs_.emplace_back();
    EXPECT_TRUE(ParseUrl(url_text, &url).ok());
    EXPECT_TRUE(ParsePostgresUrl(url, &configs_.back()).ok());
    return &configs_.back();
  }
  // A connection on the loop (kept until TearDown), told notifications into notes_.
  Connection* Open(const PostgresConfig* config) {
    Connection* c = nullptr;
    loop_->RunSync([&] {
      conns_.push_back(std::make_unique<Connection>(loop_.get(), config, [this](const std::string& ch, const std::string& p) {
        std::lock_guard<std::mutex> lock(mu_);
        notes_.push_back(ch + ":" + p);
      }));
      c = conns_.back().get();
    });
    return c;
  }
  // One statement, waited for.
  Outcome Run(Connection* c, const std::string& sql, std::vector<Value> params = {}, Millis bound = Millis(3000)) {
    auto promise = std::make_shared<std::promise<Outcome>>();
    auto future = promise->get_future();
    loop_->Post([c, sql, params, bound, promise] {
      c->Query(sql, params, Now() + bound, [promise](const Status& s, Answer a) { promise->set_value({s, std::move(a)}); });
    });
    EXPECT_EQ(future.wait_for(30s), std::future_status::ready) << sql;
    return future.get();
  }

  PostgresServer pg_;
  std::deque<PostgresConfig> configs_;
  std::unique_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<Connection>> conns_;  // loop thread
  std::mutex mu_;
  std::vector<std::string> notes_;
};

TEST_F(PostgresConnectionTest, ParametersRowsErrorsAndNotifications) {
  const PostgresConfig* config = Config(pg_.url());
  Connection* c = Open(config);
  Outcome o = Run(c, "SELECT $1::text || '!', NULL::text, $2::int + 1", {std::string("x'); DROP TABLE t; --"), std::string("41")});
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  ASSERT_EQ(o.answer.rows.size(), 1u);
  EXPECT_EQ(o.answer.rows[0][0], std::optional<std::string>("x'); DROP TABLE t; --!")) << "a value went as text, verbatim";
  EXPECT_EQ(o.answer.rows[0][1], std::nullopt);
  EXPECT_EQ(o.answer.rows[0][2], std::optional<std::string>("42"));

  o = Run(c, "SELECT * FROM no_such_table");
  EXPECT_EQ(o.status.code(), Code::kBackendError);
  EXPECT_NE(o.status.message().find("no_such_table"), std::string::npos) << o.status.message();
  EXPECT_NE(o.status.message().find("postgres 127.0.0.1:"), std::string::npos) << o.status.message();
  EXPECT_FALSE(o.answer.maybe_applied);
  EXPECT_TRUE(Run(c, "SELECT 1").status.ok()) << "an error left the connection unusable";

  // Notifications reach the listening connection while it is idle.
  ASSERT_TRUE(Run(c, "LISTEN dlock_test_channel").status.ok());
  Connection* other = Open(config);
  ASSERT_TRUE(Run(other, "SELECT pg_notify('dlock_test_channel', $1)", {std::string("lock a")}).status.ok());
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!notes_.empty()) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "no notification";
    std::this_thread::sleep_for(10ms);
  }
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(notes_, std::vector<std::string>{"dlock_test_channel:lock a"});
}

TEST_F(PostgresConnectionTest, EveryCallIsBoundedWhateverTheServerDoes) {
  const PostgresConfig* config = Config(pg_.url() + "?connect_timeout_ms=500");
  Connection* c = Open(config);
  ASSERT_TRUE(Run(c, "SELECT 1").status.ok());

  // A server that hangs: the statement fails at its bound, and may have run.
  pg_.Stop();
  auto start = std::chrono::steady_clock::now();
  Outcome o = Run(c, "SELECT 2", {}, Millis(400));
  EXPECT_EQ(o.status.code(), Code::kIoError) << o.status.message();
  EXPECT_TRUE(o.answer.maybe_applied);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  // A connect to a hung server fails at connect_timeout_ms.
  start = std::chrono::steady_clock::now();
  o = Run(c, "SELECT 3", {}, Millis(5000));
  EXPECT_EQ(o.status.code(), Code::kIoError) << o.status.message();
  EXPECT_NE(o.status.message().find("connect_timeout_ms"), std::string::npos) << o.status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  pg_.Cont();
  EXPECT_TRUE(Run(c, "SELECT 4").status.ok()) << "no new connection after the server came back";

  // A server that died: its connection's statement fails at once; after a restart, the next works.
  pg_.Kill();
  o = Run(c, "SELECT 5");
  EXPECT_EQ(o.status.code(), Code::kIoError) << o.status.message();
  ASSERT_TRUE(pg_.Restart());
  EXPECT_TRUE(Run(c, "SELECT 6").status.ok());

  // Nobody there at all.
  o = Run(Open(Config("postgres://dlock@127.0.0.1:1/dlock")), "SELECT 7");
  EXPECT_EQ(o.status.code(), Code::kIoError);
  EXPECT_NE(o.status.message().find("127.0.0.1:1/dlock"), std::string::npos) << o.status.message();
}

// Both sessions, one statement at a time: the loop's connection, or the blocking pool (whose
// one connection is reused when calls come one after another).
class PreparedStatementsTest : public PostgresConnectionTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    PostgresConnectionTest::SetUp();
    const PostgresConfig* config = Config(pg_.url());
    if (GetParam()) {
      blocking_ = std::make_unique<BlockingSession>(config, nullptr);
    } else {
      loop_connection_ = Open(config);
    }
  }
  Outcome SendWithin(const std::string& sql, std::vector<Value> params, Millis bound) {
    if (loop_connection_ != nullptr) return Run(loop_connection_, sql, std::move(params), bound);
    Outcome out;
    blocking_->Query(sql, std::move(params), Now() + bound, [&out](const Status& s, Answer a) {
      out = {s, std::move(a)};
    });
    return out;
  }
  Outcome Send(const std::string& sql, std::vector<Value> params = {}) {
    return SendWithin(sql, std::move(params), Millis(3000));
  }
  // The statements prepared on the session's connection, as the server lists them there:
  // "name|text|times run" each.
  std::vector<std::string> Prepared() {
    Outcome o = Send("SELECT name, statement, generic_plans + custom_plans FROM pg_prepared_statements ORDER BY name");
    EXPECT_TRUE(o.status.ok()) << o.status.message();
    std::vector<std::string> out;
    for (const Row& row : o.answer.rows) out.push_back(*row.at(0) + "|" + *row.at(1) + "|" + *row.at(2));
    return out;
  }

  Connection* loop_connection_ = nullptr;
  std::unique_ptr<BlockingSession> blocking_;
};

INSTANTIATE_TEST_SUITE_P(Sessions, PreparedStatementsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "blocking" : "loop"; });

TEST_P(PreparedStatementsTest, PreparedOncePerConnectionRunByNameAndAsTextWhereTheServerLacksIt) {
  const std::string sql = "SELECT $1::int + 1";
  const std::string listed = PreparedName(sql) + "|" + sql + "|";
  // Its name taken already, with its text (as on a pooler's server connection where another
  // client prepared it): used as it is.
  const std::string by_hand = "PREPARE " + PreparedName(sql) + " AS " + sql;
  ASSERT_TRUE(Send(by_hand).status.ok());
  for (int i = 0; i < 3; ++i) {
    Outcome o = Send(sql, {std::to_string(i)});
    ASSERT_TRUE(o.status.ok()) << o.status.message();
    EXPECT_EQ(o.answer.rows.at(0).at(0), std::optional<std::string>(std::to_string(i + 1)));
  }
  EXPECT_EQ(Prepared(), std::vector<std::string>{PreparedName(sql) + "|" + by_hand + "|3"}) << "run three times by name";

  // A connection the server closed: the next one prepares it anew, once.
  EXPECT_FALSE(Send("SELECT pg_terminate_backend(pg_backend_pid())").status.ok());
  ASSERT_TRUE(Send(sql, {std::string("7")}).status.ok());
  ASSERT_TRUE(Send(sql, {std::string("8")}).status.ok());
  EXPECT_EQ(Prepared(), std::vector<std::string>{listed + "2"}) << "parsed once, run twice by name";

  // The statement gone from the connection, as on a transaction pooler's other server
  // connection: the call runs as text, and the session sends text from then on.
  ASSERT_TRUE(Send("DEALLOCATE ALL").status.ok());
  Outcome o = Send(sql, {std::string("41")});
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.answer.rows.at(0).at(0), std::optional<std::string>("42"));
  ASSERT_TRUE(Send(sql, {std::string("1")}).status.ok());
  EXPECT_EQ(Prepared(), std::vector<std::string>{}) << "prepared again after a pooler showed itself";
}

// A prepared statement whose plan no longer fits (its result's columns changed, as when a newer
// dlock replaces the table's functions) is deallocated and runs as text; the next call prepares
// it anew. The connection stays.
TEST_P(PreparedStatementsTest, AStatementWhosePlanNoLongerFitsIsDeallocatedAndPreparedAnew) {
  for (const char* step : {"DROP TABLE IF EXISTS shape", "CREATE TABLE shape (a int)", "INSERT INTO shape VALUES (1)"}) {
    ASSERT_TRUE(Send(step).status.ok()) << step;
  }
  const std::string sql = "SELECT * FROM shape WHERE a >= $1::int";
  Outcome o = Send(sql, {std::string("0")});
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.answer.rows.at(0).size(), 1u);
  const Outcome before = Send("SELECT pg_backend_pid()");
  ASSERT_TRUE(Send("ALTER TABLE shape ADD COLUMN b int DEFAULT 2").status.ok());
  o = Send(sql, {std::string("0")});
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  ASSERT_EQ(o.answer.rows.at(0).size(), 2u);
  EXPECT_EQ(o.answer.rows.at(0).at(1), std::optional<std::string>("2"));
  EXPECT_EQ(Send("SELECT pg_backend_pid()").answer.rows, before.answer.rows) << "a new connection";
  EXPECT_EQ(Prepared(), std::vector<std::string>{}) << "the stale statement is still there";
  ASSERT_TRUE(Send(sql, {std::string("0")}).status.ok());
  EXPECT_EQ(Prepared(), std::vector<std::string>{PreparedName(sql) + "|" + sql + "|1"});
}

// A server that hangs while a statement is being prepared: the call ends at its bound, and says
// the statement did not run (only its prepare was sent); a statement run by name that hangs may
// have run.
TEST_P(PreparedStatementsTest, APrepareCutShortByTheBoundSaysTheStatementDidNotRun) {
  ASSERT_TRUE(Send("SELECT $1::int", {std::string("1")}).status.ok());
  pg_.Stop();
  auto start = std::chrono::steady_clock::now();
  Outcome o = SendWithin("SELECT $1::int + 2", {std::string("1")}, Millis(400));
  EXPECT_EQ(o.status.code(), Code::kIoError) << o.status.message();
  EXPECT_FALSE(o.answer.maybe_applied) << "only its prepare was sent";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  pg_.Cont();
  ASSERT_TRUE(Send("SELECT $1::int", {std::string("1")}).status.ok());  // prepared on this connection
  pg_.Stop();
  o = SendWithin("SELECT $1::int", {std::string("1")}, Millis(400));
  EXPECT_EQ(o.status.code(), Code::kIoError) << o.status.message();
  EXPECT_TRUE(o.answer.maybe_applied) << "run by name, it may have run";
  pg_.Cont();
}

}  // namespace
}  // namespace dlock::postgres
