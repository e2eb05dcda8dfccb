#include "postgres/lock_protocol.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/token.h"

namespace dlock::postgres {
namespace {

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s->find(from, at)) != std::string::npos; at += to.size()) s->replace(at, from.size(), to);
}

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out = "\\x";
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// bytea's text form ("\x" + hex) as bytes; false for anything else.
bool Unhex(const std::string& text, std::string* out) {
  if (text.size() < 2 || text[0] != '\\' || text[1] != 'x' || text.size() % 2 != 0) return false;
  out->clear();
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 2; i < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

// A text[] literal: each element double-quoted, its quotes and backslashes escaped.
std::string ArrayLiteral(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    out += i == 0 ? "\"" : ",\"";
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

bool ParseInt(const Value& v, int64_t* out) {
  if (!v || v->empty() || v->size() > 20) return false;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = n;
  return true;
}

std::string HoldIdOf(const std::string& owner_value) { return WaiterId(owner_value); }

// Each lock's name, hold id and owner value, as three array parameters (renew, release_all).
template <typename Lock>
std::vector<Value> HoldArrays(const std::vector<std::shared_ptr<Lock>>& locks) {
  std::vector<std::string> names, holds, owners;
  for (const auto& l : locks) {
    names.push_back(l->name);
    holds.push_back(HoldIdOf(l->owner_value));
    owners.push_back(l->owner_value);
  }
  return {ArrayLiteral(names), ArrayLiteral(holds), ArrayLiteral(owners)};
}

char KindCode(const LockRequest& r) {
  if (r.permits != 0) return 'p';
  return r.kind == LockKind::kShared ? 's' : 'x';
}

}  // namespace

bool ParseNotification(const std::string& payload, Notification* out) {
  *out = Notification();
  if (payload.rfind("r ", 0) == 0) {
    out->name = payload.substr(2);
    return !out->name.empty();
  }
  if (payload.rfind("v ", 0) == 0) {
    out->changed = true;
    out->name = payload.substr(2);
    return !out->name.empty();
  }
  if (payload.rfind("q ", 0) == 0) {
    const size_t id_end = payload.find(' ', 2);
    if (id_end == std::string::npos) return false;
    const size_t length_end = payload.find(' ', id_end + 1);
    if (length_end == std::string::npos) return false;
    int64_t length = 0;
    const size_t reason_at = length_end + 1;
    const std::string length_text = payload.substr(id_end + 1, length_end - id_end - 1);
    if (!ParseInt(length_text, &length) || length < 0 || std::to_string(length) != length_text ||
        static_cast<uint64_t>(length) >= payload.size() - reason_at) {
      return false;
    }
    const size_t reason_end = reason_at + static_cast<size_t>(length);
    if (payload[reason_end] != ' ') return false;
    out->requested = true;
    out->id = payload.substr(2, id_end - 2);
    out->reason = payload.substr(reason_at, static_cast<size_t>(length));
    out->name = payload.substr(reason_end + 1);
    return !out->id.empty() && !out->name.empty();
  }
  if (payload.rfind("g ", 0) != 0) return false;
  const size_t hold_end = payload.find(' ', 2);
  if (hold_end == std::string::npos) return false;
  const size_t token_end = payload.find(' ', hold_end + 1);
  if (token_end == std::string::npos) return false;
  int64_t token = 0;
  if (!ParseInt(payload.substr(hold_end + 1, token_end - hold_end - 1), &token) || token <= 0) return false;
  out->granted = true;
  out->hold = payload.substr(2, hold_end - 2);
  out->token = static_cast<uint64_t>(token);
  out->name = payload.substr(token_end + 1);
  return !out->hold.empty() && !out->name.empty();
}

std::string SchemaFor(const PostgresConfig& config, const std::string& quoted,
                      const std::function<std::string(const std::string&)>& quoted_fn) {
  std::string s = kSchemaSql;
  for (const char* f : kFunctionNames) {
    ReplaceAll(&s, std::string("{{t_") + f + "}}", quoted_fn(f));
  }
  ReplaceAll(&s, "{{t}}", quoted);
  // The channel is the table's name as given: a string literal, its quotes doubled.
  std::string literal = config.table;
  ReplaceAll(&literal, "'", "''");
  ReplaceAll(&s, "{{channel}}", "'" + literal + "'");
  ReplaceAll(&s, "{{unlogged}}", config.unlogged ? "UNLOGGED " : "");
  return s;
}

Statements StatementsFor(const std::function<std::string(const std::string&)>& quoted_fn,
                         const std::string& quoted_table) {
  Statements s;
  s.acquire = "SELECT acquired, fencing_token, holder_ttl_ms, why FROM " + quoted_fn("acquire") +
              "($1, $2, $3::\"char\", $4::integer, $5::integer, $6, $7::bigint, $8::bytea, $9::bigint, $10::boolean, "
              "$11::bigint, $12::bigint)";
  s.leave = "SELECT " + quoted_fn("leave") + "($1, $2, $3)";
  s.release = "SELECT " + quoted_fn("release") + "($1, $2, $3)";
  s.request = "SELECT " + quoted_fn("request") + "($1, $2, $3)";
  s.release_all = "SELECT " + quoted_fn("release_all") + "($1::text[], $2::text[], $3::text[])";
  s.break_lock = "SELECT b_kind, b_permits, b_closed_ms, b_label, b_remaining_ms, b_token, b_hold FROM " +
                 quoted_fn("break") + "($1, $2, $3::boolean, $4::bigint, $5::integer)";
  s.renew = "SELECT " + quoted_fn("renew") + "($1::text[], $2::text[], $3::text[], $4::bigint[])";
  s.set_value = "SELECT " + quoted_fn("set_value") + "($1, $2, $3, $4::bytea)";
  s.inspect = "SELECT kind, permits, take, label, fencing_token, remaining_ms, value FROM " +
              quoted_fn("inspect") + "($1)";
  // The channel pg_notify names is the table's name as given; LISTEN takes it as an identifier.
  s.listen = "LISTEN " + quoted_table;
  return s;
}

void LockProtocol::Run(Session* s, const std::string& sql, std::vector<Value> params, TimePoint deadline,
                       std::function<void(const Status&, Answer, bool maybe_ran)> done, int tries) {
  std::vector<Value> again = params;
  s->Query(sql, std::move(params), deadline,
           [this, s, sql, again = std::move(again), deadline, done = std::move(done), tries](const Status& st,
                                                                                              Answer a) mutable {
    // The connection broke or was closed by the server after the statement was sent.
    const bool lost_answer = !st.ok() && a.maybe_applied && st.code() == Code::kIoError;
    if (lost_answer && tries == 0 && Now() < deadline) {
      return Run(s, sql, std::move(again), deadline,
                 [done = std::move(done)](const Status& st2, Answer a2, bool) { done(st2, std::move(a2), true); },
                 tries + 1);
    }
    done(st, std::move(a), lost_answer);
  });
}

Status LockProtocol::Explained(const Status& s, const Answer& a) const {
  // 42883: no such function; 42P01: no such table.
  if (a.sqlstate == "42883" || a.sqlstate == "42P01") {
    return Status::BackendError(config_->Describe() + ": the lock table '" + config_->table +
                                "' is not prepared (run `dlock prepare`, or dlock_backend_prepare, for this URL): " +
                                s.message());
  }
  return s;
}

Status LockProtocol::Garbage(const std::string& what) const {
  return Status::BackendError(config_->Describe() + ": the server answered " + what +
                              " with something that is not the lock table's answer");
}

Status LockProtocol::NotHeld(const std::string& name) const {
  return Status::NotHeld(config_->Describe() + ": lock '" + name +
                         "' is not held by this owner any more (its row expired, was taken over or deleted)");
}

bool LockProtocol::TableGone(const Answer& a) const { return a.sqlstate == "42P01"; }

void LockProtocol::Acquire(Session* s, const LockRequest& request, TimePoint deadline, AttemptDone done) {
  std::vector<Value> params = {request.name,
                               HoldIdOf(request.owner_value),
                               std::string(1, KindCode(request)),
                               std::to_string(request.permits),
                               std::to_string(request.permits == 0 ? 1 : request.take),
                               request.owner_value,
                               std::to_string(request.lease_ms),
                               request.value.empty() ? Value() : Value(Hex(request.value)),
                               std::to_string(request.queue_ms),
                               std::string(request.waiter_id.empty() ? "f" : "t"),
                               std::to_string(request.min_hold_ms),
                               std::to_string(request.lock_delay_ms)};
  Run(s, sql_.acquire, std::move(params), deadline,
      [this, request, done = std::move(done)](const Status& st, Answer a, bool maybe_ran) {
    AcquireAttempt attempt;
    if (!st.ok()) {
      if (maybe_ran && give_back_) give_back_(request.name, HoldIdOf(request.owner_value), request.owner_value);
      return done(Explained(st, a), attempt);
    }
    if (a.rows.size() != 1 || a.rows[0].size() != 4 || !a.rows[0][0]) return done(Garbage("an acquire"), attempt);
    const Row& row = a.rows[0];
    if (*row[0] == "t") {
      int64_t token = 0;
      if (!ParseInt(row[1], &token) || token <= 0) return done(Garbage("an acquire"), attempt);
      attempt.acquired = true;
      attempt.fencing_token = static_cast<uint64_t>(token);
      int64_t left = 0;  // what is left of a lease the hold got before this try
      if (row[2] && !ParseInt(row[2], &left)) return done(Garbage("an acquire"), attempt);
      if (row[2]) attempt.remaining_ms = std::clamp<int64_t>(left, 0, kMaxHolderTtlMs);
      return done(Status::Ok(), attempt);
    }
    const std::string why = row[3].value_or("");
    if (why.rfind("sort ", 0) == 0) {
      int64_t held = 0;
      if (!ParseInt(Value(why.substr(5)), &held) || held < 0 || held > UINT32_MAX) return done(Garbage("an acquire"), attempt);
      return done(SortMismatch(request.name, static_cast<uint32_t>(held), request.permits), attempt);
    }
    // A marker closes the name: a break's, or a job rule's.
    for (const char* by : {"broken", "min_hold", "lock_delay"}) {
      if (why == std::string("closed ") + by) attempt.closed_by = by;
    }
    int64_t ttl = -2;
    if (row[2] && !ParseInt(row[2], &ttl)) return done(Garbage("an acquire"), attempt);
    attempt.holder_ttl_ms = std::clamp<int64_t>(ttl, -2, kMaxHolderTtlMs);
    done(Status::Ok(), attempt);
  });
}

void LockProtocol::Leave(Session* s, const LockRequest& request, TimePoint deadline, Done done) {
  Leave(s, request.name, HoldIdOf(request.owner_value), request.owner_value, deadline, std::move(done));
}

void LockProtocol::Leave(Session* s, const std::string& name, const std::string& hold, const std::string& owner,
                         TimePoint deadline, Done done) {
  Run(s, sql_.leave, {name, hold, owner}, deadline,
      [this, done = std::move(done)](const Status& st, Answer a, bool) { done(st.ok() ? st : Explained(st, a)); });
}

void LockProtocol::Release(Session* s, std::shared_ptr<const LockState> lock, TimePoint deadline, Done done) {
  // An acquire nobody took is given back as if it had not happened: no job rule's marker stays.
  if (lock->given_back.load()) {
    return Leave(s, lock->name, HoldIdOf(lock->owner_value), lock->owner_value, deadline, std::move(done));
  }
  std::vector<Value> params = {lock->name, HoldIdOf(lock->owner_value), lock->owner_value};
  Run(s, sql_.release, std::move(params), deadline, [this, lock, done = std::move(done)](const Status& st, Answer a, bool maybe_ran) {
    if (!st.ok() && st.code() == Code::kIoError && give_back_) {
      give_back_(lock->name, HoldIdOf(lock->owner_value), lock->owner_value);
    }
    if (!st.ok()) return done(TableGone(a) ? NotHeld(lock->name) : Explained(st, a));
    if (a.rows.size() != 1 || a.rows[0].size() != 1 || !a.rows[0][0]) return done(Garbage("a release"));
    if (*a.rows[0][0] == "t") return done(Status::Ok());
    // Nothing found after a try that may have run: that try's delete landed.
    done(maybe_ran ? Status::Ok() : NotHeld(lock->name));
  });
}

void LockProtocol::ReleaseAll(Session* s, const std::vector<std::shared_ptr<LockState>>& locks, TimePoint deadline,
                              Done done) {
  Run(s, sql_.release_all, HoldArrays(locks), deadline,
      [this, done = std::move(done)](const Status& st, Answer a, bool) { done(st.ok() ? st : Explained(st, a)); });
}

void LockProtocol::Renew(Session* s, std::vector<std::shared_ptr<const LockState>> locks, std::vector<uint64_t> leases,
                         TimePoint deadline, RenewDone done) {
  std::vector<std::string> lease_texts;
  for (uint64_t lease : leases) lease_texts.push_back(std::to_string(lease));
  std::vector<Value> params = HoldArrays(locks);
  params.push_back(ArrayLiteral(lease_texts));
  Run(s, sql_.renew, std::move(params), deadline, [this, locks, done = std::move(done)](const Status& st, Answer a, bool) {
    std::vector<bool> renewed(locks.size(), false);
    Status failed = st.ok() ? Status::Ok() : (TableGone(a) ? Status::Ok() : Explained(st, a));
    if (st.ok() || TableGone(a)) {
      for (const Row& row : a.rows) {
        int64_t k = 0;
        if (row.size() != 1 || !ParseInt(row[0], &k) || k < 1 || k > static_cast<int64_t>(locks.size())) {
          failed = Garbage("a renewal");
          break;
        }
        renewed[static_cast<size_t>(k - 1)] = true;
      }
    }
    for (size_t k = 0; k < locks.size(); ++k) {
      if (!failed.ok()) {
        done(k, failed);
      } else {
        done(k, renewed[k] ? Status::Ok() : NotHeld(locks[k]->name));
      }
    }
  });
}

void LockProtocol::SetValue(Session* s, std::shared_ptr<const LockState> lock, const std::string& value,
                            TimePoint deadline, Done done) {
  std::vector<Value> params = {lock->name, HoldIdOf(lock->owner_value), lock->owner_value,
                               value.empty() ? Value() : Value(Hex(value))};
  Run(s, sql_.set_value, std::move(params), deadline, [this, lock, done = std::move(done)](const Status& st, Answer a, bool) {
    if (!st.ok()) return done(TableGone(a) ? NotHeld(lock->name) : Explained(st, a));
    if (a.rows.size() != 1 || a.rows[0].size() != 1 || !a.rows[0][0]) return done(Garbage("a value's write"));
    done(*a.rows[0][0] == "t" ? Status::Ok() : NotHeld(lock->name));
  });
}

void LockProtocol::Inspect(Session* s, const std::string& name, TimePoint deadline, InspectDone done) {
  Run(s, sql_.inspect, {name}, deadline, [this, done = std::move(done)](const Status& st, Answer a, bool) {
    LockInfo info;
    int64_t rule_ms = 0;  // the latest job rule's marker: how long it closes the name, and which
    std::string rule_by;
    if (!st.ok()) return done(Explained(st, a), info);
    for (const Row& row : a.rows) {
      int64_t permits = 0, take = 0, token = 0, remaining = -1;
      HolderInfo h;
      if (row.size() != 7 || !row[0] || row[0]->size() != 1 || !ParseInt(row[1], &permits) || !ParseInt(row[2], &take) ||
          !ParseInt(row[4], &token) || (row[5] && !ParseInt(row[5], &remaining)) ||
          (row[6] && !Unhex(*row[6], &h.value)) || permits < 0 || permits > UINT32_MAX || take < 1 ||
          take > UINT32_MAX || token < 0) {
        return done(Garbage("an inspect"), LockInfo());
      }
      const char kind = (*row[0])[0];
      if (kind == 'b') {  // a break's marker: closed, with no holder
        info.closed_ms = row[5] ? std::clamp<int64_t>(remaining, 0, kMaxHolderTtlMs) : 0;
        info.closed_by = info.closed_ms > 0 ? "broken" : "";
        continue;
      }
      if (kind == 'm' || kind == 'd') {  // a job rule's marker: it closes the name while nobody holds it
        const int64_t left = row[5] ? std::clamp<int64_t>(remaining, 0, kMaxHolderTtlMs) : 0;
        if (left > rule_ms) {
          rule_ms = left;
          rule_by = kind == 'm' ? "min_hold" : "lock_delay";
        }
        continue;
      }
      if (kind == 'r') {  // a break's record, for a broken holder's loss report
        if (info.broken.size() < kMaxBrokenRecords) {
          info.broken.push_back({static_cast<uint64_t>(token), std::move(h.value)});
        }
        continue;
      }
      info.kind = kind == 's' ? LockKind::kShared : LockKind::kExclusive;
      if (kind == 'p') info.permits = static_cast<uint32_t>(permits);
      h.owner = row[3].value_or("");
      h.fencing_token = static_cast<uint64_t>(token);
      h.remaining_ms = row[5] ? std::clamp<int64_t>(remaining, 0, kMaxHolderTtlMs) : -1;
      h.take = static_cast<uint32_t>(take);
      info.holders.push_back(std::move(h));
    }
    if (info.holders.empty() && rule_ms > info.closed_ms) {
      info.closed_ms = rule_ms;
      info.closed_by = rule_by;
    }
    done(Status::Ok(), std::move(info));
  });
}

void LockProtocol::RequestRelease(Session* s, const std::string& name, const std::string& id, const std::string& reason,
                                  TimePoint deadline, std::function<void(Status, uint32_t)> done) {
  // Sent again after a lost answer, it may tell the holders twice: with the same id, which
  // they hear once (ReleaseRequestListener).
  Run(s, sql_.request, {name, id, reason}, deadline, [this, done = std::move(done)](const Status& st, Answer a, bool) {
    if (!st.ok()) return done(Explained(st, a), 0);
    int64_t asked = 0;
    if (a.rows.size() != 1 || a.rows[0].size() != 1 || !ParseInt(a.rows[0][0], &asked) || asked < 0 ||
        asked > UINT32_MAX) {
      return done(Garbage("a release request"), 0);
    }
    done(Status::Ok(), static_cast<uint32_t>(asked));
  });
}

void LockProtocol::Break(Session* s, const std::string& name, const std::string& reason, bool now, TimePoint deadline,
                         std::function<void(Status, BreakResult)> done) {
  std::vector<Value> params = {name, reason, std::string(now ? "t" : "f"), std::to_string(kBrokenRecordMs),
                               std::to_string(kMaxBrokenRecords)};
  Run(s, sql_.break_lock, std::move(params), deadline, [this, done = std::move(done)](const Status& st, Answer a, bool) {
    BreakResult result;
    if (!st.ok()) return done(Explained(st, a), result);
    if (a.rows.empty()) return done(Garbage("a break"), BreakResult());
    for (const Row& row : a.rows) {
      int64_t permits = 0, closed = 0, left = -1, token = 0;
      if (row.size() != 7 || !ParseInt(row[1], &permits) || !ParseInt(row[2], &closed) || permits < 0 ||
          permits > UINT32_MAX) {
        return done(Garbage("a break"), BreakResult());
      }
      result.closed_ms = std::clamp<int64_t>(closed, 0, kMaxHolderTtlMs);
      result.closed_by = result.closed_ms > 0 ? "broken" : "";
      if (!row[3]) continue;  // nobody held the name
      if (!row[0] || row[0]->size() != 1 || (row[4] && !ParseInt(row[4], &left)) || !ParseInt(row[5], &token) ||
          token <= 0 || !row[6]) {
        return done(Garbage("a break"), BreakResult());
      }
      const char kind = (*row[0])[0];
      result.kind = kind == 's' ? LockKind::kShared : LockKind::kExclusive;
      if (kind == 'p') result.permits = static_cast<uint32_t>(permits);
      HolderInfo h;
      h.owner = *row[3];
      h.remaining_ms = row[4] ? std::clamp<int64_t>(left, 0, kMaxHolderTtlMs) : -1;
      h.fencing_token = static_cast<uint64_t>(token);
      h.hold_id = *row[6];
      result.holders.push_back(std::move(h));
    }
    done(Status::Ok(), std::move(result));
  });
}

}  // namespace dlock::postgres
