#include "dynamodb/lock_protocol.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <limits>
#include <map>

#include "core/options.h"
#include "core/token.h"

namespace dlock::dynamodb {
namespace {

// Writes of one acquire attempt: the first (guessed) write, then rewrites after refusals (a
// takeover, or a race with another acquisition of the name). Each refusal's item is judged
// anew; past this the attempt reports "not acquired, try again at once".
constexpr int kMaxAcquireRounds = 8;
// Expired holds one write removes at most (an expression is at most 4 KB: about 29 bytes each
// in the condition); more are removed by cleanup writes first.
constexpr size_t kMaxRemovalsPerWrite = 100;
// Cleanup writes one attempt makes at most (enough to clear a full item).
constexpr int kMaxCleanups = static_cast<int>(kMaxHoldsPerName / kMaxRemovalsPerWrite) + 2;
// Names whose observations a backend keeps before they are forgotten wholesale (waiters
// re-observe).
constexpr size_t kMaxObservations = 10000;
// "Never expires" (lease 0, or a foreign entry without a record version).
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// Writes of one break: a share of kMaxRemovalsPerWrite holds each, and rewrites after refusals
// (a holder renewed, released, or the name was acquired between the read and the write).
constexpr int kMaxBreakWrites = kMaxCleanups + kMaxAcquireRounds;
// Writes of one break refused before it stops racing renewals: it then lets a hold be renewed
// under it (not extended to another lease) and closes the name for each whole lease, the most a
// renewal landing before its write can have left.
constexpr int kBreakRefusalsBeforeWholeLeases = 2;
// What a break's marker says left it (LockInfo::closed_by, AcquireAttempt::closed_by).
constexpr char kClosedByBreak[] = "broken";
// What keeps a name closed by a job rule: an early release's marker, or a hold whose lease ran
// out while its rules stand.
constexpr char kClosedByMinHold[] = "min_hold";
constexpr char kClosedByLockDelay[] = "lock_delay";

// How long a hold must stand unchanged before the name is free of it: its lease, or longer by
// its job rules (0 = never: a hold with no lease never ends uncleanly). All clamped to
// kMaxLeaseMs: no overflow.
uint64_t FreeSpanMs(uint64_t lease_ms, uint64_t min_hold_ms, uint64_t lock_delay_ms) {
  return lease_ms == 0 ? 0 : std::max(lease_ms + lock_delay_ms, min_hold_ms);
}
// Which rule keeps the name closed once the lease has run out: the one that ends last.
const char* RuleClosing(uint64_t lease_ms, uint64_t min_hold_ms, uint64_t lock_delay_ms) {
  return lock_delay_ms != 0 && lease_ms + lock_delay_ms >= min_hold_ms ? kClosedByLockDelay : kClosedByMinHold;
}
// What is left of a hold's min hold now (0 = over, or none), on the holder's monotonic clock
// from when its acquire's answer came (LockState::acquired_at, after the write landed): a
// waiter counts it from when it first sees the write that carries it, later still.
uint64_t MinHoldLeftMs(const LockState& lock) {
  if (lock.min_hold_ms == 0) return 0;
  const int64_t held = std::chrono::duration_cast<std::chrono::milliseconds>(Now() - lock.acquired_at).count();
  const int64_t left = static_cast<int64_t>(std::min<uint64_t>(lock.min_hold_ms, kMaxLeaseMs)) - std::max<int64_t>(held, 0);
  return left > 0 ? static_cast<uint64_t>(left) : 0;
}

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

// The "M" object of an attribute value, or null.
const Json* MapOf(const Json& value) {
  if (!value.is_object()) return nullptr;
  auto m = value.find("M");
  return m != value.end() && m->is_object() ? &*m : nullptr;
}

// Clamps a server-supplied wall-clock time before any arithmetic (far past any wall clock).
int64_t ClampWallMs(uint64_t ms) { return static_cast<int64_t>(std::min<uint64_t>(ms, uint64_t{1} << 52)); }

// A hold's stored value.
Json B(const std::string& bytes) { return Json{{"B", Base64Encode(bytes)}}; }

// A "B" attribute's bytes ("" when absent, malformed, or longer than any value dlock stores:
// the size is checked before decoding).
std::string BinaryAttribute(const Json& item, const char* name) {
  auto it = item.find(name);
  if (it == item.end() || !it->is_object()) return "";
  auto b = it->find("B");
  if (b == it->end() || !b->is_string()) return "";
  const std::string& text = b->get_ref<const std::string&>();
  std::string bytes;
  if (text.size() > 4 * ((kMaxValueBytes + 2) / 3) || !Base64Decode(text, &bytes)) return "";
  return bytes;
}

Json HoldValue(const std::string& record_version, uint64_t lease_ms, uint64_t token, const std::string& value,
               uint64_t min_hold_ms, uint64_t lock_delay_ms, uint32_t take) {
  Json fields = {{attr::kRecordVersion, S(record_version)},
                 {attr::kLeaseMs, N(lease_ms)},
                 {attr::kRenewedAtMs, N(WallClockMs())},
                 {attr::kToken, N(token)}};
  if (!value.empty()) fields[attr::kData] = B(value);
  if (min_hold_ms != 0) fields[attr::kMinHoldMs] = N(min_hold_ms);
  if (lock_delay_ms != 0) fields[attr::kLockDelayMs] = N(lock_delay_ms);
  // A semaphore hold of k > 1 permits says so; absent, it counts for one.
  if (take > 1) fields[attr::kTake] = N(uint64_t{take});
  return Json{{"M", std::move(fields)}};
}

// The soonest of the blockers' expiries: -1 when none of them expires.
int64_t SoonestExpiry(const std::vector<int64_t>& ins) {
  int64_t soonest = kNever;
  for (int64_t in : ins) soonest = std::min(soonest, in);
  return soonest == kNever ? -1 : std::max<int64_t>(soonest, 0);
}

// When enough of a semaphore's permits may be free for a hold that needs `short_by` more than
// are free now: the soonest expiry by which the live holds ({expiry, take}) that end first have
// freed that many (-1: never, the holds in the way do not expire).
int64_t RoomIn(std::vector<std::pair<int64_t, uint32_t>> live, uint64_t short_by) {
  std::sort(live.begin(), live.end());
  uint64_t freed = 0;
  for (const auto& [in, take] : live) {
    if (in == kNever) break;
    freed += take;
    if (freed >= short_by) return std::max<int64_t>(in, 0);
  }
  return -1;
}

// A write to holds.<owner> refused because `holds` is gone (the item was deleted): DynamoDB
// may say so with a ValidationException rather than a failed condition.
bool HoldPathGone(const ApiResult& r) {
  return r.outcome == Outcome::kFailed && r.error_type == "ValidationException" &&
         r.status.message().find("document path") != std::string::npos;
}

// An UpdateItem's expressions, with a placeholder for every attribute name and value: each
// name declared once, every declared one used (DynamoDB refuses unused placeholders), and any
// text (an owner value as a map key) safe as a name.
class Update {
 public:
  std::string Name(const std::string& attribute) {
    auto it = names_.find(attribute);
    if (it != names_.end()) return it->second;
    std::string placeholder = "#n" + std::to_string(names_.size());
    names_.emplace(attribute, placeholder);
    return placeholder;
  }
  std::string Path(std::initializer_list<std::string> parts) {
    std::string path;
    for (const std::string& part : parts) path += (path.empty() ? "" : ".") + Name(part);
    return path;
  }
  std::string Value(Json value) {
    std::string placeholder = ":v" + std::to_string(values_.size());
    values_[placeholder] = std::move(value);
    return placeholder;
  }
  void Set(const std::string& clause) { set_.push_back(clause); }
  void Remove(const std::string& path) { remove_.push_back(path); }
  void Condition(const std::string& condition) { conditions_.push_back(condition); }

  Json Body(const std::string& table, const Json& key, const char* return_values) const {
    std::string update;
    auto clause = [&update](const char* verb, const std::vector<std::string>& parts) {
      if (parts.empty()) return;
      update += (update.empty() ? "" : " ") + std::string(verb);
      for (size_t i = 0; i < parts.size(); ++i) update += (i ? ", " : " ") + parts[i];
    };
    clause("SET", set_);
    clause("REMOVE", remove_);
    Json names = Json::object();
    for (const auto& entry : names_) names[entry.second] = entry.first;
    Json body = {{"TableName", table},
                 {"Key", key},
                 {"UpdateExpression", update},
                 {"ExpressionAttributeNames", std::move(names)},
                 {"ReturnValues", return_values}};
    if (!conditions_.empty()) {
      std::string condition;
      for (const std::string& c : conditions_) condition += (condition.empty() ? "" : " AND ") + c;
      body["ConditionExpression"] = condition;
    }
    if (!values_.empty()) body["ExpressionAttributeValues"] = values_;
    return body;
  }

