#include "postgres/connection.h"

#include <libpq-fe.h>

#include <algorithm>

namespace dlock::postgres {

Connection::Connection(EventLoop* loop, const PostgresConfig* config, OnNotify on_notify,
                       std::shared_ptr<ConnectionCount> count)
    : loop_(loop),
      config_(config),
      on_notify_(std::move(on_notify)),
      count_(std::move(count)),
      timer_(loop, [this] { OnTimer(); }),
      kick_(loop, [this] { SendNext(); }) {}

Connection::~Connection() { Close(Status::Cancelled(config_->Describe() + ": connection closed")); }

Status Connection::ConnectionError(const std::string& what) const {
  return LibpqConnectionError(conn_ != nullptr ? PQerrorMessage(conn_) : nullptr, config_->Describe(), what);
}

void Connection::Query(std::string sql, std::vector<Value> params, TimePoint deadline, Done done) {
  std::string name = params.empty() ? "" : PreparedName(sql);
  queue_.push_back(Pending{std::move(sql), std::move(params), deadline, std::move(done), std::move(name)});
  kick_.StartAfter(Millis(0));
}

bool Connection::Disconnect() {
  timer_.Cancel();
  watch_.reset();
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  counted_.Reset();
  fd_ = -1;
  prepared_.clear();
  // A prepare or a DEALLOCATE in flight is not the statement: it has not run.
  const bool sent = state_ == State::kBusy && step_ != Step::kPrepare && step_ != Step::kDeallocate;
  state_ = State::kClosed;
  return sent;
}

void Connection::Close(const Status& why) {
  kick_.Cancel();
  const bool sent = Disconnect();
  std::deque<Pending> failed;
  failed.swap(queue_);
  for (size_t i = 0; i < failed.size(); ++i) {
    Answer answer;
    answer.maybe_applied = sent && i == 0;
    failed[i].done(why, std::move(answer));
  }
}

void Connection::Drop(const Status& why) {
  const bool sent = Disconnect();
  if (on_drop_) on_drop_(why);
  if (!queue_.empty()) {
    Pending front = std::move(queue_.front());
    queue_.pop_front();
    Answer answer;
    answer.maybe_applied = sent;
    // The statements behind it go on over a new connection, from the loop.
    if (!queue_.empty()) kick_.StartAfter(Millis(0));
    front.done(why, std::move(answer));
  }
}

void Connection::Connect() {
  conn_ = StartConnecting(*config_);
  counted_ = CountedConnection(count_);
  state_ = State::kConnecting;
  connect_deadline_ = Now() + Millis(config_->params.connect_timeout_ms);
  if (conn_ == nullptr || PQstatus(conn_) == CONNECTION_BAD) return Drop(ConnectionError("cannot connect"));
  ArmTimer();
  // libpq's first step is a write (PGRES_POLLING_WRITING), as PQconnectStart documents.
  Watch(false, true);
}

void Connection::Watch(bool read, bool write) {
  const int fd = conn_ != nullptr ? PQsocket(conn_) : -1;
  if (fd < 0) return Drop(ConnectionError("no socket"));
  if (fd != fd_ || watch_ == nullptr) {  // libpq moves to another socket for the next host
    watch_ = std::make_unique<FdWatch>(loop_, fd, &Connection::OnSocket, this);
    fd_ = fd;
  }
  watch_->Want(read, write);
}

void Connection::OnSocket(void* arg, bool readable, bool writable) {
  auto* self = static_cast<Connection*>(arg);
  if (self->state_ == State::kConnecting) return self->PollConnect();
  if (writable && self->conn_ != nullptr) {
    const int flushed = PQflush(self->conn_);
    if (flushed < 0) return self->Drop(self->ConnectionError("the connection broke"));
    if (flushed == 0) self->Watch(true, false);
  }
  if (readable) self->Read();
}

void Connection::PollConnect() {
  switch (PQconnectPoll(conn_)) {
    case PGRES_POLLING_READING:
      return Watch(true, false);
    case PGRES_POLLING_WRITING:
      return Watch(false, true);
    case PGRES_POLLING_OK:
      if (PQsetnonblocking(conn_, 1) != 0) return Drop(ConnectionError("cannot make it non-blocking"));
      state_ = State::kReady;
      timer_.Cancel();
      Watch(true, false);  // notifications arrive while idle too
      return SendNext();
    default:
      return Drop(ConnectionError("cannot connect"));
  }
}

void Connection::SendNext() {
  if (queue_.empty()) return;
  if (state_ == State::kClosed) return Connect();
  if (state_ != State::kReady) return;
  Pending& next = queue_.front();
  if (Now() >= next.deadline) {  // waited out its bound behind others: never sent
    Pending late = std::move(next);
    queue_.pop_front();
    late.done(StatementLate(config_->Describe()), Answer());
    return SendNext();
  }
  std::vector<const char*> values;
  for (const Value& v : next.params) values.push_back(v ? v->c_str() : nullptr);
  const int n = static_cast<int>(values.size());
  int sent = 0;
  if (next.deallocate) {
    step_ = Step::kDeallocate;
    sent = PQsendQuery(conn_, ("DEALLOCATE " + next.name).c_str());
  } else if (next.name.empty() || next.as_text || !prepare_) {
    step_ = Step::kText;
    sent = PQsendQueryParams(conn_, next.sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0);
  } else if (prepared_.count(next.name) == 0) {
    step_ = Step::kPrepare;
    sent = PQsendPrepare(conn_, next.name.c_str(), next.sql.c_str(), n, nullptr);
  } else {
    step_ = Step::kByName;
    sent = PQsendQueryPrepared(conn_, next.name.c_str(), n, values.data(), nullptr, nullptr, 0);
  }
  if (sent != 1) return Drop(ConnectionError("cannot send"));
  state_ = State::kBusy;
  answer_ = Answer();
  error_ = Status::Ok();
  const int flushed = PQflush(conn_);
  if (flushed < 0) return Drop(ConnectionError("the connection broke"));
  Watch(true, flushed == 1);
  ArmTimer();
}

void Connection::Read() {
  if (PQconsumeInput(conn_) != 1) return Drop(ConnectionError("the connection broke"));
  ReadNotifications();
  while (state_ == State::kBusy && PQisBusy(conn_) == 0) {
    PGresult* result = PQgetResult(conn_);
    if (result == nullptr) {  // the step is answered
      state_ = State::kReady;
      timer_.Cancel();
      if (StepAnswered()) Finish(error_, std::move(answer_));
      if (state_ == State::kReady) SendNext();
      return;
    }
    ReadResult(result, config_->Describe(), &answer_, &error_);
    PQclear(result);
  }
}

void Connection::ReadNotifications() {
  while (PGnotify* n = PQnotifies(conn_)) {
    const std::string channel = n->relname != nullptr ? n->relname : "";
    const std::string payload = n->extra != nullptr ? n->extra : "";
    PQfreemem(n);
    if (on_notify_) on_notify_(channel, payload);
  }
}

bool Connection::StepAnswered() {
  if (step_ == Step::kPrepare) {
    // Any error but PreparedAlready is the statement's own (its text refused).
    if (!error_.ok() && !PreparedAlready(answer_.sqlstate)) return true;
    prepared_.insert(queue_.front().name);
    return false;  // SendNext runs it by name
  }
  Pending& front = queue_.front();
  if (step_ == Step::kDeallocate) {  // gone (or never there): the next call prepares it anew
    prepared_.erase(front.name);
    front.deallocate = false;
    front.as_text = true;
    return false;
  }
  if (step_ != Step::kByName || error_.ok()) return true;
  if (PreparedStatementMissing(answer_.sqlstate)) {  // it never ran: as text, from now on
    prepare_ = false;
    return false;
  }
  if (PreparedPlanStale(answer_.sqlstate)) {  // it never ran: its statement goes, it runs as text
    front.deallocate = true;
    return false;
  }
  return true;
}

void Connection::Finish(const Status& s, Answer answer) {
  Pending done = std::move(queue_.front());
  queue_.pop_front();
  done.done(s, std::move(answer));
}

void Connection::ArmTimer() {
  TimePoint at = state_ == State::kConnecting ? connect_deadline_ : TimePoint::max();
  if (!queue_.empty() && state_ == State::kBusy) at = std::min(at, queue_.front().deadline);
  if (state_ == State::kConnecting && !queue_.empty()) at = std::min(at, queue_.front().deadline);
  if (at == TimePoint::max()) return timer_.Cancel();
  timer_.StartAt(at);
}

void Connection::OnTimer() {
  if (state_ == State::kConnecting) {
    return Drop(Status::IoError(config_->Describe() + ": no connection within " +
                                std::to_string(config_->params.connect_timeout_ms) + " ms (connect_timeout_ms)"));
  }
  if (state_ == State::kBusy) {
    Drop(Status::IoError(config_->Describe() + ": no answer within the call's bound (timeout_ms " +
                         std::to_string(config_->params.timeout_ms) + ")"));
  }
}

}  // namespace dlock::postgres
