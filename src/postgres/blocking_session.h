// Statements from callers' threads (the blocking calls), over a pool of libpq connections: each
// call takes an idle connection or opens one, and gives it back when answered. Bounded as the
// loop's connection is (connection.h): the connect by connect_timeout_ms, each statement by its
// deadline, measured on the monotonic clock while poll() waits on libpq's socket. A connection
// that fails or times out is closed, never pooled again.
#ifndef DLOCK_POSTGRES_BLOCKING_SESSION_H_
#define DLOCK_POSTGRES_BLOCKING_SESSION_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/connection_count.h"
#include "postgres/postgres_config.h"
#include "postgres/session.h"

typedef struct pg_conn PGconn;

namespace dlock::postgres {

class BlockingSession : public Session {
 public:
  // count: the client's open connections (null: none counted, as for prepare).
  BlockingSession(const PostgresConfig* config, std::shared_ptr<ConnectionCount> count)
      : config_(config), count_(std::move(count)) {}
  ~BlockingSession() override;
  BlockingSession(const BlockingSession&) = delete;
  BlockingSession& operator=(const BlockingSession&) = delete;

  void Query(std::string sql, std::vector<Value> params, TimePoint deadline, Done done) override;
  // Several statements in one string (no parameters: libpq's simple query protocol), for
  // preparing the table.
  Status Script(const std::string& sql, TimePoint deadline);
  // name as a quoted identifier (PQescapeIdentifier, on a pooled connection).
  Status QuoteIdentifier(const std::string& name, TimePoint deadline, std::string* out);

 private:
  // A connection from the pool, or a new one connected by deadline.
  Status Take(TimePoint deadline, PGconn** out);
  void Give(PGconn* conn);
  void Discard(PGconn* conn);
  // Waits until conn's socket is readable (and writable, when write), or deadline.
  bool WaitFor(PGconn* conn, bool write, TimePoint deadline);
  // Sends what libpq holds and reads every result of the statement sent.
  Status Finish(PGconn* conn, TimePoint deadline, Answer* answer);
  // params == nullptr: sql is a script (PQsendQuery).
  Status Run(const std::string& sql, const std::vector<Value>* params, TimePoint deadline, Answer* answer);

  const PostgresConfig* config_;
  std::shared_ptr<ConnectionCount> count_;
  std::mutex mu_;
  std::vector<PGconn*> idle_;
};

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_BLOCKING_SESSION_H_