 private:
  std::map<std::string, std::string> names_;  // attribute -> placeholder
  Json values_ = Json::object();
  std::vector<std::string> set_, remove_, conditions_;
};

// Reads an "N" attribute value ({"N": "123"}) as uint64.
bool NumberValue(const Json& value, uint64_t* out) {
  if (!value.is_object()) return false;
  auto n = value.find("N");
  if (n == value.end() || !n->is_string()) return false;
  const std::string& text = n->get_ref<const std::string&>();
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// An acquire's condition on the closed marker: none stands, or the one whose record version
// the waiter saw lapse ("" = none seen), which the write removes.
void MarkerClause(Update& u, const std::string& lapsed_version) {
  const std::string c = u.Name(attr::kClosed);
  if (lapsed_version.empty()) {
    u.Condition("attribute_not_exists(" + c + ")");
    return;
  }
  u.Condition("(attribute_not_exists(" + c + ") OR " + u.Path({attr::kClosed, attr::kRecordVersion}) + " = " +
              u.Value(S(lapsed_version)) + ")");
  u.Remove(c);
}

// Every write that adds a hold or an announcement: the item is not another lock client's (a
// read says whose; this keeps a write that raced with theirs from landing in their item).
void NoForeignClause(Update& u) {
  for (const char* marker : foreign::kMarkers) u.Condition("attribute_not_exists(" + u.Name(marker) + ")");
}

// Why a call refuses another lock client's item, for its message: "it is held by another
// lock client (...): dlock " + what dlock does not do.
std::string ForeignRefusal(const LockItem& item, const char* what) {
  return std::string("it is held by another lock client (") + item.foreign + " item" +
         (item.foreign_owner.empty() ? "" : ", owner '" + item.foreign_owner + "'") + "): dlock " + what;
}

}  // namespace

bool NumberAttribute(const Json& item, const char* name, uint64_t* out) {
  if (!item.is_object()) return false;
  auto it = item.find(name);
  return it != item.end() && NumberValue(*it, out);
}

std::string StringAttribute(const Json& item, const char* name) {
  if (!item.is_object()) return "";
  auto it = item.find(name);
  if (it == item.end() || !it->is_object()) return "";
  auto s = it->find("S");
  return s != it->end() && s->is_string() ? s->get<std::string>() : std::string();
}

namespace {

// `closed`: false when it is not a marker dlock wrote.
bool ParseClosedMarker(const Json& value, ClosedMarker* out) {
  const Json* fields = MapOf(value);
  if (fields == nullptr) return false;
  uint64_t n = 0;
  out->record_version = StringAttribute(*fields, attr::kRecordVersion);
  out->by = StringAttribute(*fields, attr::kBy);
  if (!NumberAttribute(*fields, attr::kLeaseMs, &n) || n == 0) return false;
  out->lease_ms = std::min<uint64_t>(n, kMaxLeaseMs);
  if (NumberAttribute(*fields, attr::kRenewedAtMs, &n)) out->renewed_at_ms = ClampWallMs(n);
  return !out->record_version.empty() && !out->by.empty();
}

// `broken`: false when it is not a list of break records.
bool ParseBreakRecords(const Json& value, std::vector<BreakRecord>* out) {
  if (!value.is_object()) return false;
  auto list = value.find("L");
  if (list == value.end() || !list->is_array()) return false;
  for (const Json& entry : *list) {
    const Json* fields = MapOf(entry);
    if (fields == nullptr) return false;
    BreakRecord record;
    uint64_t n = 0;
    if (!NumberAttribute(*fields, attr::kAtMs, &n)) return false;
    record.at_ms = ClampWallMs(n);
    record.reason = StringAttribute(*fields, attr::kReason);
    auto tokens = fields->find(attr::kTokens);
    if (tokens == fields->end() || !tokens->is_object()) return false;
    auto token_list = tokens->find("L");
    if (token_list == tokens->end() || !token_list->is_array()) return false;
    for (const Json& token : *token_list) {
      if (!NumberValue(token, &n)) return false;
      record.tokens.push_back(n);
    }
    out->push_back(std::move(record));
  }
  return true;
}

}  // namespace

void ParseLockItem(const Json& item, LockItem* out) {
  *out = LockItem();
  if (!item.is_object()) return;
  const bool java = item.contains(foreign::kJavaOwnerName) || item.contains(foreign::kJavaRecordVersion) ||
                    item.contains(foreign::kJavaLeaseDuration);
  if (java || item.contains(foreign::kNodeGuid) || item.contains(foreign::kNodeFencingToken)) {
    out->foreign = java ? "AWS Java lock client" : "dynamodb-lock-client";
    out->foreign_owner = StringAttribute(item, java ? foreign::kJavaOwnerName : attr::kOwner);
    return;
  }
  uint64_t n = 0;
  out->owner = StringAttribute(item, attr::kOwner);
  out->record_version = StringAttribute(item, attr::kRecordVersion);
  if (NumberAttribute(item, attr::kLeaseMs, &n)) out->lease_ms = std::min<uint64_t>(n, kMaxLeaseMs);
  if (NumberAttribute(item, attr::kRenewedAtMs, &n)) out->renewed_at_ms = ClampWallMs(n);
  out->value = BinaryAttribute(item, attr::kData);
  if (NumberAttribute(item, attr::kMinHoldMs, &n)) out->min_hold_ms = std::min<uint64_t>(n, kMaxLeaseMs);
  if (NumberAttribute(item, attr::kLockDelayMs, &n)) out->lock_delay_ms = std::min<uint64_t>(n, kMaxLeaseMs);
  out->has_fence = NumberAttribute(item, attr::kFence, &out->fence);
  auto holds = item.find(attr::kHolds);
  if (holds != item.end()) {
    out->has_holds = true;
    const Json* map = MapOf(*holds);
    if (map == nullptr) {
      out->holds_malformed = true;
    } else {
      for (auto it = map->begin(); it != map->end(); ++it) {
        HoldRecord hold;
        hold.owner = it.key();
        if (const Json* fields = MapOf(it.value())) {
          hold.record_version = StringAttribute(*fields, attr::kRecordVersion);
          if (NumberAttribute(*fields, attr::kLeaseMs, &n)) hold.lease_ms = std::min<uint64_t>(n, kMaxLeaseMs);
          if (NumberAttribute(*fields, attr::kRenewedAtMs, &n)) hold.renewed_at_ms = ClampWallMs(n);
          (void)NumberAttribute(*fields, attr::kToken, &hold.token);
          hold.value = BinaryAttribute(*fields, attr::kData);
          if (NumberAttribute(*fields, attr::kMinHoldMs, &n)) hold.min_hold_ms = std::min<uint64_t>(n, kMaxLeaseMs);
          if (NumberAttribute(*fields, attr::kLockDelayMs, &n)) hold.lock_delay_ms = std::min<uint64_t>(n, kMaxLeaseMs);
          if (NumberAttribute(*fields, attr::kTake, &n) && n > 1) {
            hold.take = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
          }
        }
        out->holds.push_back(std::move(hold));
      }
      std::sort(out->holds.begin(), out->holds.end(), [](const HoldRecord& a, const HoldRecord& b) {
        return a.token != b.token ? a.token < b.token : a.owner < b.owner;
      });
    }
  }
  out->has_permits = item.contains(attr::kPermits);
  if (NumberAttribute(item, attr::kPermits, &n) && n <= UINT32_MAX) out->permits = static_cast<uint32_t>(n);
  auto writer = item.find(attr::kWriter);
  if (writer != item.end()) {
    out->has_writer = true;
    if (const Json* fields = MapOf(*writer)) {
      out->writer.owner = StringAttribute(*fields, attr::kOwner);
      out->writer.record_version = StringAttribute(*fields, attr::kRecordVersion);
      if (NumberAttribute(*fields, attr::kQueueMs, &n)) out->writer.queue_ms = std::min<uint64_t>(n, kMaxLeaseMs);
    }
  }
  auto closed = item.find(attr::kClosed);
  if (closed != item.end()) {
    out->has_closed = true;
    out->closed_malformed = !ParseClosedMarker(*closed, &out->closed);
    if (out->closed_malformed) out->closed = ClosedMarker();
  }
  auto broken = item.find(attr::kBroken);
  if (broken != item.end()) {
    out->has_broken = true;
    out->broken_malformed = !ParseBreakRecords(*broken, &out->broken);
    if (out->broken_malformed) out->broken.clear();
  }
}

struct LockProtocol::AcquireOp {
  std::string name;
  std::string owner_value;
  std::string value;  // stored with the hold ("" = none)
  uint64_t lease_ms = 0;
  LockKind kind = LockKind::kExclusive;
  uint32_t permits = 0;
  uint32_t take = 1;           // the permits a semaphore hold takes (1..permits)
  uint64_t queue_ms = 0;
  uint64_t min_hold_ms = 0;    // job rules, stored with the hold (none: 0)
  uint64_t lock_delay_ms = 0;  // 0 with lease 0: a hold that never expires never ends uncleanly
  Json key;
  std::string key_text;
  int rounds = 0;
  int cleanups = 0;
  bool cleanup = false;        // the write in flight only removes expired holds
  std::string record_version;  // what this round writes
  uint64_t token = 0;          // a hold's token in the write in flight
  TimePoint deadline;
  std::function<void(Status, AcquireAttempt)> done;

