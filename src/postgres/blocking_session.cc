#include "postgres/blocking_session.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace dlock::postgres {

BlockingSession::~BlockingSession() {
  for (PGconn* conn : idle_) Discard(conn);
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
  PGconn* conn = nullptr;
  Status s = Take(deadline, &conn);
  if (!s.ok()) return s;
  char* quoted = PQescapeIdentifier(conn, name.data(), name.size());
  if (quoted == nullptr) {
    s = Status::InvalidArgument(config_->Describe() + ": table name '" + name + "': " + PQerrorMessage(conn));
  } else {
    *out = quoted;
    PQfreemem(quoted);
  }
  Give(conn);
  return s;
}

Status BlockingSession::Take(TimePoint deadline, PGconn** out) {
  for (;;) {
    PGconn* pooled = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_.empty()) break;
      pooled = idle_.back();
      idle_.pop_back();
    }
    // One the server closed while it was idle (a restart, pg_terminate_backend, a pooler) has
    // said so in its socket: reading that, without waiting, finds it broken.
    if (PQconsumeInput(pooled) == 1 && PQstatus(pooled) == CONNECTION_OK && PQisBusy(pooled) == 0) {
      *out = pooled;
      return Status::Ok();
    }
    Discard(pooled);
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
  *out = conn;
  return Status::Ok();
}

void BlockingSession::Give(PGconn* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(conn);
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

Status BlockingSession::Run(const std::string& sql, const std::vector<Value>* params, TimePoint deadline,
                            Answer* answer) {
  *answer = Answer();
  for (int tries = 0;; ++tries) {
    PGconn* conn = nullptr;
    Status s = Take(deadline, &conn);
    if (!s.ok()) return s;
    int sent = 0;
    if (params == nullptr) {
      sent = PQsendQuery(conn, sql.c_str());
    } else {
      std::vector<const char*> values;
      for (const Value& v : *params) values.push_back(v ? v->c_str() : nullptr);
      sent = PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                               nullptr, nullptr, 0);
    }
    if (sent != 1) {
      s = LibpqConnectionError(PQerrorMessage(conn), config_->Describe(), "cannot send");
      Discard(conn);
      if (tries == 0) continue;  // it reached no server: once more, over a new connection
      return s;
    }
    s = Finish(conn, deadline, answer);
    // A statement's own error leaves the connection usable; a broken or late one does not.
    if (s.ok() || (!answer->sqlstate.empty() && s.code() != Code::kIoError)) {
      Give(conn);
    } else {
      Discard(conn);
      answer->maybe_applied = true;
    }
    return s;
  }
}

}  // namespace dlock::postgres
