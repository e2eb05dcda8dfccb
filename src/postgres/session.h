// Where the lock protocol's statements go: a connection on the client's loop (connection.h) or
// the blocking pool for callers' threads (blocking_session.h). The protocol is written once
// over this (lock_protocol.h).
#ifndef DLOCK_POSTGRES_SESSION_H_
#define DLOCK_POSTGRES_SESSION_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "postgres/postgres_config.h"

typedef struct pg_result PGresult;
typedef struct pg_conn PGconn;

namespace dlock::postgres {

using Value = std::optional<std::string>;  // nullopt: SQL NULL
using Row = std::vector<Value>;

struct Answer {
  std::vector<Row> rows;      // text format
  bool maybe_applied = false; // failed after the statement was sent: it may have run
  std::string sqlstate;       // the server's error code when it refused the statement
};

class Session {
 public:
  using Done = std::function<void(const Status&, Answer)>;
  virtual ~Session() = default;
  // Runs sql with params ($1, $2, ... as text), over by deadline. done runs exactly once: before
  // Query returns on a blocking session, later on the loop on the loop's.
  virtual void Query(std::string sql, std::vector<Value> params, TimePoint deadline, Done done) = 0;
};

// Statements with parameters are prepared once per connection and then run by name: parsing
// and planning the protocol's calls as text took about a quarter of an uncontended cycle
// (bench/README.md). The name is "dlock_" and a 64-bit FNV-1a hash of the text in hex, so a
// name means one text wherever it is found (a pooler's server connection lent to several
// clients).
std::string PreparedName(const std::string& sql);
// Why running a prepared statement failed before it ran, when it did: the server has no
// statement of that name (26000: a transaction pooler lent a server connection it was not
// prepared on; it runs as text, and the session sends text from then on), or its plan no longer
// fits (0A000: "cached plan must not change result type", the table's functions replaced by a
// newer dlock; the statement is deallocated, it runs as text this once, and the next call
// prepares it anew). Running it again is safe: it never ran.
inline bool PreparedStatementMissing(const std::string& sqlstate) { return sqlstate == "26000"; }
// A prepare refused because the name is taken (42P05): by the same text, as the name is its
// hash (another client prepared it on a pooler's server connection). It counts as prepared.
inline bool PreparedAlready(const std::string& sqlstate) { return sqlstate == "42P05"; }
inline bool PreparedPlanStale(const std::string& sqlstate) { return sqlstate == "0A000"; }

// A connection to config's servers begun without blocking (PQconnectStartParams); the caller
// drives PQconnectPoll. nullptr when libpq is out of memory.
PGconn* StartConnecting(const PostgresConfig& config);
// What one of libpq's results adds to an answer: its rows, or the first error among a
// statement's results (*error, when it is still Ok). where names the deployment in messages.
void ReadResult(PGresult* result, const std::string& where, Answer* answer, Status* error);
// A statement whose deadline passed before it could be sent (it did not run).
inline Status StatementLate(const std::string& where) {
  return Status::IoError(where + ": the statement's time ran out before it was sent");
}
// A connection-level failure in libpq's words (PQerrorMessage), EAUTH when credentials were
// refused, EIO otherwise.
Status LibpqConnectionError(const char* libpq_message, const std::string& where, const std::string& what);

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_SESSION_H_
