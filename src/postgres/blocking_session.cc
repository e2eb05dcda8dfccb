#include "postgres/blocking_session.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace dlock::postgres {

BlockingSession::~BlockingSession() {
  for (Pooled& pooled : idle_) Discard(pooled.conn);
}

void BlockingSession::Query(std::string sql, std::vector<Value> params, TimePoint deadline, Done done) {
  Answer answer;
  Status s = Run(sql, &params, deadline, &answer);
  done(s, std::move(answer));
}

Status BlockingSession::Script(const std::string& sql, TimePoint deadline) {
  Answer answer;
  return Run(sql, nullptr, deadline, &answer);
}

Status BlockingSession::QuoteIdentifier(const std::string& name, TimePoint deadline, std::string* out) {
  Pooled pooled;
  Status s = Take(deadline, &pooled);
  if (!s.ok()) return s;
  PGconn* conn = pooled.conn;
  char* quoted = PQescapeIdentifier(conn, name.data(), name.size());
  if (quoted == nullptr) {
    s = Status::InvalidArgument(config_->Describe() + ": table name '" + name + "': " + PQerrorMessage(conn));
  } else {
    *out = quoted;
    PQfreemem(quoted);
  }
  Give(std::move(pooled));
  return s;
}

Status BlockingSession::Take(TimePoint deadline, Pooled* out) {
  for (;;) {
    Pooled pooled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_.empty()) break;
      pooled = std::move(idle_.back());
      idle_.pop_back();
    }
    // One the server closed while it was idle (a restart, pg_terminate_backend, a pooler) has
    // said so in its socket: reading that, without waiting, finds it broken.
    PGconn* conn = pooled.conn;
    if (PQconsumeInput(conn) == 1 && PQstatus(conn) == CONNECTION_OK && PQisBusy(conn) == 0) {
      *out = std::move(pooled);
      return Status::Ok();
    }
    Discard(conn);
  }
  PGconn* conn = StartConnecting(*config_);
  if (count_ != nullptr) count_->Opened();
  const TimePoint until = std::min(deadline, Now() + Millis(config_->params.connect_timeout_ms));
  // libpq's first step is a write (PGRES_POLLING_WRITING), as PQconnectStart documents.
  PostgresPollingStatusType step = PGRES_POLLING_WRITING;
  while (conn != nullptr && PQstatus(conn) != CONNECTION_BAD && step != PGRES_POLLING_OK &&
         step != PGRES_POLLING_FAILED) {
    if (!WaitFor(conn, step == PGRES_POLLING_WRITING, until)) {
      Discard(conn);
      return Status::IoError(config_->Describe() + ": no connection within connect_timeout_ms (" +
                             std::to_string(config_->params.connect_timeout_ms) + " ms) or the call's bound");
    }
    step = PQconnectPoll(conn);
  }
  if (conn == nullptr || step != PGRES_POLLING_OK || PQsetnonblocking(conn, 1) != 0) {
    Status s = LibpqConnectionError(conn != nullptr ? PQerrorMessage(conn) : nullptr, config_->Describe(), "cannot connect");
    Discard(conn);
    return s;
  }
  *out = Pooled{conn, {}};
  return Status::Ok();
}

void BlockingSession::Give(Pooled pooled) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(pooled));
}

void BlockingSession::Discard(PGconn* conn) {
  if (conn == nullptr) return;
  PQfinish(conn);
  if (count_ != nullptr) count_->Closed();
}