  bool is_hold() const { return kind == LockKind::kShared || permits != 0; }
  void Finish(Status s, AcquireAttempt attempt) {
    auto d = std::move(done);
    d(std::move(s), std::move(attempt));
  }
  void Acquired(uint64_t fencing_token) {
    AcquireAttempt attempt;
    attempt.acquired = true;
    attempt.fencing_token = fencing_token;
    Finish(Status::Ok(), std::move(attempt));
  }
  void NotAcquired(int64_t holder_ttl_ms, std::string closed_by = "") {
    AcquireAttempt attempt;
    attempt.holder_ttl_ms = holder_ttl_ms;
    attempt.closed_by = std::move(closed_by);
    Finish(Status::Ok(), std::move(attempt));
  }
};

// What a waiter makes of an item: for each holder, the ms until its lease runs out (<= 0: now,
// it expired; kNever: it never expires), and until the name is free of it (its job rules may
// keep the name closed past its lease: *_free_in >= *_in; then closed by *_by).
struct LockProtocol::Judgement {
  int64_t owner_in = kNever;     // the exclusive holder, if the item has one
  int64_t owner_free_in = kNever;
  const char* owner_by = kClosedByLockDelay;
  std::vector<int64_t> hold_in;  // item.holds[i]
  std::vector<int64_t> hold_free_in;
  std::vector<const char*> hold_by;
  int64_t writer_in = kNever;    // the announcement, if the item has one
  int64_t closed_in = 0;         // the closed marker, if the item has a well-formed one
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
  op->value = request.value;
  op->lease_ms = request.lease_ms;
  op->kind = request.kind;
  op->permits = request.permits;
  op->take = request.permits == 0 ? 1 : request.take;
  op->queue_ms = std::min<uint64_t>(request.queue_ms, kMaxLeaseMs);
  op->min_hold_ms = std::min<uint64_t>(request.min_hold_ms, kMaxLeaseMs);
  op->lock_delay_ms = request.lease_ms == 0 ? 0 : std::min<uint64_t>(request.lock_delay_ms, kMaxLeaseMs);
  op->deadline = CallDeadline();
  op->done = std::move(done);
  Status s = KeyFor(request.name, &op->key);
  if (s.ok() && !IsValidUtf8(request.owner_value)) {
    s = Status::InvalidArgument("the owner label is not valid UTF-8, which DynamoDB requires");
  }
  if (s.ok() && request.permits > kMaxHoldsPerName) {
    s = Status::InvalidArgument(
        "lock '" + request.name + "': a DynamoDB semaphore has at most " +
        std::to_string(kMaxHoldsPerName) + " permits (every hold of a name lives in its one item " +
        "of at most 400 KB); this acquire asked for " + std::to_string(request.permits));
  }
  if (s.ok() && request.permits != 0 && (request.take == 0 || request.take > request.permits)) {
    // The core checks it (AcquireOptions::Validate): a request built elsewhere still never
    // writes a hold that could not fit.
    s = Status::InvalidArgument("lock '" + request.name + "': take " + std::to_string(request.take) +
                                " is not within the semaphore's " + std::to_string(request.permits) + " permits");
  }
  if (!s.ok()) {
    op->Finish(s, AcquireAttempt());
    return;
  }
  op->key_text = op->key.dump();
  AcquireRound(transport, std::move(op), nullptr, nullptr);
}

Json LockProtocol::ExclusiveBody(const AcquireOp& op, const LockItem* item) {
  Update u;
  const std::string o = u.Name(attr::kOwner), rv = u.Name(attr::kRecordVersion),
                    h = u.Name(attr::kHolds), f = u.Name(attr::kFence);
  u.Set(o + " = " + u.Value(S(op.owner_value)));
  u.Set(rv + " = " + u.Value(S(op.record_version)));
  u.Set(u.Name(attr::kLeaseMs) + " = " + u.Value(N(op.lease_ms)));
  u.Set(u.Name(attr::kRenewedAtMs) + " = " + u.Value(N(WallClockMs())));
  u.Set(f + " = if_not_exists(" + f + ", " + u.Value(N(WallClockUs())) + ") + " + u.Value(N(uint64_t{1})));
  // A holder taken over leaves no value behind.
  if (op.value.empty()) {
    u.Remove(u.Name(attr::kData));
  } else {
    u.Set(u.Name(attr::kData) + " = " + u.Value(B(op.value)));
  }
  // Nor its job rules: this hold's own, or none.
  for (auto [a, ms] : {std::pair{attr::kMinHoldMs, op.min_hold_ms}, std::pair{attr::kLockDelayMs, op.lock_delay_ms}}) {
    if (ms == 0) {
      u.Remove(u.Name(a));
    } else {
      u.Set(u.Name(a) + " = " + u.Value(N(ms)));
    }
  }
  // An empty map rather than none: a shared acquire's SET holds.<owner> needs it to exist, and
  // `holds` is never removed once there (only an exclusive acquire empties it).
  u.Set(h + " = " + u.Value(Json{{"M", Json::object()}}));
  u.Remove(u.Name(attr::kPermits));
  // The exclusive holder: none, or the one whose record version this waiter saw expire.
  std::string takeover_from;
  if (item == nullptr) {
    takeover_from = ExpiredRecordVersion(op.key_text);
  } else if (!item->owner.empty()) {
    takeover_from = item->record_version;  // the judge saw it expire
  }
  u.Condition(takeover_from.empty()
                  ? "attribute_not_exists(" + o + ")"
                  : "(attribute_not_exists(" + o + ") OR " + rv + " = " + u.Value(S(takeover_from)) + ")");
  if (item != nullptr && !item->holds.empty()) {
    // Every hold expired (the judge saw to it): each still at the record version seen, and no
    // hold added since (every acquisition changes the fence).
    u.Condition(item->has_fence ? f + " = " + u.Value(N(item->fence)) : "attribute_not_exists(" + f + ")");
    for (const HoldRecord& hold : item->holds) {
      u.Condition(u.Path({attr::kHolds, hold.owner, attr::kRecordVersion}) + " = " +
                  u.Value(S(hold.record_version)));
    }
  } else {
    u.Condition("(attribute_not_exists(" + h + ") OR size(" + h + ") = " + u.Value(N(uint64_t{0})) + ")");
  }
  // A marker the judge saw lapse (AcquireJudge refuses a standing one).
  MarkerClause(u, item == nullptr ? LapsedMarkerVersion(op.key_text)
                                  : item->has_closed ? item->closed.record_version : "");
  NoForeignClause(u);
  Json body = u.Body(api_->config().table, op.key, "ALL_NEW");
  // Saves the read that follows a refusal where DynamoDB supports it.
  body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD";
  return body;
}

Status LockProtocol::HoldBody(const AcquireOp& op, const LockItem* item, const Judgement* judged,
                              Json* body, uint64_t* token) {
  Update u;  // names are declared where used: DynamoDB refuses unused ones
  const std::string o = u.Name(attr::kOwner), h = u.Name(attr::kHolds), f = u.Name(attr::kFence);
  // The token: the fence read (or last seen, for the first write) + 1, conditional on it.
  uint64_t fence = 0;
  const bool has_fence = item == nullptr ? KnownFence(op.key_text, &fence) : item->has_fence;
  if (item != nullptr) fence = item->fence;
  if (has_fence && fence == UINT64_MAX) {
    return Status::BackendError("the fencing counter of lock '" + op.name + "' is at its end (2^64 - 1)");
  }
  *token = has_fence ? fence + 1 : static_cast<uint64_t>(WallClockUs()) + 1;
  u.Condition(has_fence ? f + " = " + u.Value(N(fence)) : "attribute_not_exists(" + f + ")");
  u.Set(f + " = " + u.Value(N(*token)));
  Json hold = HoldValue(op.record_version, op.lease_ms, *token, op.value, op.min_hold_ms, op.lock_delay_ms, op.take);
  if (item == nullptr || !item->has_holds) {
    Json map = Json{{"M", Json{{op.owner_value, std::move(hold)}}}};
    u.Set(h + " = " + u.Value(std::move(map)));
    u.Condition(item == nullptr
                    ? "(attribute_not_exists(" + h + ") OR size(" + h + ") = " + u.Value(N(uint64_t{0})) + ")"
                    : "attribute_not_exists(" + h + ")");
  } else {
    u.Set(u.Path({attr::kHolds, op.owner_value}) + " = " + u.Value(std::move(hold)));
  }
  if (item == nullptr || item->owner.empty()) {
    u.Condition("attribute_not_exists(" + o + ")");
  } else {  // an exclusive holder the judge saw expire
    u.Condition("(attribute_not_exists(" + o + ") OR " + u.Name(attr::kRecordVersion) + " = " +
                u.Value(S(item->record_version)) + ")");
    for (const char* a : {attr::kOwner, attr::kRecordVersion, attr::kLeaseMs, attr::kRenewedAtMs, attr::kData,
                          attr::kMinHoldMs, attr::kLockDelayMs}) {
      u.Remove(u.Name(a));
    }
  }
  if (item != nullptr) {
    size_t removed = 0;
    for (size_t i = 0; i < item->holds.size() && removed < kMaxRemovalsPerWrite; ++i) {
      if (judged->hold_free_in[i] > 0) continue;
      const HoldRecord& expired = item->holds[i];
      u.Condition(u.Path({attr::kHolds, expired.owner, attr::kRecordVersion}) + " = " +
                  u.Value(S(expired.record_version)));
      u.Remove(u.Path({attr::kHolds, expired.owner}));
      ++removed;
    }
  }
  if (op.permits != 0) {
    u.Set(u.Name(attr::kPermits) + " = " + u.Value(N(uint64_t{op.permits})));
  } else if (item == nullptr || item->has_permits) {
    u.Remove(u.Name(attr::kPermits));
  }
  if (op.kind == LockKind::kShared) {
    const std::string w = u.Name(attr::kWriter);
    if (item == nullptr || !item->has_writer) {
      u.Condition("attribute_not_exists(" + w + ")");
    } else {  // an announcement the judge saw stand unchanged for its queueMs: removed
      u.Condition("(attribute_not_exists(" + w + ") OR " +
                  (item->writer.record_version.empty()
                       ? "attribute_not_exists(" + u.Path({attr::kWriter, attr::kRecordVersion}) + ")"
                       : u.Path({attr::kWriter, attr::kRecordVersion}) + " = " +
                             u.Value(S(item->writer.record_version))) +
                  ")");
      u.Remove(w);
    }
  }
  MarkerClause(u, item == nullptr ? LapsedMarkerVersion(op.key_text)
                                  : item->has_closed ? item->closed.record_version : "");
  NoForeignClause(u);
  *body = u.Body(api_->config().table, op.key, "NONE");
  (*body)["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD";
  return Status::Ok();
}

Json LockProtocol::CleanupBody(const AcquireOp& op, const LockItem& item, const Judgement& judged) {
  Update u;
  size_t removed = 0;
  for (size_t i = 0; i < item.holds.size() && removed < kMaxRemovalsPerWrite; ++i) {
    if (judged.hold_free_in[i] > 0) continue;
    const HoldRecord& expired = item.holds[i];
    u.Condition(u.Path({attr::kHolds, expired.owner, attr::kRecordVersion}) + " = " +
                u.Value(S(expired.record_version)));
    u.Remove(u.Path({attr::kHolds, expired.owner}));
    ++removed;
  }
  Json body = u.Body(api_->config().table, op.key, "NONE");
  body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD";
  return body;
}

void LockProtocol::AcquireRound(Transport* transport, std::shared_ptr<AcquireOp> op,
                                const LockItem* item, const Judgement* judged, bool cleanup) {
  op->cleanup = cleanup;
  if (cleanup) {
    ++op->cleanups;
  } else {
    ++op->rounds;
  }
  op->record_version = NewRecordVersion();
  Json body;
  if (cleanup) {
    body = CleanupBody(*op, *item, *judged);
  } else if (op->is_hold()) {
    Status s = HoldBody(*op, item, judged, &body, &op->token);
    if (!s.ok()) {
      op->Finish(s, AcquireAttempt());
      return;
    }
  } else {
    body = ExclusiveBody(*op, item);
  }
  CallWithRetries(transport, api_->credentials(), "UpdateItem", std::move(body), op->deadline,
                  [this, transport, op](ApiResult r) {
    switch (r.outcome) {
      case Outcome::kOk:
        if (op->cleanup) {  // expired holds removed: judge the item again
          AcquireRefused(transport, op, Json());
        } else if (op->is_hold()) {
          Acquired(op->key_text, op->token, false);
          op->Acquired(op->token);
        } else {
          AcquiredExclusive(op, r.body);
        }
        return;
      case Outcome::kConditionFailed:
        AcquireRefused(transport, op, ItemOf(r.body));
        return;
      default:
        break;
    }
    if (HoldPathGone(r)) {  // the item went away since it was read: judge it again
      AcquireRefused(transport, op, Json());
      return;
    }
    if (!r.maybe_applied) {
      op->Finish(r.status, AcquireAttempt());
      return;
    }
    AcquireAmbiguous(transport, op, r.status);
  });
}

void LockProtocol::AcquiredExclusive(const std::shared_ptr<AcquireOp>& op, const Json& answer) {
  uint64_t token = 0;
  auto attrs = answer.find("Attributes");
  if (attrs == answer.end() || !NumberAttribute(*attrs, attr::kFence, &token)) {
    op->Finish(Status::BackendError(api_->config().Describe() +
                                    " answered an acquire without the new fencing token"),
               AcquireAttempt());
    return;
  }
  Acquired(op->key_text, token, true);
  // A writer that announced itself while it waited removes its announcement, if it is still
  // its own (another writer may have announced since: that one stays). In the background: the
  // exclusive hold keeps readers out meanwhile, and a lost removal ends after its queueMs.
  auto writer = attrs->find(attr::kWriter);
  if (writer != attrs->end()) {
    const Json* fields = MapOf(*writer);
    if (fields != nullptr && StringAttribute(*fields, attr::kOwner) == op->owner_value) {
      Update u;
      const std::string w = u.Name(attr::kWriter);
      u.Remove(w);
      u.Condition(u.Path({attr::kWriter, attr::kOwner}) + " = " + u.Value(S(op->owner_value)));
      InBackground("UpdateItem", u.Body(api_->config().table, op->key, "NONE"));
    }
  }
  op->Acquired(token);
}

void LockProtocol::AcquireRefused(Transport* transport, std::shared_ptr<AcquireOp> op, Json old_item) {
  if (!old_item.is_null()) {
    AcquireJudge(transport, std::move(op), std::move(old_item), Now());
    return;
  }
  Read(transport, op->key, op->deadline, [this, transport, op](Status s, Json item) {
    if (!s.ok()) {
      op->Finish(s, AcquireAttempt());
      return;
    }
    // Seen when the answer came, not when the read was sent: a holder's write that landed
    // while the read was on its way was sent after the read, and its lease counts from then.
    AcquireJudge(transport, op, std::move(item), Now());
  });
}

bool LockProtocol::AlreadyOurs(AcquireOp& op, const LockItem& item) {
  if (!op.is_hold()) {
    if (item.owner.empty() || item.owner != op.owner_value || !item.has_fence) return false;
    Acquired(op.key_text, item.fence, true);
    op.Acquired(item.fence);
    return true;
  }
  for (const HoldRecord& hold : item.holds) {
    if (hold.owner == op.owner_value && hold.token != 0) {
      Acquired(op.key_text, hold.token, false);
      op.Acquired(hold.token);
      return true;
    }
  }
  return false;
}

void LockProtocol::AcquireAmbiguous(Transport* transport, std::shared_ptr<AcquireOp> op, Status failure) {
  // The write may have landed: the item says whether the lock is ours, if the call's time
  // still allows a read (a silent server used it all up).
  Read(transport, op->key, op->deadline, [this, op, failure](Status s, Json json) {
    if (s.ok()) {
      LockItem item;
      ParseLockItem(json, &item);
      if (AlreadyOurs(*op, item)) return;
      if (op->cleanup) {  // only expired holds were being removed: nothing to give back
        op->Finish(failure, AcquireAttempt());
        return;
      }
    }
    // Unknown: give it back in case it landed, so no dead owner keeps it (in the
    // background: the caller does not wait another timeout for it).
    if (!s.ok() && !op->cleanup) InBackground("UpdateItem", ReleaseBody(op->key, op->owner_value, op->is_hold()));
    op->Finish(failure, AcquireAttempt());
  });
}

void LockProtocol::AcquireJudge(Transport* transport, std::shared_ptr<AcquireOp> op, Json json,
                                TimePoint seen_at) {
  LockItem item;
  ParseLockItem(json, &item);
  if (item.foreign != nullptr) {
    AcquireAttempt refused;
    refused.why_not = ForeignRefusal(item, "never holds beside it nor takes it over");
    op->Finish(Status::Ok(), std::move(refused));
    return;
  }
  if (AlreadyOurs(*op, item)) return;  // an earlier round did land (its answer was lost)
  if (item.holds_malformed) {
    op->Finish(Status::BackendError("the item of lock '" + op->name + "' in " + api_->config().Describe() +
                                    " has a '" + attr::kHolds + "' attribute that is not a map (not " +
                                    "written by dlock)"),
               AcquireAttempt());
    return;
  }
  if (item.closed_malformed) {
    op->Finish(Status::BackendError("the item of lock '" + op->name + "' in " + api_->config().Describe() +
                                    " has a '" + attr::kClosed + "' attribute that is not a marker dlock " +
                                    "wrote (a break of the lock removes it)"),
               AcquireAttempt());
    return;
  }
  const Judgement judged = Judge(op->key_text, item, seen_at);
  // A break's marker keeps the name closed to every acquire, holder-less, until it lapses: no
  // hold can be added while it stands, so nothing else is judged.
  if (item.has_closed && judged.closed_in > 0) {
    op->NotAcquired(judged.closed_in, item.closed.by);
    return;
  }
  // A holder is live until the name is free of it: its lease, and then its job rules.
  const bool owner_live = !item.owner.empty() && judged.owner_free_in > 0;
  bool held = !item.owner.empty() && judged.owner_in > 0;  // some lease has not run out
  std::vector<int64_t> live_in;  // the live holds' expiries
  size_t expired = 0;
  for (size_t i = 0; i < judged.hold_free_in.size(); ++i) {
    if (judged.hold_in[i] > 0) held = true;
    if (judged.hold_free_in[i] > 0) {
      live_in.push_back(judged.hold_free_in[i]);
    } else {
      ++expired;
    }
  }
  // Every lease has run out but a hold's job rules stand (a lock-delay after an unclean end, a
  // min hold a crashed holder did not live out): the name is closed, with no holder, until the
  // last of them ends.
  if (!held && (owner_live || !live_in.empty())) {
    int64_t until = 0;
    const char* by = kClosedByLockDelay;
    if (owner_live) {
      until = judged.owner_free_in;
      by = judged.owner_by;
    }
    for (size_t i = 0; i < judged.hold_free_in.size(); ++i) {
      if (judged.hold_free_in[i] > until) {
        until = judged.hold_free_in[i];
        by = judged.hold_by[i];
      }
    }
    op->NotAcquired(until, by);
    return;
  }
  const size_t removable = std::min(expired, kMaxRemovalsPerWrite);
  const bool semaphore_live = !live_in.empty() && item.permits != 0;
  const bool lock_live = owner_live || (!live_in.empty() && item.permits == 0);
  auto next_round = [&](bool cleanup) {
    if (cleanup ? op->cleanups < kMaxCleanups : op->rounds < kMaxAcquireRounds) {
      AcquireRound(transport, op, &item, &judged, cleanup);
    } else {
      op->NotAcquired(0);  // the item kept changing: try again at once
    }
  };
  // The name's sort while held (a lock, or a semaphore of n) is what its live holders make it.
  const uint32_t held_permits = semaphore_live ? item.permits : 0;
  if ((semaphore_live || lock_live) && held_permits != op->permits) {
    op->Finish(SortMismatch(op->name, held_permits, op->permits), AcquireAttempt());
    return;
  }
  const std::string lock = "lock '" + op->name + "'";
  // A hold of another sort (or n) than the expired holds left behind: they all go before
  // `permits` changes, so that no live hold ever stands beside a stale `permits`.
  const bool sort_changes = item.permits != op->permits && expired > kMaxRemovalsPerWrite;

  if (op->kind == LockKind::kExclusive && op->permits == 0) {
    std::vector<int64_t> blockers = live_in;
    if (owner_live) blockers.push_back(judged.owner_free_in);
    if (!blockers.empty()) {
      Announce(transport, op, SoonestExpiry(blockers));
      return;
    }
    // Every holder expired: take over, after removing expired holds beyond one write's share.
    next_round(expired > kMaxRemovalsPerWrite);
    return;
  }
  if (op->kind == LockKind::kShared) {
    std::vector<int64_t> blockers;
    if (owner_live) blockers.push_back(judged.owner_free_in);
    if (item.has_writer && judged.writer_in > 0) blockers.push_back(judged.writer_in);
    if (!blockers.empty()) {
      op->NotAcquired(SoonestExpiry(blockers));
      return;
    }
    if (live_in.size() >= kMaxHoldsPerName) {
      op->Finish(Status::InvalidArgument(
                     lock + " has " + std::to_string(live_in.size()) + " shared holders, the most " +
                     "one name can have on DynamoDB (" + std::to_string(kMaxHoldsPerName) +
                     ": every hold lives in the name's one item of at most 400 KB)"),
                 AcquireAttempt());
      return;
    }
    next_round(sort_changes || item.holds.size() - removable + 1 > kMaxHoldsPerName);
    return;
  }
  // A semaphore of op->permits: admitted while the live holds' takes (each 1 unless its entry
  // says more) and this one's make at most n. The write is conditional on the fence read, so
  // no hold (no take) was added meanwhile: the sum can only have fallen when it lands.
  uint64_t taken = 0;
  std::vector<std::pair<int64_t, uint32_t>> live_takes;  // {until free, take}
  uint64_t kept = 0;  // the takes still in the item after this write (it removes a share of the expired)
  size_t removed = 0;
  for (size_t i = 0; i < item.holds.size(); ++i) {
    const uint32_t take = item.holds[i].take;
    if (judged.hold_free_in[i] > 0) {
      taken += take;
      live_takes.emplace_back(judged.hold_free_in[i], take);
    } else if (removed < kMaxRemovalsPerWrite) {
      ++removed;  // as HoldBody picks them: the first expired ones, in token order
      continue;
    }
    kept += take;
  }
  if (taken + op->take > op->permits) {
    op->NotAcquired(RoomIn(std::move(live_takes), taken + op->take - op->permits));
    return;
  }
  // Expired holds beyond one write's share still count: removed first.
  next_round(sort_changes || kept + op->take > op->permits);
}

void LockProtocol::Announce(Transport* transport, std::shared_ptr<AcquireOp> op, int64_t holder_ttl_ms) {
  if (op->queue_ms == 0) {
    op->NotAcquired(holder_ttl_ms);
    return;
  }
  // Unconditional: the latest waiting writer's announcement stands (each keeps rewriting its
  // own while it waits), and whichever of them acquires removes only its own.
  Update u;
  Json writer = {{"M",
                  {{attr::kOwner, S(op->owner_value)},
                   {attr::kRecordVersion, S(NewRecordVersion())},
                   {attr::kQueueMs, N(op->queue_ms)}}}};
  u.Set(u.Name(attr::kWriter) + " = " + u.Value(std::move(writer)));
  NoForeignClause(u);
  CallWithRetries(transport, api_->credentials(), "UpdateItem",
                  u.Body(api_->config().table, op->key, "NONE"), op->deadline,
                  [op, holder_ttl_ms](ApiResult) {
                    // Best effort: a failed announcement only lets readers in until the next
                    // attempt's; the refusal stands either way.
                    op->NotAcquired(holder_ttl_ms);
                  });
}

int64_t LockProtocol::TakeoverIn(const Observation& o, bool trust_wall_clock, bool until_free) const {
  const uint64_t span = until_free ? std::max(o.free_ms, o.lease_ms) : o.lease_ms;
  int64_t in = CeilMs(o.first_seen + Millis(span) - Now());
  if (trust_wall_clock && api_->config().trust_local_time && o.renewed_at_ms > 0) {
    in = std::min<int64_t>(in, o.renewed_at_ms + static_cast<int64_t>(span) - WallClockMs());
  }
  return in;
}

LockProtocol::NameObservations& LockProtocol::ObservationsOf(const std::string& key_text) {
  if (observed_.size() >= kMaxObservations && observed_.find(key_text) == observed_.end()) {
    observed_.clear();
  }
  return observed_[key_text];
}

LockProtocol::Judgement LockProtocol::Judge(const std::string& key_text, const LockItem& item,
                                            TimePoint seen_at) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  NameObservations& seen = ObservationsOf(key_text);
  if (item.has_fence) {
    seen.fence_known = true;
    seen.fence = item.fence;
  }
  // One holder's takeover clock: it restarts whenever its record version changes (the holder
  // wrote since we last looked, or we never looked), as far as this waiter can tell.
  // free_in (optional): the ms until the name is free of it, its job rules (free_ms) included.
  auto observe = [this, seen_at](Observation& o, const std::string& record_version, uint64_t lease_ms,
                                 int64_t renewed_at_ms, bool trust_wall_clock, uint64_t free_ms = 0,
                                 int64_t* free_in = nullptr) -> int64_t {
    if (record_version.empty() || lease_ms == 0) {
      o = Observation();
      if (free_in != nullptr) *free_in = kNever;
      return kNever;
    }
    if (o.record_version != record_version) o = Observation{record_version, seen_at, lease_ms, renewed_at_ms, free_ms};
    if (free_in != nullptr) *free_in = TakeoverIn(o, trust_wall_clock, true);
    return TakeoverIn(o, trust_wall_clock);
  };
  Judgement judged;
  if (!item.owner.empty()) {
    judged.owner_in = observe(seen.owner, item.record_version, item.lease_ms, item.renewed_at_ms, true,
                              FreeSpanMs(item.lease_ms, item.min_hold_ms, item.lock_delay_ms), &judged.owner_free_in);
    judged.owner_by = RuleClosing(item.lease_ms, item.min_hold_ms, item.lock_delay_ms);
  } else {
    seen.owner = Observation();
  }
  std::unordered_map<std::string, Observation> holds;  // only the holds the item still has
  judged.hold_in.reserve(item.holds.size());
  judged.hold_free_in.reserve(item.holds.size());
  judged.hold_by.reserve(item.holds.size());
  for (const HoldRecord& hold : item.holds) {
    Observation o;
    auto it = seen.holds.find(hold.owner);
    if (it != seen.holds.end()) o = it->second;
    int64_t free_in = kNever;
    judged.hold_in.push_back(observe(o, hold.record_version, hold.lease_ms, hold.renewed_at_ms, true,
                                     FreeSpanMs(hold.lease_ms, hold.min_hold_ms, hold.lock_delay_ms), &free_in));
    judged.hold_free_in.push_back(free_in);
    judged.hold_by.push_back(RuleClosing(hold.lease_ms, hold.min_hold_ms, hold.lock_delay_ms));
    holds[hold.owner] = o;
  }
  seen.holds = std::move(holds);
  if (!item.has_writer) {
    seen.writer = Observation();
  } else if (item.writer.record_version.empty() || item.writer.queue_ms == 0) {
    seen.writer = Observation();
    judged.writer_in = 0;  // not a usable announcement: it stands for nothing
  } else {
    // No wall-clock shortcut: the announcement carries no writer's clock.
    judged.writer_in = observe(seen.writer, item.writer.record_version, item.writer.queue_ms, 0, false);
  }
  // The closed marker lapses as a lease does: once seen standing for its leaseMs (or, with
  // trust_local_time, by the breaker's wall clock).
  if (item.has_closed && !item.closed_malformed) {
    judged.closed_in = observe(seen.closed, item.closed.record_version, item.closed.lease_ms,
                               item.closed.renewed_at_ms, true);
  } else {
    seen.closed = Observation();
  }
  return judged;
}

std::string LockProtocol::ExpiredRecordVersion(const std::string& key_text) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  auto it = observed_.find(key_text);
  if (it == observed_.end() || it->second.owner.record_version.empty() ||
      TakeoverIn(it->second.owner, true, true) > 0) {
    return "";
  }
  return it->second.owner.record_version;
}

std::string LockProtocol::LapsedMarkerVersion(const std::string& key_text) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  auto it = observed_.find(key_text);
  if (it == observed_.end() || it->second.closed.record_version.empty() ||
      TakeoverIn(it->second.closed, true) > 0) {
    return "";
  }
  return it->second.closed.record_version;
}

