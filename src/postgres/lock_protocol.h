// The PostgreSQL backend's lock protocol: calls of the lock table's functions (schema.sql), with
// every name and value as a parameter, written once over a Session (blocking or on the loop).
//
// - Holds are rows keyed by (name, hold id), the hold id WaiterId(owner value): public, while
//   the owner value (the secret token) is stored for the server to check and never read back.
// - Every function is idempotent for its hold, so a statement whose answer was lost (the
//   connection broke after it was sent) is sent once more over a new connection while its
//   deadline lasts: an acquire answers its hold again, a renewal renews again, and a release
//   that finds nothing after its first try may have landed is Ok. An acquire still unanswered
//   then, or a release that failed, is given back in the background (SetGiveBack).
// - A table dropped by hand is a loss: a hold's call that finds no table answers NotHeld.
// - Fair waiting: an acquire that will wait keeps a place in the name's line on the server;
//   releases serve the line's head and tell each waiter served by a notification, parsed by
//   ParseNotification.
#ifndef DLOCK_POSTGRES_LOCK_PROTOCOL_H_
#define DLOCK_POSTGRES_LOCK_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "postgres/postgres_config.h"
#include "postgres/session.h"

namespace dlock::postgres {

// The longest wait or lease left an answer may report (a year): a server's number is clamped
// to it before use.
inline constexpr int64_t kMaxHolderTtlMs = 365LL * 24 * 3600 * 1000;

// The table's functions (schema.sql): each named table + "_" + one of these.
inline constexpr const char* kFunctionNames[] = {"acquire", "release", "renew", "set_value", "inspect",
                                                 "serve", "leave", "sweep", "request", "break", "release_all"};

// The schema's text (schema.sql, embedded at build time), and it made ready to run for a
// table: quoted is the table's quoted name (PQescapeIdentifier), quoted_fn(suffix) the quoted
// name of its function table + "_" + suffix.
extern const char kSchemaSql[];
std::string SchemaFor(const PostgresConfig& config, const std::string& quoted,
                      const std::function<std::string(const std::string&)>& quoted_fn);

// The statements for one table, quoted once the client can ask libpq (PostgresBackend::Check).
struct Statements {
  std::string acquire, release, renew, set_value, inspect, leave, request, break_lock, release_all;
  std::string listen;  // LISTEN on the table's channel
};
Statements StatementsFor(const std::function<std::string(const std::string&)>& quoted_fn,
                         const std::string& quoted_table);

// A notification on the table's channel: "r NAME" (released: waiters outside the line may try),
// "g HOLD TOKEN NAME" (the line's waiter HOLD was served, with TOKEN), or "q ID N REASON NAME"
// (a release request ID, REASON N bytes long, for NAME's holders), or "v NAME" (NAME's holders
// or values changed: for observers). False for anything else.
struct Notification {
  bool granted = false, requested = false, changed = false;
  std::string name, hold;
  uint64_t token = 0;
  std::string id, reason;  // a release request's
};
bool ParseNotification(const std::string& payload, Notification* out);

class LockProtocol {
 public:
  using Done = std::function<void(Status)>;
  using AttemptDone = std::function<void(Status, AcquireAttempt)>;
  using InspectDone = std::function<void(Status, LockInfo)>;
  using RenewDone = std::function<void(size_t k, Status)>;

  explicit LockProtocol(const PostgresConfig* config) : config_(config) {}
  // Set once, before any other call (PostgresBackend::Check).
  void SetStatements(Statements statements) { sql_ = std::move(statements); }
  // Called (any thread) with a hold's name, id and owner value when an acquire may have taken
  // it but its answer was lost, or a release could not be confirmed: the backend gives it back
  // in the background (the leave function), so that no lock is left behind for its lease.
  using GiveBack = std::function<void(std::string name, std::string hold, std::string owner)>;
  void SetGiveBack(GiveBack give_back) { give_back_ = std::move(give_back); }
  // The leave function's call for a hold by its parts (a give-back).
  void Leave(Session* s, const std::string& name, const std::string& hold, const std::string& owner,
             TimePoint deadline, Done done);
  const Statements& statements() const { return sql_; }

  void Acquire(Session* s, const LockRequest& request, TimePoint deadline, AttemptDone done);
  void Release(Session* s, std::shared_ptr<const LockState> lock, TimePoint deadline, Done done);
  // Releases every lock of locks in one statement (a closing client's; best effort).
  void ReleaseAll(Session* s, const std::vector<std::shared_ptr<LockState>>& locks, TimePoint deadline, Done done);
  // A fair waiter that stops waiting leaves the line (and gives back a hold it was served).
  void Leave(Session* s, const LockRequest& request, TimePoint deadline, Done done);
  // Renews locks[k] for leases[k] each, in one statement; done(k, status) once per lock.
  void Renew(Session* s, std::vector<std::shared_ptr<const LockState>> locks, std::vector<uint64_t> leases,
             TimePoint deadline, RenewDone done);
  void SetValue(Session* s, std::shared_ptr<const LockState> lock, const std::string& value, TimePoint deadline,
                Done done);
  void Inspect(Session* s, const std::string& name, TimePoint deadline, InspectDone done);
  // Breaks name (now: frees it at once); done gets what was broken (Backend::Break).
  void Break(Session* s, const std::string& name, const std::string& reason, bool now, TimePoint deadline,
             std::function<void(Status, BreakResult)> done);
  // Asks name's holders to let go (request id, reason); done gets how many holds were asked.
  void RequestRelease(Session* s, const std::string& name, const std::string& id, const std::string& reason,
                      TimePoint deadline, std::function<void(Status, uint32_t asked)> done);

 private:
  // Runs a statement; one whose answer was lost is sent again while deadline lasts. done gets
  // whether any try may have run (for a release's settling).
  void Run(Session* s, const std::string& sql, std::vector<Value> params, TimePoint deadline,
           std::function<void(const Status&, Answer, bool maybe_ran)> done, int tries = 0);
  // An error of a statement, in words a user can act on (the table not prepared, or gone).
  Status Explained(const Status& s, const Answer& a) const;
  Status Garbage(const std::string& what) const;
  Status NotHeld(const std::string& name) const;
  // A hold's call that found no table: the hold is gone with it.
  bool TableGone(const Answer& a) const;

  const PostgresConfig* config_;
  Statements sql_;
  GiveBack give_back_;
};

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_LOCK_PROTOCOL_H_
