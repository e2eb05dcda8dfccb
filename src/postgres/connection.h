// One libpq connection on the client's loop (issue 40, the PostgreSQL backend being built).
//
// It connects on first use, without blocking (PQconnectStartParams, PQconnectPoll driven by its
// socket's readiness through the loop seam; libpq's multi-host list tried as libpq tries it),
// sends one statement at a time with every value as a parameter, answers each in order, and
// hands every notification it reads (LISTEN) to on_notify. A statement with parameters is
// prepared on the connection the first time it is sent there, and run by name after (session.h:
// PreparedName); behind a transaction pooler, which cannot carry that, it goes as text.
//
// Bounds: libpq bounds nothing in ms, so the loop does. A connect that has not finished by
// connect_timeout_ms, or a statement unanswered at its deadline, drops the connection: the
// statement fails with EIO (Answer::maybe_applied: it was sent, it may have run) and the
// statements queued behind it go on over a new connection. A connection that breaks fails its
// statement the same way. Loop thread only; callbacks never run inside Query.
#ifndef DLOCK_POSTGRES_CONNECTION_H_
#define DLOCK_POSTGRES_CONNECTION_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/connection_count.h"
#include "core/status.h"
#include "loop/event_loop.h"
#include "loop/fd_watch.h"
#include "postgres/postgres_config.h"
#include "postgres/session.h"

typedef struct pg_conn PGconn;

namespace dlock::postgres {

class Connection : public Session {
 public:
  using OnNotify = std::function<void(const std::string& channel, const std::string& payload)>;

  // count: the client's open connections (core/connection_count.h); null counts nothing.
  Connection(EventLoop* loop, const PostgresConfig* config, OnNotify on_notify = nullptr,
             std::shared_ptr<ConnectionCount> count = nullptr);
  // Fails what is queued with CANCELLED (their callbacks run inside) and closes.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends sql with params ($1, $2, ... as text) once the statements before it are answered.
  void Query(std::string sql, std::vector<Value> params, TimePoint deadline, Done done) override;
  // Called (on the loop) whenever the connection breaks or times out, idle or not: a listener
  // must LISTEN again on the next one. Not called by Close.
  void SetOnDrop(std::function<void(const Status&)> on_drop) { on_drop_ = std::move(on_drop); }
  // Fails everything queued with why and closes; the next Query connects again.
  void Close(const Status& why);
  bool connected() const { return state_ == State::kReady || state_ == State::kBusy; }
  // Statements sent or queued, not answered yet.
  size_t pending() const { return queue_.size(); }

 private:
  enum class State { kClosed, kConnecting, kReady, kBusy };
  struct Pending {
    std::string sql;
    std::vector<Value> params;
    TimePoint deadline;
    Done done;
    std::string name;  // its prepared statement's name; "" = sent as text
    bool deallocate = false;  // its prepared statement's plan is stale: DEALLOCATE it first
    bool as_text = false;     // then send it as text, this once
  };
  // What is in flight for the front statement: it as text, its prepare, it by name, or the
  // DEALLOCATE of its stale prepared statement.
  enum class Step { kText, kPrepare, kByName, kDeallocate };
  static void OnSocket(void* self, bool readable, bool writable);
  void Connect();
  void PollConnect();
  void Watch(bool read, bool write);
  void SendNext();
  void Read();
  void ReadNotifications();
  void ArmTimer();
  void OnTimer();
  // Closes the connection; true when a statement was in flight on it (not a step of its own
  // before it: a prepare or a DEALLOCATE).
  bool Disconnect();
  // The connection failed (why); the statement in flight fails with it, the rest are retried.
  void Drop(const Status& why);
  // The front statement's step is answered: true when it is done (its answer is final); false
  // when SendNext has a step to send for it (it by name after its prepare; as text after a
  // refusal before it ran).
  bool StepAnswered();
  void Finish(const Status& s, Answer answer);
  Status ConnectionError(const std::string& what) const;

  EventLoop* loop_;
  const PostgresConfig* config_;
  OnNotify on_notify_;
  std::function<void(const Status&)> on_drop_;
  std::shared_ptr<ConnectionCount> count_;
  PGconn* conn_ = nullptr;
  CountedConnection counted_;  // while conn_ is open
  int fd_ = -1;
  std::unique_ptr<FdWatch> watch_;
  Timer timer_;
  Timer kick_;  // runs SendNext from the loop (never inside Query)
  State state_ = State::kClosed;
  TimePoint connect_deadline_{};
  std::deque<Pending> queue_;  // front() is in flight while kBusy
  Answer answer_;              // the front's, as its results arrive
  Status error_;               // the first error among them
  Step step_ = Step::kText;    // while kBusy
  std::unordered_set<std::string> prepared_;  // on this connection, by name
  bool prepare_ = true;        // false once a pooler showed it cannot carry prepared statements
};

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_CONNECTION_H_