void LockProtocol::Acquired(const std::string& key_text, uint64_t fence, bool exclusive) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  NameObservations& seen = ObservationsOf(key_text);
  if (exclusive) seen = NameObservations();
  seen.fence_known = true;
  seen.fence = fence;
}

bool LockProtocol::KnownFence(const std::string& key_text, uint64_t* fence) {
  std::lock_guard<std::mutex> lock(observed_mu_);
  auto it = observed_.find(key_text);
  if (it == observed_.end() || !it->second.fence_known) return false;
  *fence = it->second.fence;
  return true;
}

namespace {

bool IsHold(const LockState& lock) { return lock.kind == LockKind::kShared || lock.permits != 0; }

// A listening holder's renewal answered ALL_NEW: a request meant for this hold (recorded at a
// fence no lower than its token) goes to its listener, which drops one it heard already.
void HeardRequest(const LockState& lock, const Json& answer) {
  auto attrs = answer.find("Attributes");
  ReleaseRequestRecord request;
  if (attrs == answer.end() || !ParseReleaseRequest(*attrs, &request)) return;
  if (lock.fencing_token > request.token) return;  // an earlier holder's
  lock.request_listener->OnReleaseRequested(request.id, request.reason);
}

Status NotHeldStatus(const LockState& lock) {
  return Status::NotHeld(IsHold(lock) ? "lock '" + lock.name + "' no longer has this hold (released, " +
                                            "deleted, or taken over after its lease)"
                                      : "the item of lock '" + lock.name + "' has another owner");
}

const HoldRecord* FindHold(const LockItem& item, const std::string& owner_value) {
  for (const HoldRecord& hold : item.holds) {
    if (hold.owner == owner_value) return &hold;
  }
  return nullptr;
}

}  // namespace

