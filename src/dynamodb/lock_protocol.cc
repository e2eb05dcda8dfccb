#include "dynamodb/lock_protocol.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "core/options.h"
#include "core/token.h"

namespace dlock::dynamodb {
namespace {

// Rounds of one acquire attempt: write, (read,) takeover or retry-because-free write.
constexpr int kMaxAcquireRounds = 3;
// Observations kept per backend before they are forgotten wholesale (waiters re-observe).
constexpr size_t kMaxObservations = 10000;

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t WallClockUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json S(const std::string& v) { return Json{{"S", v}}; }
Json N(uint64_t v) { return Json{{"N", std::to_string(v)}}; }
Json N(int64_t v) { return Json{{"N", std::to_string(v)}}; }

std::string NewRecordVersion() {
  std::string rv;
  if (!NewOwnerToken(&rv).ok()) rv = std::to_string(WallClockUs()) + "-" + std::to_string(RandomBetween(0, UINT64_MAX));
  return rv;
}

// The item from a GetItem answer or a ConditionalCheckFailedException with ALL_OLD (null when
// there is none).
Json ItemOf(const Json& body) {
  auto it = body.find("Item");
  return it != body.end() && it->is_object() ? *it : Json();
}

int64_t CeilMs(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d + std::chrono::nanoseconds(999999)).count();
}

}  // namespace