bool BlockingSession::WaitFor(PGconn* conn, bool write, TimePoint deadline) {
  for (;;) {
    const TimePoint now = Now();
    if (now >= deadline) return false;
    const int64_t left = std::chrono::ceil<Millis>(deadline - now).count();
    pollfd p{PQsocket(conn), static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (p.fd < 0) return true;  // libpq reports the broken connection itself
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000 * 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;
  }
}

Status BlockingSession::Finish(PGconn* conn, TimePoint deadline, Answer* answer) {
  for (;;) {  // flush what libpq holds
    const int flushed = PQflush(conn);
    if (flushed < 0) return LibpqConnectionError(PQerrorMessage(conn), config_->Describe(), "the connection broke");
    if (flushed == 0) break;
    if (!WaitFor(conn, true, deadline)) return Status::IoError(config_->Describe() + ": no answer within the call's bound (timeout_ms " + std::to_string(config_->params.timeout_ms) + ")");
  }
  Status error;
  for (;;) {
    while (PQisBusy(conn) != 0) {
      if (!WaitFor(conn, false, deadline)) {
        return Status::IoError(config_->Describe() + ": no answer within the call's bound (timeout_ms " +
                               std::to_string(config_->params.timeout_ms) + ")");
      }
      if (PQconsumeInput(conn) != 1) {
        return LibpqConnectionError(PQerrorMessage(conn), config_->Describe(), "the connection broke");
      }
    }
    PGresult* result = PQgetResult(conn);
    if (result == nullptr) {
      // Notifications nobody here listens for (a pooler may deliver another client's): freed,
      // not kept by libpq for as long as the connection lives.
      while (PGnotify* n = PQnotifies(conn)) PQfreemem(n);
      return error;
    }
    ReadResult(result, config_->Describe(), answer, &error);
    PQclear(result);
  }
}

Status BlockingSession::Prepare(Pooled* pooled, const std::string& name, const std::string& sql, int params,
                                TimePoint deadline, Answer* answer) {
  if (pooled->prepared.count(name) != 0) return Status::Ok();
  if (PQsendPrepare(pooled->conn, name.c_str(), sql.c_str(), params, nullptr) != 1) {
    return LibpqConnectionError(PQerrorMessage(pooled->conn), config_->Describe(), "cannot send");
  }
  Status s = Finish(pooled->conn, deadline, answer);
  if (s.ok() || PreparedAlready(answer->sqlstate)) {
    pooled->prepared.insert(name);
    *answer = Answer();
    return Status::Ok();
  }
  return s;
}

Status BlockingSession::Exchange(Pooled* pooled, const std::string& sql, const std::vector<Value>* params,
                                 const std::string& name, TimePoint deadline, Answer* answer, bool* sent) {
  PGconn* conn = pooled->conn;
  *sent = false;
  auto cannot_send = [&] { return LibpqConnectionError(PQerrorMessage(conn), config_->Describe(), "cannot send"); };
  if (params == nullptr) {
    if (PQsendQuery(conn, sql.c_str()) != 1) return cannot_send();
    *sent = true;
    return Finish(conn, deadline, answer);
  }
  std::vector<const char*> values;
  for (const Value& v : *params) values.push_back(v ? v->c_str() : nullptr);
  const int n = static_cast<int>(values.size());
  if (!name.empty()) {
    Status s = Prepare(pooled, name, sql, n, deadline, answer);
    if (!s.ok()) return s;
    // After a step of its own (a prepare, a DEALLOCATE), the statement may find its time gone:
    // it is not sent then, rather than sent to fail its bound at once while it runs on.
    if (Now() >= deadline) return StatementLate(config_->Describe());
    if (PQsendQueryPrepared(conn, name.c_str(), n, values.data(), nullptr, nullptr, 0) != 1) return cannot_send();
    *sent = true;
    s = Finish(conn, deadline, answer);
    if (s.ok()) return s;
    if (!PreparedStatementMissing(answer->sqlstate) && !PreparedPlanStale(answer->sqlstate)) return s;
    *sent = false;  // refused before it ran
    if (PreparedStatementMissing(answer->sqlstate)) {
      prepare_ = false;  // it never ran: as text, over the same connection, from now on
    } else if (PreparedPlanStale(answer->sqlstate)) {
      // It never ran: the stale statement goes (the next call prepares it anew), and this one
      // runs as text.
      if (PQsendQuery(conn, ("DEALLOCATE " + name).c_str()) != 1) return cannot_send();
      *answer = Answer();
      s = Finish(conn, deadline, answer);
      if (!s.ok() && answer->sqlstate.empty()) return s;  // the connection failed
      pooled->prepared.erase(name);
    }
    *answer = Answer();
    if (Now() >= deadline) return StatementLate(config_->Describe());
  }
  if (PQsendQueryParams(conn, sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0) != 1) return cannot_send();
  *sent = true;
  return Finish(conn, deadline, answer);
}

Status BlockingSession::Run(const std::string& sql, const std::vector<Value>* params, TimePoint deadline,
                            Answer* answer) {
  const std::string name = params != nullptr && !params->empty() ? PreparedName(sql) : "";
  for (int tries = 0;; ++tries) {
    *answer = Answer();
    Pooled pooled;
    Status s = Take(deadline, &pooled);
    if (!s.ok()) return s;
    bool sent = false;
    s = Exchange(&pooled, sql, params, prepare_ ? name : "", deadline, answer, &sent);
    // A statement's own error leaves the connection usable; a broken or late one does not.
    if (s.ok() || (!answer->sqlstate.empty() && s.code() != Code::kIoError)) {
      Give(std::move(pooled));
      return s;
    }
    Discard(pooled.conn);
    if (!sent) {
      // It did not run (a broken pooled connection, or a step before it failed on one): once
      // more, over a new connection, while there is time.
      if (tries == 0 && Now() < deadline) continue;
      return s;
    }
    answer->maybe_applied = true;
    return s;
  }
}

}  // namespace dlock::postgres