void LockProtocol::Renew(Transport* transport, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
                         TimePoint deadline, std::function<void(Status)> done) {
  Json key;
  Status s = KeyFor(lock->name, &key);
  if (!s.ok()) {
    done(s);
    return;
  }
  const bool hold = IsHold(*lock);
  std::string rv = NewRecordVersion();
  Update u;
  // The hold's own attributes: at the top level, or in its entry of `holds`.
  const std::string me = hold ? u.Path({attr::kHolds, lock->owner_value}) + "." : "";
  u.Set(me + u.Name(attr::kRecordVersion) + " = " + u.Value(S(rv)));
  u.Set(me + u.Name(attr::kLeaseMs) + " = " + u.Value(N(lease_ms)));
  u.Set(me + u.Name(attr::kRenewedAtMs) + " = " + u.Value(N(WallClockMs())));
  // The lock-delay follows the new lease: none with lease 0 (a hold that never expires never
  // ends uncleanly), else the hold's own (an acquire with lease 0 stored none).
  const uint64_t delay_ms = std::min<uint64_t>(lock->lock_delay_ms, kMaxLeaseMs);
  if (lease_ms != 0 && delay_ms != 0) {
    u.Set(me + u.Name(attr::kLockDelayMs) + " = " + u.Value(N(delay_ms)));
  } else if (lock->lock_delay_ms != 0) {
    u.Remove(me + u.Name(attr::kLockDelayMs));
  }
  // A min hold not yet over: what is left of it, counted by waiters from the new record version.
  if (lock->min_hold_ms != 0) {
    const uint64_t left = MinHoldLeftMs(*lock);
    if (left != 0) {
      u.Set(me + u.Name(attr::kMinHoldMs) + " = " + u.Value(N(left)));
    } else {
      u.Remove(me + u.Name(attr::kMinHoldMs));
    }
  }
  if (hold) {
    u.Condition("attribute_exists(" + me.substr(0, me.size() - 1) + ")");
  } else {
    u.Condition(u.Name(attr::kOwner) + " = " + u.Value(S(lock->owner_value)));
  }
  // A holder that listens for release requests reads the item back ("Release requests").
  const bool listens = lock->request_listener != nullptr;
  CallWithRetries(transport, api_->credentials(), "UpdateItem",
                  u.Body(api_->config().table, key, listens ? "ALL_NEW" : "NONE"), std::min(deadline, CallDeadline()),
                  [this, transport, lock, rv, key, deadline, hold, done = std::move(done)](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      if (lock->request_listener != nullptr) HeardRequest(*lock, r.body);
      done(Status::Ok());
      return;
    }
    if (r.outcome == Outcome::kConditionFailed || (hold && HoldPathGone(r))) {
      done(NotHeldStatus(*lock));
      return;
    }
    if (!r.maybe_applied) {
      done(r.status);
      return;
    }
    // Ambiguous (e.g. a timeout after sending): read before deciding the lock is lost, within
    // `deadline` (a heartbeat: the lock's local deadline; an extend: the caller's bound).
    Status failure = r.status;
    Read(transport, key, std::min(deadline, CallDeadline()), [lock, rv, failure, done](Status s, Json json) {
      if (!s.ok()) {
        done(failure);  // still unknown: the heartbeat retries until the local deadline
        return;
      }
      LockItem item;
      ParseLockItem(json, &item);
      std::string current;  // our hold's record version, "" when it is not ours any more
      if (IsHold(*lock)) {
        const HoldRecord* mine = FindHold(item, lock->owner_value);
        if (mine != nullptr) current = mine->record_version.empty() ? "?" : mine->record_version;
      } else if (item.owner == lock->owner_value) {
        current = item.record_version.empty() ? "?" : item.record_version;
      }
      if (current.empty()) {
        done(NotHeldStatus(*lock));
      } else if (current == rv) {
        done(Status::Ok());  // it did land
      } else {
        done(failure);  // still ours, not renewed: try again
      }
    });
  });
}

namespace {

// A release's removal of owner_value's hold, conditional on it being ours: with it go its value
// and its job rules (a release is a clean end: no lock-delay).
void RemoveHold(Update& u, const std::string& owner_value, bool is_hold) {
  if (is_hold) {
    const std::string me = u.Path({attr::kHolds, owner_value});
    u.Remove(me);
    u.Condition("attribute_exists(" + me + ")");
  } else {
    const std::string o = u.Name(attr::kOwner);
    u.Remove(o);
    for (const char* a : {attr::kRecordVersion, attr::kLeaseMs, attr::kRenewedAtMs, attr::kData, attr::kMinHoldMs,
                          attr::kLockDelayMs}) {
      u.Remove(u.Name(a));
    }
    u.Condition(o + " = " + u.Value(S(owner_value)));
  }
}

}  // namespace

Json LockProtocol::ReleaseBody(const Json& key, const std::string& owner_value, bool is_hold) const {
  Update u;
  RemoveHold(u, owner_value, is_hold);
  return u.Body(api_->config().table, key, "NONE");
}

void LockProtocol::SetValue(Transport* transport, std::shared_ptr<const LockState> lock, const std::string& value,
                            std::function<void(Status)> done) {
  Json key;
  if (Status s = KeyFor(lock->name, &key); !s.ok()) return done(s);
  const bool hold = IsHold(*lock);
  Update u;
  std::string data;
  if (hold) {
    const std::string me = u.Path({attr::kHolds, lock->owner_value});
    data = me + "." + u.Name(attr::kData);
    u.Condition("attribute_exists(" + me + ")");
  } else {
    data = u.Name(attr::kData);
    u.Condition(u.Name(attr::kOwner) + " = " + u.Value(S(lock->owner_value)));
  }
  if (value.empty()) {
    u.Remove(data);
  } else {
    u.Set(data + " = " + u.Value(B(value)));
  }
  const TimePoint deadline = CallDeadline();
  CallWithRetries(transport, api_->credentials(), "UpdateItem", u.Body(api_->config().table, key, "NONE"), deadline,
                  [this, transport, lock, key, value, deadline, hold, done = std::move(done)](ApiResult r) {
    if (r.outcome == Outcome::kOk) return done(Status::Ok());
    if (r.outcome == Outcome::kConditionFailed || (hold && HoldPathGone(r))) return done(NotHeldStatus(*lock));
    if (!r.maybe_applied) return done(r.status);
    // Ambiguous: the item says whether it landed.
    Read(transport, key, deadline, [lock, value, hold, failure = r.status, done](Status s, Json json) {
      if (!s.ok()) return done(failure);
      LockItem item;
      ParseLockItem(json, &item);
      const HoldRecord* mine = hold ? FindHold(item, lock->owner_value) : nullptr;
      const bool ours = hold ? mine != nullptr : item.owner == lock->owner_value;
      if (!ours) return done(NotHeldStatus(*lock));
      done((hold ? mine->value : item.value) == value ? Status::Ok() : failure);
    });
  });
}

// One early release that leaves a min-hold marker (ReleaseWithMarker, below).
struct LockProtocol::ReleaseOp {
  std::shared_ptr<const LockState> lock;
  Json key;
  std::string key_text;
  TimePoint deadline;
  int rounds = 0;
  bool maybe_landed = false;     // an earlier write may have landed: "not ours" is its doing
  bool has_marker = false;       // the marker last seen
  bool marker_malformed = false;
  std::string marker_version;
  uint64_t marker_lease_ms = 0;  // its leaseMs (0 when malformed)
  std::string marker_by;         // and what left it
  Json body;                     // the write in flight
  std::string written_version;   // the marker it sets ("" = none)
  uint64_t written_ms = 0;
  int64_t written_wall_ms = 0;
  std::function<void(Status)> done;

  void Finish(Status s) {
    auto d = std::move(done);
    d(std::move(s));
  }
  bool Ours(const LockItem& item) const {
    return IsHold(*lock) ? FindHold(item, lock->owner_value) != nullptr : item.owner == lock->owner_value;
  }
};