bool NumberAttribute(const Json& item, const char* name, uint64_t* out) {
  if (!item.is_object()) return false;
  auto it = item.find(name);
  if (it == item.end() || !it->is_object()) return false;
  auto n = it->find("N");
  if (n == it->end() || !n->is_string()) return false;
  const std::string& text = n->get_ref<const std::string&>();
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

std::string StringAttribute(const Json& item, const char* name) {
  if (!item.is_object()) return "";
  auto it = item.find(name);
  if (it == item.end() || !it->is_object()) return "";
  auto s = it->find("S");
  return s != it->end() && s->is_string() ? s->get<std::string>() : std::string();
}

struct LockProtocol::AcquireOp {
  std::string name;
  std::string owner_value;
  uint64_t lease_ms;
  Json key;
  std::string key_text;
  int rounds = 0;
  std::string record_version;  // what this round writes
  TimePoint deadline;
  std::function<void(Status, AcquireAttempt)> done;

  void Finish(Status s, AcquireAttempt attempt) {
    auto d = std::move(done);
    d(std::move(s), std::move(attempt));
  }
  void Acquired(uint64_t token) {
    AcquireAttempt attempt;
    attempt.acquired = true;
    attempt.fencing_token = token;
    Finish(Status::Ok(), std::move(attempt));
  }
  void NotAcquired(int64_t holder_ttl_ms) {
    AcquireAttempt attempt;
    attempt.holder_ttl_ms = holder_ttl_ms;
    Finish(Status::Ok(), std::move(attempt));
  }
};

Status LockProtocol::KeyFor(const std::string& name, Json* key) const {
  const DynamoConfig& config = api_->config();
  std::string partition, sort;
  Status s = SplitLockName(config, name, &partition, &sort);
  if (!s.ok()) return s;
  *key = Json::object();
  (*key)[config.partition_key] = S(partition);
  if (!config.sort_key.empty()) (*key)[config.sort_key] = S(sort);
  return Status::Ok();
}

Json LockProtocol::GetItemBody(const Json& key) const {
  return Json{{"TableName", api_->config().table}, {"Key", key}, {"ConsistentRead", true}};
}

TimePoint LockProtocol::CallDeadline() const {
  return Now() + Millis(api_->config().params.timeout_ms);
}

void LockProtocol::Read(Transport* transport, const Json& key, TimePoint deadline,
                        std::function<void(Status, Json)> done) {
  CallWithRetries(transport, api_->credentials(), "GetItem", GetItemBody(key), deadline,
                  [done = std::move(done)](ApiResult r) {
                    if (r.outcome != Outcome::kOk) {
                      done(r.status, Json());
                      return;
                    }
                    done(Status::Ok(), ItemOf(r.body));
                  });
}

void LockProtocol::Acquire(Transport* transport, const LockRequest& request,
                           std::function<void(Status, AcquireAttempt)> done) {
  auto op = std::make_shared<AcquireOp>();
  op->name = request.name;
  op->owner_value = request.owner_value;
  op->lease_ms = request.lease_ms;
  op->deadline = CallDeadline();
  op->done = std::move(done);
  Status s = KeyFor(request.name, &op->key);
  if (s.ok() && !IsValidUtf8(request.owner_value)) {
    s = Status::InvalidArgument("the owner label is not valid UTF-8, which DynamoDB requires");
  }
  if (!s.ok()) {
    op->Finish(s, AcquireAttempt());
    return;
  }
  op->key_text = op->key.dump();
  AcquireRound(transport, std::move(op));
}

void LockProtocol::AcquireRound(Transport* transport, std::shared_ptr<AcquireOp> op) {
  ++op->rounds;
  op->record_version = NewRecordVersion();
  const std::string takeover_from = ExpiredRecordVersion(op->key_text);
  Json values = {{":o", S(op->owner_value)},
                 {":rv", S(op->record_version)},
                 {":l", N(op->lease_ms)},
                 {":t", N(WallClockMs())},
                 {":seed", N(WallClockUs())},
                 {":one", N(uint64_t{1})}};
  std::string condition = "attribute_not_exists(#o)";
  if (!takeover_from.empty()) {
    condition += " OR #rv = :seen";
    values[":seen"] = S(takeover_from);
  }
  Json body = {
      {"TableName", api_->config().table},
      {"Key", op->key},
      {"UpdateExpression", "SET #o = :o, #rv = :rv, #l = :l, #t = :t, #f = if_not_exists(#f, :seed) + :one"},
      {"ConditionExpression", condition},
      {"ExpressionAttributeNames",
       {{"#o", attr::kOwner}, {"#rv", attr::kRecordVersion}, {"#l", attr::kLeaseMs},
        {"#t", attr::kRenewedAtMs}, {"#f", attr::kFence}}},
      {"ExpressionAttributeValues", std::move(values)},
      {"ReturnValues", "UPDATED_NEW"},
      // Saves the read that follows a refusal where DynamoDB supports it.
      {"ReturnValuesOnConditionCheckFailure", "ALL_OLD"}};
  CallWithRetries(transport, api_->credentials(), "UpdateItem", std::move(body), op->deadline,
                  [this, transport, op](ApiResult r) {
    switch (r.outcome) {
      case Outcome::kOk: {
        uint64_t token = 0;
        auto attrs = r.body.find("Attributes");
        if (attrs == r.body.end() || !NumberAttribute(*attrs, attr::kFence, &token)) {
          op->Finish(Status::BackendError(api_->config().Describe() +
                                          " answered an acquire without the new fencing token"),
                     AcquireAttempt());
          return;
        }
        ForgetObservation(op->key_text);
        op->Acquired(token);
        return;
      }
      case Outcome::kConditionFailed: {
        Json item = ItemOf(r.body);
        if (!item.is_null()) {
          AcquireJudge(transport, op, std::move(item), Now());
          return;
        }
        Read(transport, op->key, op->deadline, [this, transport, op](Status s, Json item) {
          if (!s.ok()) {
            op->Finish(s, AcquireAttempt());
            return;
          }
          AcquireJudge(transport, op, std::move(item), Now());
        });
        return;
      }
      default:
        break;
    }
    if (!r.maybe_applied) {
      op->Finish(r.status, AcquireAttempt());
      return;
    }
    // The write may have landed: the item says whether the lock is ours, if the call's time
    // still allows a read (a silent server used it all up).
    Status failure = r.status;
    Read(transport, op->key, op->deadline, [this, op, failure](Status s, Json item) {
      if (s.ok() && StringAttribute(item, attr::kOwner) == op->owner_value) {
        uint64_t token = 0;
        if (NumberAttribute(item, attr::kFence, &token)) {
          op->Acquired(token);
          return;
        }
      }
      // Unknown: give it back in case it landed, so no dead owner keeps it (in the
      // background: the caller does not wait another timeout for it).
      if (!s.ok()) InBackground("UpdateItem", ReleaseBody(op->key, op->owner_value));
      op->Finish(failure, AcquireAttempt());
    });
  });
}

void LockProtocol::AcquireJudge(Transport* transport, std::shared_ptr<AcquireOp> op, Json item,
                                TimePoint seen_at) {
  const std::string owner = StringAttribute(item, attr::kOwner);
  if (owner.empty()) {  // released in between: try again at once
    if (op->rounds < kMaxAcquireRounds) {
      AcquireRound(transport, std::move(op));
    } else {
      op->NotAcquired(0);
    }
    return;
  }
  if (owner == op->owner_value) {  // an earlier round did land
    uint64_t token = 0;
    if (NumberAttribute(item, attr::kFence, &token)) {
      ForgetObservation(op->key_text);
      op->Acquired(token);
      return;
    }
  }
  uint64_t lease_ms = 0, renewed_at = 0;
  if (!NumberAttribute(item, attr::kLeaseMs, &lease_ms) || lease_ms == 0) {
    op->NotAcquired(-1);  // fail-closed (or a foreign item): it never expires
    return;
  }
  (void)NumberAttribute(item, attr::kRenewedAtMs, &renewed_at);
  // Both come from the item, written by anyone: clamped before the takeover arithmetic (a
  // leaseMs of 2^64 - 1 once turned into -1 ms, a takeover at once).
  lease_ms = std::min<uint64_t>(lease_ms, kMaxLeaseMs);
  renewed_at = std::min<uint64_t>(renewed_at, uint64_t{1} << 52);  // far past any wall clock
  int64_t takeover_in = ObserveHolder(op->key_text, StringAttribute(item, attr::kRecordVersion),
                                      lease_ms, static_cast<int64_t>(renewed_at), seen_at);
  if (takeover_in <= 0 && op->rounds < kMaxAcquireRounds) {
    AcquireRound(transport, std::move(op));
    return;
  }
  op->NotAcquired(std::max<int64_t>(takeover_in, 0));
}

int64_t LockProtocol::TakeoverIn(const Observation& o) const {
  int64_t in = CeilMs(o.first_seen + Millis(o.lease_ms) - Now());
  if (api_->config().trust_local_time && o.renewed_at_ms > 0) {
    in = std::min<int64_t>(in, o.renewed_at_ms + static_cast<int64_t>(o.lease_ms) - WallClockMs());
  }
  return in;
}

int64_t LockProtocol::ObserveHolder(const std::string& key_text, const std::string& record_version,
                                    uint64_t lease_ms, int64_t renewed_at_ms, TimePoint seen_at) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  if (observed_.size() >= kMaxObservations && observed_.find(key_text) == observed_.end()) {
    observed_.clear();
  }
  Observation& o = observed_[key_text];
  if (o.record_version != record_version || o.record_version.empty()) {
    // The holder wrote since we last looked (or we never looked): its lease starts over, as
    // far as this waiter can tell.
    o = Observation{record_version, seen_at, lease_ms, renewed_at_ms};
  }
  return TakeoverIn(o);
}

