// What a PostgreSQL server sends the PostgreSQL backend, or anyone who may NOTIFY on its table's
// channel: the input is read as a notification's payload (ParseNotification), and as the rows
// of an answer (its first byte picks the statement; then rows split at '\n', columns at '\t',
// "\N" a NULL) given to each of the lock protocol's readers through a Session that answers with
// them.
//
// Asserted (a crash otherwise): a parsed notification names a lock and, for a release request,
// an id, its reason exactly as long as the payload says, and the payload rebuilt from its parts;
// a served waiter's token is above 0; an acquire's holder_ttl_ms and remaining_ms, an inspect's
// and a break's leases left, stay within kMaxHolderTtlMs; every reader answers exactly once.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/lock_state.h"
#include "postgres/lock_protocol.h"

using namespace dlock;
using namespace dlock::postgres;

namespace {

class CannedSession : public Session {
 public:
  explicit CannedSession(Answer answer) : answer_(std::move(answer)) {}
  void Query(std::string, std::vector<Value>, TimePoint, Done done) override { done(Status::Ok(), answer_); }

 private:
  Answer answer_;
};

std::vector<std::string> Split(const std::string& s, char at) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (;;) {
    const size_t to = s.find(at, from);
    parts.push_back(s.substr(from, to == std::string::npos ? std::string::npos : to - from));
    if (to == std::string::npos) return parts;
    from = to + 1;
  }
}

void CheckNotification(const std::string& payload) {
  Notification n;
  if (!ParseNotification(payload, &n)) return;
  if (n.name.empty()) __builtin_trap();
  if (n.granted && (n.token == 0 || n.hold.empty())) __builtin_trap();
  if (n.requested) {
    const std::string rebuilt = "q " + n.id + " " + std::to_string(n.reason.size()) + " " + n.reason + " " + n.name;
    if (n.id.empty() || rebuilt != payload) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckNotification(text);
  if (text.empty()) return 0;

  Answer answer;
  for (const std::string& line : Split(text.substr(1), '\n')) {
    Row row;
    for (const std::string& column : Split(line, '\t')) row.push_back(column == "\\N" ? Value() : Value(column));
    answer.rows.push_back(std::move(row));
  }
  CannedSession session(answer);
  PostgresConfig config;
  LockProtocol protocol(&config);
  const TimePoint deadline = Now() + Millis(1000);
  AcquireOptions options;
  auto lock = std::make_shared<LockState>("name", "owner", 1, 1, options, Now());
  int answered = 0;
  switch (static_cast<uint8_t>(text[0]) % 7) {
    case 0: {
      LockRequest request;
      request.name = "name";
      request.owner_value = "owner";
      protocol.Acquire(&session, request, deadline, [&](Status s, AcquireAttempt a) {
        ++answered;
        if (s.ok() && (a.holder_ttl_ms < -2 || a.holder_ttl_ms > kMaxHolderTtlMs)) __builtin_trap();
        if (s.ok() && a.acquired && (a.fencing_token == 0 || a.remaining_ms > kMaxHolderTtlMs)) __builtin_trap();
      });
      break;
    }
    case 1:
      protocol.Release(&session, lock, deadline, [&](Status) { ++answered; });
      break;
    case 2: {
      size_t calls = 0;
      protocol.Renew(&session, {lock, lock}, {1000, 0}, deadline, [&](size_t k, Status) {
        if (k > 1) __builtin_trap();
        if (++calls == 2) ++answered;
      });
      break;
    }
    case 3:
      protocol.SetValue(&session, lock, "value", deadline, [&](Status) { ++answered; });
      break;
    case 4:
      protocol.Inspect(&session, "name", deadline, [&](Status s, LockInfo info) {
        ++answered;
        for (const HolderInfo& h : info.holders) {
          if (s.ok() && (h.remaining_ms < -1 || h.remaining_ms > kMaxHolderTtlMs)) __builtin_trap();
        }
      });
      break;
    case 5:
      protocol.Break(&session, "name", "reason", false, deadline, [&](Status s, BreakResult r) {
        ++answered;
        if (s.ok() && (r.closed_ms < 0 || r.closed_ms > kMaxHolderTtlMs)) __builtin_trap();
        for (const HolderInfo& h : r.holders) {
          if (s.ok() && (h.fencing_token == 0 || h.remaining_ms < -1 || h.remaining_ms > kMaxHolderTtlMs)) __builtin_trap();
        }
      });
      break;
    default:
      protocol.RequestRelease(&session, "name", "id", "reason", deadline, [&](Status, uint32_t) { ++answered; });
      break;
  }
  if (answered != 1) __builtin_trap();
  return 0;
}