void LockProtocol::Release(Transport* transport, std::shared_ptr<const LockState> lock,
                           std::function<void(Status)> done) {
  Json key;
  Status s = KeyFor(lock->name, &key);
  if (!s.ok()) {
    done(s);
    return;
  }
  const TimePoint deadline = CallDeadline();
  const bool hold = IsHold(*lock);
  // An early release: the min hold's marker stays (unless the hold is given back: an acquire
  // nobody took leaves no rules behind).
  if (MinHoldLeftMs(*lock) != 0 && !lock->given_back.load()) {
    auto op = std::make_shared<ReleaseOp>();
    op->lock = std::move(lock);
    op->key = std::move(key);
    op->key_text = op->key.dump();
    op->deadline = deadline;
    op->done = std::move(done);
    ReleaseWithMarker(transport, std::move(op));
    return;
  }
  CallWithRetries(transport, api_->credentials(), "UpdateItem", ReleaseBody(key, lock->owner_value, hold),
                  deadline, [this, transport, lock, key, deadline, hold, done = std::move(done)](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      done(Status::Ok());
      return;
    }
    if (r.outcome == Outcome::kConditionFailed || (hold && HoldPathGone(r))) {
      // After an attempt that may have landed, "not ours" is that attempt's own doing.
      done(r.maybe_applied ? Status::Ok() : NotHeldStatus(*lock));
      return;
    }
    // Not confirmed: the caller's handle is gone either way, so the release is retried in the
    // background; the item would otherwise stay held until its lease runs out (never, for a
    // fail-closed lock).
    Status failure = r.status;
    if (!r.maybe_applied) {
      if (failure.code() == Code::kIoError) InBackground("UpdateItem", ReleaseBody(key, lock->owner_value, hold));
      done(failure);
      return;
    }
    Read(transport, key, deadline, [this, lock, key, failure, hold, done](Status s, Json json) {
      if (s.ok()) {
        LockItem item;
        ParseLockItem(json, &item);
        const bool ours = hold ? FindHold(item, lock->owner_value) != nullptr : item.owner == lock->owner_value;
        if (!ours) {
          done(Status::Ok());  // no longer ours: the release landed
          return;
        }
      }
      InBackground("UpdateItem", ReleaseBody(key, lock->owner_value, hold));
      done(failure);
    });
  });
}

// An early release (a min hold not over): the hold goes and an owner-less marker, closed by
// "min_hold" for what is left of the min hold, takes its place, in one write conditional on
// the hold being ours and on the marker as last seen (none at first). A refusal that finds the
// hold still ours found a marker (another shared holder's early release, a break): it is
// replaced by one with a new record version lasting the longer of what is left of this min
// hold and the standing marker's leaseMs. (What is left of the standing marker as this client
// judges it is no bound for waiters that saw it earlier, and a marker left as it stands could
// be removed, between the read and the write, by an acquirer that judged it lapsed.)

void LockProtocol::ReleaseWithMarker(Transport* transport, std::shared_ptr<ReleaseOp> op) {
  if (++op->rounds > kMaxAcquireRounds) {
    op->Finish(Status::BackendError("lock '" + op->lock->name + "' kept changing while it was being released (" +
                                    std::to_string(kMaxAcquireRounds) + " writes refused): try again"));
    return;
  }
  Update u;
  RemoveHold(u, op->lock->owner_value, IsHold(*op->lock));
  const uint64_t left = MinHoldLeftMs(*op->lock);
  op->written_version.clear();
  if (left != 0) {
    const std::string c = u.Name(attr::kClosed);
    if (!op->has_marker) {
      u.Condition("attribute_not_exists(" + c + ")");
    } else if (op->marker_malformed) {
      u.Condition("attribute_exists(" + c + ")");
    } else {
      u.Condition(u.Path({attr::kClosed, attr::kRecordVersion}) + " = " + u.Value(S(op->marker_version)));
    }
    const bool standing_wins = op->has_marker && !op->marker_malformed && op->marker_lease_ms >= left &&
                               !op->marker_by.empty();
    op->written_version = NewRecordVersion();
    op->written_ms = std::max(left, op->has_marker && !op->marker_malformed ? op->marker_lease_ms : 0);
    op->written_wall_ms = WallClockMs();
    Json marker = {{attr::kRecordVersion, S(op->written_version)},
                   {attr::kLeaseMs, N(op->written_ms)},
                   {attr::kRenewedAtMs, N(op->written_wall_ms)},
                   {attr::kBy, S(standing_wins ? op->marker_by : std::string(kClosedByMinHold))}};
    u.Set(c + " = " + u.Value(Json{{"M", std::move(marker)}}));
  }
  op->body = u.Body(api_->config().table, op->key, "NONE");
  op->body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD";
  CallWithRetries(transport, api_->credentials(), "UpdateItem", op->body, op->deadline,
                  [this, transport, op](ApiResult r) {
    if (r.maybe_applied) op->maybe_landed = true;
    if (r.outcome == Outcome::kOk) {
      if (!op->written_version.empty()) {
        // This client's own acquires count the marker's time from now: no later than any waiter.
        std::lock_guard<std::mutex> lock(observed_mu_);
        ObservationsOf(op->key_text).closed =
            Observation{op->written_version, Now(), op->written_ms, op->written_wall_ms};
      }
      op->Finish(Status::Ok());
      return;
    }
    if (r.outcome == Outcome::kConditionFailed || (IsHold(*op->lock) && HoldPathGone(r))) {
      ReleaseMarkerRefused(transport, op, r.outcome == Outcome::kConditionFailed ? ItemOf(r.body) : Json());
      return;
    }
    // Not confirmed: retried in the background, as a plain release is (the hold keeps its min
    // hold meanwhile: a waiter that judges it expired waits that out too).
    Status failure = r.status;
    if (!r.maybe_applied) {
      if (failure.code() == Code::kIoError) InBackground("UpdateItem", op->body);
      op->Finish(failure);
      return;
    }
    Read(transport, op->key, op->deadline, [this, op, failure](Status s, Json json) {
      if (s.ok()) {
        LockItem item;
        ParseLockItem(json, &item);
        if (!op->Ours(item)) {
          op->Finish(Status::Ok());  // no longer ours: the release landed
          return;
        }
      }
      InBackground("UpdateItem", op->body);
      op->Finish(failure);
    });
  });
}

void LockProtocol::ReleaseMarkerRefused(Transport* transport, std::shared_ptr<ReleaseOp> op, Json old_item) {
  if (old_item.is_null()) {
    Read(transport, op->key, op->deadline, [this, transport, op](Status s, Json item) {
      if (!s.ok()) {
        op->Finish(s);
        return;
      }
      if (item.is_null()) item = Json::object();  // no item: not ours
      ReleaseMarkerRefused(transport, op, std::move(item));
    });
    return;
  }
  LockItem item;
  ParseLockItem(old_item, &item);
  if (!op->Ours(item)) {
    op->Finish(op->maybe_landed ? Status::Ok() : NotHeldStatus(*op->lock));
    return;
  }
  op->has_marker = item.has_closed;
  op->marker_malformed = item.closed_malformed;
  op->marker_version = item.closed.record_version;
  op->marker_lease_ms = item.closed_malformed ? 0 : item.closed.lease_ms;
  op->marker_by = item.closed_malformed ? "" : item.closed.by;
  ReleaseWithMarker(transport, std::move(op));
}

namespace {

// The name's sort while holds stand, as Inspect reports it: shared holds, or a semaphore.
void DescribeSort(const LockItem& item, LockInfo* info) {
  if (item.owner.empty() && !item.holds.empty()) {
    info->kind = item.permits != 0 ? LockKind::kExclusive : LockKind::kShared;
    info->permits = item.permits;
  }
}

HolderInfo HolderOf(const std::string& owner_value, uint64_t token, const std::string& value,
                    int64_t remaining_ms) {
  HolderInfo holder;
  holder.owner = OwnerLabel(owner_value);
  holder.remaining_ms = remaining_ms;
  holder.fencing_token = token;
  holder.value = value;
  return holder;
}

bool RecordCurrent(const BreakRecord& record, int64_t now_ms) {
  return record.at_ms + kBrokenRecordMs > now_ms;  // both clamped: no overflow
}

// A record's size in the item, near enough (DynamoDB's sizes: names, values, 3 per map or list,
// at most 21 per number, 1 per entry).
size_t RecordBytes(const BreakRecord& record) {
  return 64 + record.reason.size() + 22 * record.tokens.size();
}

// The records a break leaves: its own first, then the older ones still current, while they fit
// kMaxBrokenRecords tokens (each record's first, highest tokens kept) and kMaxBrokenRecordBytes.
std::vector<BreakRecord> KeptRecords(BreakRecord newest, const std::vector<BreakRecord>& older, int64_t now_ms) {
  std::vector<BreakRecord> kept;
  size_t tokens = 0, bytes = 0;
  auto keep = [&](BreakRecord record) {
    if (record.tokens.size() > kMaxBrokenRecords - tokens) record.tokens.resize(kMaxBrokenRecords - tokens);
    if (record.tokens.empty() || (!kept.empty() && bytes + RecordBytes(record) > kMaxBrokenRecordBytes)) {
      return false;
    }
    tokens += record.tokens.size();
    bytes += RecordBytes(record);
    kept.push_back(std::move(record));
    return true;
  };
  keep(std::move(newest));
  for (const BreakRecord& record : older) {
    if (RecordCurrent(record, now_ms) && !keep(record)) break;
  }
  return kept;
}

Json RecordsValue(const std::vector<BreakRecord>& records) {
  Json list = Json::array();
  for (const BreakRecord& record : records) {
    Json tokens = Json::array();
    for (uint64_t token : record.tokens) tokens.push_back(N(token));
    Json fields = {{attr::kAtMs, N(record.at_ms)}, {attr::kTokens, Json{{"L", std::move(tokens)}}}};
    // An empty string is left out: older DynamoDB (and dynalite) refuse empty attribute values.
    if (!record.reason.empty()) fields[attr::kReason] = S(record.reason);
    list.push_back(Json{{"M", std::move(fields)}});
  }
  return Json{{"L", std::move(list)}};
}

// What a stored attribute that dlock did not write makes of a call: a clear error.
Status Malformed(const std::string& name, const DynamoConfig& config, const char* attribute,
                 const char* what) {
  return Status::BackendError("the item of lock '" + name + "' in " + config.Describe() + " has a '" +
                              attribute + "' attribute that is not " + what + " (not written by dlock)");
}

}  // namespace