std::string LockProtocol::ExpiredRecordVersion(const std::string& key_text) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  auto it = observed_.find(key_text);
  if (it == observed_.end() || TakeoverIn(it->second) > 0) return "";
  return it->second.record_version;
}

void LockProtocol::ForgetObservation(const std::string& key_text) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  observed_.erase(key_text);
}

void LockProtocol::Renew(Transport* transport, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
                         TimePoint deadline, std::function<void(Status)> done) {
  Json key;
  Status s = KeyFor(lock->name, &key);
  if (!s.ok()) {
    done(s);
    return;
  }
  std::string rv = NewRecordVersion();
  Json body = {{"TableName", api_->config().table},
               {"Key", key},
               {"UpdateExpression", "SET #rv = :rv, #l = :l, #t = :t"},
               {"ConditionExpression", "#o = :o"},
               {"ExpressionAttributeNames",
                {{"#o", attr::kOwner}, {"#rv", attr::kRecordVersion}, {"#l", attr::kLeaseMs},
                 {"#t", attr::kRenewedAtMs}}},
               {"ExpressionAttributeValues",
                {{":o", S(lock->owner_value)}, {":rv", S(rv)}, {":l", N(lease_ms)}, {":t", N(WallClockMs())}}}};
  CallWithRetries(transport, api_->credentials(), "UpdateItem", std::move(body),
                  std::min(deadline, CallDeadline()),
                  [this, transport, lock, rv, key, deadline, done = std::move(done)](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      done(Status::Ok());
      return;
    }
    if (r.outcome == Outcome::kConditionFailed) {
      done(Status::NotHeld("the item of lock '" + lock->name + "' has another owner"));
      return;
    }
    if (!r.maybe_applied) {
      done(r.status);
      return;
    }
    // Ambiguous (e.g. a timeout after sending): read before deciding the lock is lost, within
    // `deadline` (a heartbeat: the lock's local deadline; an extend: the caller's bound).
    Status failure = r.status;
    Read(transport, key, std::min(deadline, CallDeadline()), [lock, rv, failure, done](Status s, Json item) {
      if (!s.ok()) {
        done(failure);  // still unknown: the heartbeat retries until the local deadline
        return;
      }
      if (StringAttribute(item, attr::kOwner) != lock->owner_value) {
        done(Status::NotHeld("the item of lock '" + lock->name + "' has another owner"));
        return;
      }
      if (StringAttribute(item, attr::kRecordVersion) == rv) {
        done(Status::Ok());  // it did land
        return;
      }
      done(failure);  // still ours, not renewed: try again
    });
  });
}

