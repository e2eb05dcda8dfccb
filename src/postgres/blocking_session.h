// Statements from callers' threads (the blocking calls), over a pool of libpq connections: each
// call takes an idle connection or opens one, and gives it back when answered. Bounded as the
// loop's connection is (connection.h): the connect by connect_timeout_ms, each statement by its
// deadline, measured on the monotonic clock while poll() waits on libpq's socket. A connection
// that fails or times out is closed, never pooled again. Statements with parameters are prepared
// once per connection and run by name (session.h: PreparedName).
#ifndef DLOCK_POSTGRES_BLOCKING_SESSION_H_
#define DLOCK_POSTGRES_BLOCKING_SESSION_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
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
  struct Pooled {
    PGconn* conn = nullptr;
    std::unordered_set<std::string> prepared;  // the statements prepared on it, by name
  };
  // A connection from the pool, or a new one connected by deadline.
  Status Take(TimePoint deadline, Pooled* out);
  void Give(Pooled pooled);
  void Discard(PGconn* conn);
  // Prepares sql as name on pooled, unless it is already: Ok, or the statement's error (its
  // text refused, Answer::sqlstate set; the connection still usable), or the connection's.
  Status Prepare(Pooled* pooled, const std::string& name, const std::string& sql, int params, TimePoint deadline,
                 Answer* answer);
  // Waits until conn's socket is readable (and writable, when write), or deadline.
  bool WaitFor(PGconn* conn, bool write, TimePoint deadline);
  // Sends what libpq holds and reads every result of the statement sent.
  Status Finish(PGconn* conn, TimePoint deadline, Answer* answer);
  // params == nullptr: sql is a script (PQsendQuery).
  Status Run(const std::string& sql, const std::vector<Value>* params, TimePoint deadline, Answer* answer);
  // Sends sql over pooled, by name (prepared first if it is not yet) when name is not empty, and
  // reads its answer. *sent: the statement, as last sent, may have run (false when it was not
  // sent, or was refused before it ran and not sent again).
  Status Exchange(Pooled* pooled, const std::string& sql, const std::vector<Value>* params, const std::string& name,
                  TimePoint deadline, Answer* answer, bool* sent);

  const PostgresConfig* config_;
  std::shared_ptr<ConnectionCount> count_;
  std::mutex mu_;
  std::vector<Pooled> idle_;
  std::atomic<bool> prepare_{true};  // false once a pooler showed it cannot carry them
};

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_BLOCKING_SESSION_H_