void LockProtocol::Inspect(Transport* transport, const std::string& name,
                           std::function<void(Status, LockInfo)> done) {
  Json key;
  Status s = KeyFor(name, &key);
  if (!s.ok()) {
    done(s, LockInfo());
    return;
  }
  Read(transport, key, CallDeadline(), [this, name, done = std::move(done)](Status st, Json json) {
    LockInfo info;
    if (!st.ok()) {
      done(st, info);
      return;
    }
    LockItem item;
    ParseLockItem(json, &item);
    if (item.closed_malformed || item.broken_malformed) {
      done(item.closed_malformed ? Malformed(name, api_->config(), attr::kClosed, "a marker (a break removes it)")
                                 : Malformed(name, api_->config(), attr::kBroken, "a list of break records"),
           LockInfo());
      return;
    }
    const int64_t now = WallClockMs();
    // What is left of a time, estimated from the writer's wall clock at its write.
    auto remaining = [now](uint64_t lease_ms, int64_t renewed_at_ms) -> int64_t {
      if (lease_ms == 0) return -1;
      const int64_t lease = static_cast<int64_t>(lease_ms);  // both clamped by ParseLockItem
      return std::clamp<int64_t>(renewed_at_ms + lease - now, 0, lease);
    };
    // A hold whose lease ran out while its job rules stand is no holder: it keeps the name
    // closed (by the rule that ends last) for what is left of them.
    int64_t rule_closed_ms = 0;
    std::string rule_closed_by;
    auto ruled_out = [&](uint64_t lease_ms, int64_t renewed_at_ms, uint64_t min_hold_ms, uint64_t lock_delay_ms) {
      if (lease_ms == 0 || remaining(lease_ms, renewed_at_ms) > 0) return false;
      const uint64_t span = FreeSpanMs(lease_ms, min_hold_ms, lock_delay_ms);
      const int64_t left = remaining(span, renewed_at_ms);
      if (left <= 0) return false;
      if (left > rule_closed_ms) {
        rule_closed_ms = left;
        rule_closed_by = RuleClosing(lease_ms, min_hold_ms, lock_delay_ms);
      }
      return true;
    };
    if (item.foreign != nullptr) {
      // Another lock client's holder: its label and whose item it is; its lease is theirs to
      // judge (shown as none).
      HolderInfo holder;
      holder.owner = (item.foreign_owner.empty() ? std::string() : item.foreign_owner + " ") + "[" + item.foreign + "]";
      info.holders.push_back(std::move(holder));
    }
    if (!item.owner.empty() && !ruled_out(item.lease_ms, item.renewed_at_ms, item.min_hold_ms, item.lock_delay_ms)) {
      info.holders.push_back(HolderOf(item.owner, item.has_fence ? item.fence : 0, item.value,
                                      remaining(item.lease_ms, item.renewed_at_ms)));
    }
    // Holds a crashed holder left are listed (with 0 ms left) until a waiter removes them.
    for (const HoldRecord& hold : item.holds) {
      if (ruled_out(hold.lease_ms, hold.renewed_at_ms, hold.min_hold_ms, hold.lock_delay_ms)) continue;
      info.holders.push_back(HolderOf(hold.owner, hold.token, hold.value, remaining(hold.lease_ms, hold.renewed_at_ms)));
      // The item's: at most the permits (a server's number is clamped before it is shown).
      info.holders.back().take = std::clamp<uint32_t>(hold.take, 1, std::max<uint32_t>(item.permits, 1));
    }
    if (!info.holders.empty()) DescribeSort(item, &info);
    // A break's or an early release's marker, by its writer's wall clock (a waiter that first
    // sees it now may still wait its whole time: it judges the marker as a lease, on its own
    // clock); or the job rules of holds whose leases ran out.
    if (info.holders.empty()) {
      if (item.has_closed) {
        info.closed_ms = remaining(item.closed.lease_ms, item.closed.renewed_at_ms);
        if (info.closed_ms > 0) info.closed_by = item.closed.by;
      }
      if (rule_closed_ms > info.closed_ms) {
        info.closed_ms = rule_closed_ms;
        info.closed_by = rule_closed_by;
      }
    }
    for (const BreakRecord& record : item.broken) {
      if (!RecordCurrent(record, now)) continue;
      for (uint64_t token : record.tokens) info.broken.push_back(BrokenRecord{token, record.reason});
    }
    done(Status::Ok(), std::move(info));
  });
}

// One break: what it has broken so far, and the write in flight.
struct LockProtocol::BreakOp {
  std::string name;
  std::string reason;
  bool now = false;
  Json key;
  std::string key_text;
  TimePoint deadline;
  int writes = 0;
  int refusals = 0;  // writes refused because the item changed since its read
  bool sort_known = false;  // result.kind/permits were taken from the first read
  int64_t hold_closed_ms = 0;  // the longest remaining lease of the holds broken so far
  // An earlier break's marker (unless now): the name stays closed until earlier_until, as this
  // client judges that marker (a waiter's rule). Carried while this break's own share marker
  // (own_marker) stands in its place.
  bool has_earlier = false;
  TimePoint earlier_until;
  std::string own_marker;  // the record version of the marker this break last set
  BreakResult result;
  // The write in flight: what it breaks, and how to tell that it landed when its answer is lost.
  struct Write {
    bool last = false;  // it breaks every hold left
    std::vector<HolderInfo> holders;
    int64_t hold_closed_ms = 0;
    std::string marker_version;  // the marker it sets; "" = it sets none
    uint64_t marker_ms = 0;
    int64_t marker_wall_ms = 0;
    BreakRecord record;  // the record it prepends; no tokens = none
  } write;
  std::function<void(Status, BreakResult)> done;

  void Finish(Status s) {
    auto d = std::move(done);
    d(std::move(s), std::move(result));
  }
  // Whether item shows the write in flight landed (read after an ambiguous failure).
  bool Landed(const LockItem& item) const {
    if (!write.marker_version.empty()) {
      return item.has_closed && item.closed.record_version == write.marker_version;
    }
    return !write.record.tokens.empty() && !item.broken.empty() &&
           item.broken.front().tokens == write.record.tokens && item.broken.front().at_ms == write.record.at_ms;
  }
};

void LockProtocol::Break(Transport* transport, const std::string& name, const std::string& reason, bool now,
                         std::function<void(Status, BreakResult)> done) {
  auto op = std::make_shared<BreakOp>();
  op->name = name;
  op->reason = reason;
  op->now = now;
  op->deadline = CallDeadline();
  op->done = std::move(done);
  Status s = KeyFor(name, &op->key);
  if (s.ok() && reason.size() > kMaxReasonBytes) {
    s = Status::InvalidArgument("the reason for breaking lock '" + name + "' is " + std::to_string(reason.size()) +
                                " bytes, more than " + std::to_string(kMaxReasonBytes));
  }
  if (s.ok() && !IsValidUtf8(reason)) {
    s = Status::InvalidArgument("the reason for breaking lock '" + name + "' is not valid UTF-8, which DynamoDB requires");
  }
  if (!s.ok()) {
    op->Finish(s);
    return;
  }
  op->key_text = op->key.dump();
  BreakRound(transport, std::move(op));
}

void LockProtocol::BreakRound(Transport* transport, std::shared_ptr<BreakOp> op) {
  Read(transport, op->key, op->deadline, [this, transport, op](Status s, Json json) {
    if (!s.ok()) {
      op->Finish(s);
      return;
    }
    LockItem item;
    ParseLockItem(json, &item);
    BreakWrite(transport, op, item, Now());  // seen when the answer came, as a waiter judges
  });
}

