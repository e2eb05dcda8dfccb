// postgres://: a real PostgreSQL (support/postgres_server.h), its lock table made by
// dlock_backend_prepare as a user makes it.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include "conformance/backend.h"
#include "support/postgres_server.h"
#include "support/unread_bytes.h"

namespace dlock_test {
namespace {

// s as a SQL string literal.
std::string Literal(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

class PostgresBackend : public BackendServer {
 public:
  PostgresBackend() { Prepare(); }
  bool running() const override { return pg_.running() && prepared_; }
  std::string url() const override { return pg_.url(); }
  // Each call a table nobody prepared.
  std::string UnpreparedUrl() override { return pg_.url() + "?table=unprepared_" + std::to_string(++unprepared_); }
  std::string address() const override { return "127.0.0.1:" + std::to_string(pg_.port()); }
  // The name's holds (every row but the name's own, which keeps its fencing counter).
  bool DeleteLock(const std::string& name) override {
    std::optional<std::string> deleted =
        pg_.Sql("WITH d AS (DELETE FROM dlock_locks WHERE name = " + Literal(name) + " AND hold <> '' RETURNING 1) "
                "SELECT count(*) FROM d");
    return deleted && *deleted != "0\n" && *deleted != "0";
  }
  // The name's waiters in line whose place has not lapsed.
  int InLine(const std::string& name) override {
    std::optional<std::string> n = pg_.Sql("SELECT count(*) FROM dlock_locks WHERE name = " + Literal(name) +
                                           " AND kind IN ('X', 'S', 'P') AND expires > clock_timestamp()");
    return n ? std::atoi(n->c_str()) : -1;
  }
  void Kill() override { pg_.Kill(); }
  // Back on the same port, its table emptied: as an unlogged table comes back from a crash (the
  // tokens then rise on the clock floor alone).
  bool Restart() override { return pg_.Restart() && Prepare() && pg_.Sql("TRUNCATE dlock_locks").has_value(); }
  // SIGSTOP: a statement sent meanwhile waits unread in its socket.
  bool HoldAnswers() override {
    pg_.Stop();
    const bool stopped = pg_.pid() > 0 && WaitStopped(pg_.pid());
    unread_at_hold_ = UnreadBytesOnPorts({pg_.port()});
    return stopped;
  }
  bool RequestHeld() override { return UnreadBytesOnPorts({pg_.port()}) > unread_at_hold_; }
  void ReleaseAnswers() override { pg_.Cont(); }

 private:
  bool Prepare() {
    prepared_ = pg_.running() && dlock_backend_prepare(pg_.url().c_str(), 10000) == DLOCK_OK;
    if (!prepared_) ADD_FAILURE() << "dlock_backend_prepare: " << dlock_last_error() << "\n" << pg_.LogTail();
    return prepared_;
  }

  PostgresServer pg_;
  bool prepared_ = false;
  int unprepared_ = 0;
  int64_t unread_at_hold_ = 0;
};

}  // namespace

BackendFactory PostgresBackendFactory() {
  return {"postgres", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS | DLOCK_CAP_FAIR |
                          DLOCK_CAP_RELEASE_REQUEST | DLOCK_CAP_BREAK | DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY |
                          DLOCK_CAP_OBSERVE_PUSH,
          [] { return std::make_unique<PostgresBackend>(); }};
}

}  // namespace dlock_test