Json LockProtocol::ReleaseBody(const Json& key, const std::string& owner_value) const {
  return {{"TableName", api_->config().table},
          {"Key", key},
          {"UpdateExpression", "REMOVE #o, #rv, #l, #t"},
          {"ConditionExpression", "#o = :o"},
          {"ExpressionAttributeNames",
           {{"#o", attr::kOwner}, {"#rv", attr::kRecordVersion}, {"#l", attr::kLeaseMs},
            {"#t", attr::kRenewedAtMs}}},
          {"ExpressionAttributeValues", {{":o", S(owner_value)}}}};
}

void LockProtocol::Release(Transport* transport, std::shared_ptr<const LockState> lock,
                           std::function<void(Status)> done) {
  Json key;
  Status s = KeyFor(lock->name, &key);
  if (!s.ok()) {
    done(s);
    return;
  }
  const TimePoint deadline = CallDeadline();
  CallWithRetries(transport, api_->credentials(), "UpdateItem", ReleaseBody(key, lock->owner_value),
                  deadline, [this, transport, lock, key, deadline, done = std::move(done)](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      done(Status::Ok());
      return;
    }
    if (r.outcome == Outcome::kConditionFailed) {
      // After an attempt that may have landed, "not ours" is that attempt's own doing.
      done(r.maybe_applied ? Status::Ok()
                           : Status::NotHeld("the item of lock '" + lock->name + "' has another owner"));
      return;
    }
    // Not confirmed: the caller's handle is gone either way, so the release is retried in the
    // background; the item would otherwise stay held until its lease runs out (never, for a
    // fail-closed lock).
    Status failure = r.status;
    if (!r.maybe_applied) {
      if (failure.code() == Code::kIoError) InBackground("UpdateItem", ReleaseBody(key, lock->owner_value));
      done(failure);
      return;
    }
    Read(transport, key, deadline, [this, lock, key, failure, done](Status s, Json item) {
      if (s.ok() && StringAttribute(item, attr::kOwner) != lock->owner_value) {
        done(Status::Ok());  // no longer ours: the release landed
        return;
      }
      InBackground("UpdateItem", ReleaseBody(key, lock->owner_value));
      done(failure);
    });
  });
}

void LockProtocol::Inspect(Transport* transport, const std::string& name,
                           std::function<void(Status, LockInfo)> done) {
  Json key;
  Status s = KeyFor(name, &key);
  if (!s.ok()) {
    done(s, LockInfo());
    return;
  }
  Read(transport, key, CallDeadline(), [done = std::move(done)](Status st, Json item) {
    LockInfo info;
    const std::string owner = st.ok() ? StringAttribute(item, attr::kOwner) : std::string();
    if (owner.empty()) {
      done(st, info);
      return;
    }
    HolderInfo holder;
    holder.owner = OwnerLabel(owner);
    uint64_t lease_ms = 0;
    uint64_t renewed_at = 0;
    (void)NumberAttribute(item, attr::kLeaseMs, &lease_ms);
    (void)NumberAttribute(item, attr::kRenewedAtMs, &renewed_at);
    (void)NumberAttribute(item, attr::kFence, &holder.fencing_token);
    if (lease_ms == 0) {
      holder.remaining_ms = -1;
    } else {
      // Server-supplied numbers, clamped before the arithmetic.
      const int64_t lease = static_cast<int64_t>(std::min<uint64_t>(lease_ms, kMaxLeaseMs));
      const int64_t renewed = static_cast<int64_t>(std::min<uint64_t>(renewed_at, INT64_MAX / 2));
      holder.remaining_ms = std::clamp<int64_t>(renewed + lease - WallClockMs(), 0, lease);
    }
    info.holders.push_back(std::move(holder));
    done(Status::Ok(), std::move(info));
  });
}

}  // namespace dlock::dynamodb