void LockProtocol::BreakWrite(Transport* transport, std::shared_ptr<BreakOp> op, const LockItem& item,
                              TimePoint seen_at) {
  if (item.foreign != nullptr) {
    op->Finish(Status::BackendError("lock '" + op->name + "' in " + api_->config().Describe() + ": " +
                                    ForeignRefusal(item, "does not break it")));
    return;
  }
  if (item.holds_malformed) {
    op->Finish(Malformed(op->name, api_->config(), attr::kHolds, "a map"));
    return;
  }
  if (!op->sort_known) {
    DescribeSort(item, &op->result);
    op->sort_known = true;
  }
  // What is left of each lease, judged as a waiter judges it (from when this client first saw
  // its record version; the holder's wall clock with trust_local_time): -1 = no expiry.
  const Judgement judged = Judge(op->key_text, item, seen_at);
  // An earlier break's marker keeps what is left of its time, unless now: the holders that
  // break broke may still be working. (A marker of another sort, or unreadable, goes.)
  const bool own_marker = item.has_closed && !op->own_marker.empty() && item.closed.record_version == op->own_marker;
  const bool earlier_marker = !op->now && item.has_closed && !item.closed_malformed &&
                              item.closed.by == kClosedByBreak && !own_marker;
  if (earlier_marker) {
    op->has_earlier = judged.closed_in > 0;
    op->earlier_until = Now() + Millis(std::min<int64_t>(judged.closed_in, static_cast<int64_t>(item.closed.lease_ms)));
  } else if (!own_marker) {
    op->has_earlier = false;  // gone, or replaced by another's write: only what stands counts
  }
  const int64_t earlier_ms = op->has_earlier ? std::max<int64_t>(0, CeilMs(op->earlier_until - Now())) : 0;
  if (item.owner.empty() && item.holds.empty()) {
    // Nothing left to break, and no marker, or an earlier break's that outlasts what this break
    // broke: it stands as it is (its record version unchanged, waiters keep counting).
    if (!item.has_closed || (earlier_marker && earlier_ms > 0 && op->hold_closed_ms <= earlier_ms)) {
      if (item.has_closed) {
        op->result.closed_ms = earlier_ms;
        op->result.closed_by = kClosedByBreak;
      }
      op->Finish(Status::Ok());
      return;
    }
  }
  if (++op->writes > kMaxBreakWrites) {
    op->Finish(Status::BackendError("lock '" + op->name + "' kept changing while it was being broken (" +
                                    std::to_string(kMaxBreakWrites) + " writes refused): try again"));
    return;
  }
  // Renewing back to back, a holder can change its record between every read and write: after
  // a few refusals a hold written by dlock (it has a record version) is judged at its whole lease,
  // and the write holds while its lease length stays what was read.
  const bool whole_leases = op->refusals >= kBreakRefusalsBeforeWholeLeases;
  auto remaining = [whole_leases](int64_t in, uint64_t lease_ms) -> int64_t {
    if (in == kNever) return -1;
    return whole_leases ? static_cast<int64_t>(lease_ms) : std::clamp<int64_t>(in, 0, static_cast<int64_t>(lease_ms));
  };
  BreakOp::Write w;
  w.hold_closed_ms = op->hold_closed_ms;
  auto breaks = [&w](HolderInfo holder) {
    if (holder.fencing_token != 0) w.record.tokens.push_back(holder.fencing_token);
    w.hold_closed_ms = std::max(w.hold_closed_ms, holder.remaining_ms);
    w.holders.push_back(std::move(holder));
  };

  // The write holds only if nothing changed since the read: no acquisition (the fence), and
  // no broken hold renewed, extended or released (its record version), so that the leases
  // judged are the leases broken.
  Update u;
  const std::string f = u.Name(attr::kFence), o = u.Name(attr::kOwner);
  u.Condition(item.has_fence ? f + " = " + u.Value(N(item.fence)) : "attribute_not_exists(" + f + ")");
  size_t room = kMaxRemovalsPerWrite;
  if (item.owner.empty()) {
    u.Condition("attribute_not_exists(" + o + ")");
  } else {
    const std::string rv = u.Name(attr::kRecordVersion);
    u.Condition(o + " = " + u.Value(S(item.owner)));
    if (item.record_version.empty()) {
      u.Condition("attribute_not_exists(" + rv + ")");
    } else if (whole_leases) {
      u.Condition(u.Name(attr::kLeaseMs) + " = " + u.Value(N(item.lease_ms)));
    } else {
      u.Condition(rv + " = " + u.Value(S(item.record_version)));
    }
    u.Remove(o);
    for (const char* a : {attr::kRecordVersion, attr::kLeaseMs, attr::kRenewedAtMs, attr::kData, attr::kMinHoldMs,
                          attr::kLockDelayMs}) {
      u.Remove(u.Name(a));
    }
    breaks(HolderOf(item.owner, item.has_fence ? item.fence : 0, item.value, remaining(judged.owner_in, item.lease_ms)));
    --room;
  }
  w.last = item.holds.size() <= room;
  for (size_t i = 0; i < item.holds.size() && i < room; ++i) {
    const HoldRecord& hold = item.holds[i];
    const std::string rv = u.Path({attr::kHolds, hold.owner, attr::kRecordVersion});
    u.Condition(hold.record_version.empty()
                    ? "attribute_exists(" + u.Path({attr::kHolds, hold.owner}) + ") AND attribute_not_exists(" + rv + ")"
                    : rv + " = " + u.Value(S(hold.record_version)));
    if (!w.last) u.Remove(u.Path({attr::kHolds, hold.owner}));
    breaks(HolderOf(hold.owner, hold.token, hold.value, remaining(judged.hold_in[i], hold.lease_ms)));
  }
  if (w.last) {
    // An empty map, never none: a hold's acquire sets holds.<owner> in it.
    if (!item.holds.empty()) u.Set(u.Name(attr::kHolds) + " = " + u.Value(Json{{"M", Json::object()}}));
    if (item.has_permits) u.Remove(u.Name(attr::kPermits));
  }

  // The marker: the longest remaining lease broken, or what is left of an earlier break's
  // marker if longer (none with now); while a larger break goes on share by share, at least
  // timeout_ms, so that nothing is acquired between its writes. A new record version: every
  // waiter counts its whole time from when it sees it.
  const std::string c = u.Name(attr::kClosed);
  if (!item.has_closed) {
    u.Condition("attribute_not_exists(" + c + ")");
  } else if (item.closed_malformed) {
    u.Condition("attribute_exists(" + c + ")");
  } else {
    u.Condition(u.Path({attr::kClosed, attr::kRecordVersion}) + " = " + u.Value(S(item.closed.record_version)));
  }
  const int64_t share_ms = static_cast<int64_t>(api_->config().params.timeout_ms);
  const int64_t closed_ms = std::max(w.hold_closed_ms, earlier_ms);
  const int64_t marker_ms = !w.last ? std::max(closed_ms, share_ms) : op->now ? 0 : closed_ms;
  if (marker_ms > 0) {
    w.marker_version = NewRecordVersion();
    w.marker_ms = std::min<uint64_t>(static_cast<uint64_t>(marker_ms), kMaxLeaseMs);
    w.marker_wall_ms = WallClockMs();
    Json marker = {{attr::kRecordVersion, S(w.marker_version)},
                   {attr::kLeaseMs, N(w.marker_ms)},
                   {attr::kRenewedAtMs, N(w.marker_wall_ms)},
                   {attr::kBy, S(kClosedByBreak)}};
    u.Set(c + " = " + u.Value(Json{{"M", std::move(marker)}}));
  } else if (item.has_closed) {
    u.Remove(c);
  }

  // The record of what it broke, newest tokens first, before the older records still current.
  if (!w.record.tokens.empty()) {
    std::sort(w.record.tokens.rbegin(), w.record.tokens.rend());
    w.record.reason = op->reason;
    w.record.at_ms = WallClockMs();
    std::vector<BreakRecord> kept = KeptRecords(w.record, item.broken, w.record.at_ms);
    w.record = kept.front();  // as stored (its tokens may have been cut to the newest)
    u.Set(u.Name(attr::kBroken) + " = " + u.Value(RecordsValue(kept)));
  }

  op->write = std::move(w);
  CallWithRetries(transport, api_->credentials(), "UpdateItem", u.Body(api_->config().table, op->key, "NONE"),
                  op->deadline, [this, transport, op](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      BreakWritten(transport, op);
      return;
    }
    if (r.outcome == Outcome::kConditionFailed || HoldPathGone(r)) {  // changed since the read
      ++op->refusals;
      BreakRound(transport, op);
      return;
    }
    if (!r.maybe_applied) {
      op->Finish(r.status);
      return;
    }
    // Ambiguous: the item says whether it landed, and what is left to break if it did not.
    Read(transport, op->key, op->deadline, [this, transport, op, failure = r.status](Status s, Json json) {
      if (!s.ok()) {
        op->Finish(failure);
        return;
      }
      LockItem now_item;
      ParseLockItem(json, &now_item);
      if (op->Landed(now_item)) {
        BreakWritten(transport, op);
      } else {
        BreakWrite(transport, op, now_item, Now());
      }
    });
  });
}

void LockProtocol::BreakWritten(Transport* transport, std::shared_ptr<BreakOp> op) {
  BreakOp::Write& w = op->write;
  for (HolderInfo& holder : w.holders) op->result.holders.push_back(std::move(holder));
  w.holders.clear();
  op->hold_closed_ms = w.hold_closed_ms;
  if (!w.marker_version.empty()) {
    op->own_marker = w.marker_version;
    // This client's own acquires count the marker's time from now: no later than any waiter.
    std::lock_guard<std::mutex> lock(observed_mu_);
    ObservationsOf(op->key_text).closed = Observation{w.marker_version, Now(), w.marker_ms, w.marker_wall_ms};
  }
  if (!w.last) {
    BreakRound(transport, std::move(op));  // the next share
    return;
  }
  op->result.closed_ms = static_cast<int64_t>(w.marker_ms);
  op->result.closed_by = w.marker_ms > 0 ? kClosedByBreak : "";
  op->Finish(Status::Ok());
}

// ---- Release requests ----

bool ParseReleaseRequest(const Json& item, ReleaseRequestRecord* out) {
  *out = ReleaseRequestRecord();
  if (!item.is_object()) return false;
  auto it = item.find(attr::kReleaseRequest);
  if (it == item.end()) return false;
  const Json* fields = MapOf(*it);
  if (fields == nullptr) return false;
  std::string id = StringAttribute(*fields, attr::kRequestId);
  if (id.empty() || id.size() > kMaxRequestIdBytes || !NumberAttribute(*fields, attr::kToken, &out->token)) {
    return false;
  }
  out->id = std::move(id);
  out->reason = StringAttribute(*fields, attr::kReason);
  if (out->reason.size() > kMaxReasonBytes) out->reason.resize(kMaxReasonBytes);
  return true;
}

namespace {

// The holds of an item: its exclusive owner, or its entries in `holds` (expired ones too: there
// is no server clock to judge them by).
uint32_t HoldCount(const LockItem& item) {
  return static_cast<uint32_t>(std::min<size_t>((item.owner.empty() ? 0 : 1) + item.holds.size(), UINT32_MAX));
}

}  // namespace

struct LockProtocol::RequestOp {
  std::string name;
  std::string reason;
  std::string id;
  Json key;
  std::string key_text;
  int rounds = 0;
  TimePoint deadline;
  std::function<void(Status, uint32_t)> done;
};

void LockProtocol::RequestRelease(Transport* transport, const std::string& name, const std::string& reason,
                                  std::function<void(Status, uint32_t)> done) {
  auto op = std::make_shared<RequestOp>();
  op->name = name;
  op->reason = reason;
  op->deadline = CallDeadline();
  op->done = std::move(done);
  Status s = KeyFor(name, &op->key);
  if (s.ok() && !IsValidUtf8(reason)) {
    s = Status::InvalidArgument("the reason of the release request for lock '" + name +
                                "' is not valid UTF-8, which DynamoDB requires");
  }
  if (s.ok()) s = NewOwnerToken(&op->id);  // 128 random bits: tells this request from any other
  if (!s.ok()) return op->done(s, 0);
  op->key_text = op->key.dump();
  uint64_t fence = 0;
  if (KnownFence(op->key_text, &fence)) return RequestWrite(transport, std::move(op), fence);
  RequestRead(transport, std::move(op));
}

void LockProtocol::RequestRead(Transport* transport, std::shared_ptr<RequestOp> op) {
  Read(transport, op->key, op->deadline, [this, transport, op](Status s, Json item) {
    if (!s.ok()) return op->done(s, 0);
    RequestJudge(transport, op, std::move(item));
  });
}

void LockProtocol::RequestJudge(Transport* transport, std::shared_ptr<RequestOp> op, Json json) {
  LockItem item;
  ParseLockItem(json, &item);
  if (HoldCount(item) == 0) return op->done(Status::Ok(), 0);  // free: nothing written
  if (!item.has_fence) {
    return op->done(Malformed(op->name, api_->config(), attr::kFence, "there while it has holders"), 0);
  }
  RequestWrite(transport, std::move(op), item.fence);
}

void LockProtocol::RequestWrite(Transport* transport, std::shared_ptr<RequestOp> op, uint64_t fence) {
  if (++op->rounds > kMaxAcquireRounds) {
    return op->done(Status::BackendError(api_->config().Describe() + ": lock '" + op->name +
                                         "' was acquired again and again while a release request was written (" +
                                         std::to_string(kMaxAcquireRounds) + " tries): ask again"),
                    0);
  }
  Update u;
  Json request = {{attr::kRequestId, S(op->id)}, {attr::kToken, N(fence)}};
  if (!op->reason.empty()) request[attr::kReason] = S(op->reason);
  u.Set(u.Name(attr::kReleaseRequest) + " = " + u.Value(Json{{"M", std::move(request)}}));
  // The fence recorded is the item's: no hold was added since it was read (every acquisition
  // raises it), so every hold asked has a token up to it and every later one a greater token.
  u.Condition(u.Name(attr::kFence) + " = " + u.Value(N(fence)));
  u.Condition("(attribute_exists(" + u.Name(attr::kOwner) + ") OR size(" + u.Name(attr::kHolds) + ") > " +
              u.Value(N(uint64_t{0})) + ")");
  Json body = u.Body(api_->config().table, op->key, "ALL_NEW");
  body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD";
  CallWithRetries(transport, api_->credentials(), "UpdateItem", std::move(body), op->deadline,
                  [this, transport, op](ApiResult r) {
    if (r.outcome == Outcome::kOk) {
      LockItem item;
      auto attrs = r.body.find("Attributes");
      if (attrs != r.body.end()) ParseLockItem(*attrs, &item);
      return op->done(Status::Ok(), std::max<uint32_t>(HoldCount(item), 1));  // the condition saw one
    }
    if (r.outcome == Outcome::kConditionFailed) {
      // Released, or acquired again since the fence was seen: judged from the item as it is now.
      Json old = ItemOf(r.body);
      if (!old.is_null()) return RequestJudge(transport, op, std::move(old));
      return RequestRead(transport, op);
    }
    if (!r.maybe_applied) return op->done(r.status, 0);
    // It may have landed: it did when the item holds this request.
    Status failure = r.status;
    Read(transport, op->key, op->deadline, [op, failure](Status s, Json json) {
      ReleaseRequestRecord request;
      if (s.ok() && ParseReleaseRequest(json, &request) && request.id == op->id) {
        LockItem item;
        ParseLockItem(json, &item);
        return op->done(Status::Ok(), std::max<uint32_t>(HoldCount(item), 1));
      }
      op->done(failure, 0);
    });
  });
}

}  // namespace dlock::dynamodb
