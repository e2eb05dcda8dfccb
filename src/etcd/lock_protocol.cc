#include "etcd/lock_protocol.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>
#include <unordered_set>

#include "core/options.h"
#include "core/server_text.h"
#include "core/token.h"

namespace dlock::etcd {
namespace {

constexpr char kTxn[] = "/v3/kv/txn";
constexpr char kRange[] = "/v3/kv/range";
constexpr char kGrant[] = "/v3/lease/grant";
constexpr char kKeepAlive[] = "/v3/lease/keepalive";
constexpr char kTimeToLive[] = "/v3/lease/timetolive";
constexpr char kRevoke[] = "/v3/lease/revoke";
constexpr char kPut[] = "/v3/kv/put";

// Lost races a semaphore attempt runs again before it reports a refusal (holder_ttl_ms 0: the
// core tries again at once).
constexpr int kSemaphoreRounds = 16;
// Distinct leases a refused attempt asks the time to live of.
constexpr size_t kMaxTtlLookups = 16;

// Break (lock_protocol.h, "Break").
constexpr char kClosedByBreak[] = "broken";
// Rounds a break runs again when the name changed between its read and its transaction.
constexpr int kBreakRounds = 8;
// The spare second of the marker's lease: the time from its grant to the transaction's commit.
constexpr int64_t kMarkerSpareMs = 1000;
// The records' shared lease lives a day and an hour; it is used for new records only while a
// whole day of it is left, so each record lives at least kBrokenRecordMs.
constexpr int64_t kRecordLeaseS = kBrokenRecordMs / 1000 + 3600;
// Job rules (lock_protocol.h, "Job rules"): the markers' values, and the min hold lease's spare
// for the time from its grant to the commit of the transaction that puts the marker.
constexpr char kClosedByMinHold[] = "min_hold";
constexpr char kClosedByLockDelay[] = "lock_delay";
constexpr int64_t kRuleSpareMs = 250;
// A reason is the operator's words, at most this long (the core's limit; more is not dlock's).
constexpr size_t kMaxStoredReasonBytes = 1024;
// The digits of a record's token in its key: every uint64 fits, and the keys sort by token.
constexpr size_t kTokenDigits = 20;
// Release requests (lock_protocol.h, "Release requests"): the request keys' shared lease lives
// two minutes and is used for new requests while a minute of it is left, so that a request key
// stays at least a minute (long after any listening holder's watch delivered it) and then goes
// by itself, with one grant per minute at most however many requests are made.
constexpr int64_t kRequestLeaseS = 120;
constexpr int64_t kRequestKeepMs = 60 * 1000;

int64_t TokenOf(const LockState& lock) { return static_cast<int64_t>(std::min<uint64_t>(lock.fencing_token, INT64_MAX)); }

EtcdLockData* DataOf(const LockState& lock) { return static_cast<EtcdLockData*>(lock.backend_data.get()); }

// The create revision a write to the hold's key is conditional on ("Owner checks").
int64_t OwnedRevisionOf(const LockState& lock) {
  const EtcdLockData* data = DataOf(lock);
  return data != nullptr && data->owned_revision != 0 ? data->owned_revision : TokenOf(lock);
}

bool LeaseNotFound(const CallResult& r) {
  return r.grpc_code == kGrpcNotFound && r.status.message().find("lease not found") != std::string::npos;
}

// How long etcd says a lease lives, for time arithmetic: at most ten years (as the core clamps
// a holder's TTL), so that no server-supplied TTL can overflow a time point.
Millis LeaseSpan(int64_t ttl_s) { return Millis(std::min<int64_t>(ttl_s, int64_t{10} * 365 * 86400) * 1000); }

// The keys of one name (lock_protocol.h, "Kinds"): K, and under K + NUL the holds and the
// announcements.
class NameKeys {
 public:
  explicit NameKeys(std::string k) : k_(std::move(k)) {}
  const std::string& exclusive() const { return k_; }
  std::string end() const { return k_ + '\x01'; }  // [K, end): every key of the name
  std::string Under(std::string_view tag) const {
    std::string key = k_;
    key += '\0';
    key += tag;
    return key;
  }
  std::string Shared(const std::string& id) const { return Under("hs") + '\0' + id; }
  // A permit of a semaphore of n, of a hold that takes `take` of them (a weight > 1 ends the
  // key: K\0hp\0n\0ID\0take).
  std::string Permit(uint32_t n, const std::string& id, uint32_t take = 1) const {
    std::string key = Under("hp") + '\0' + std::to_string(n) + '\0' + id;
    if (take > 1) key += '\0' + std::to_string(take);
    return key;
  }
  std::string Writer(const std::string& id) const { return Under("w") + '\0' + id; }
  // The owner-less marker that keeps the name closed (a break's).
  std::string Closed() const { return Under("c"); }
  // [MarkersBegin, MarkersEnd): every marker, the break's and the job rules'.
  std::string MarkersBegin() const { return Under("c"); }
  std::string MarkersEnd() const { return Under("d"); }
  // The job rules' markers of hold ID, and [RulesBegin, RulesEnd): every job rule's marker.
  std::string MinHold(const std::string& id) const { return RulesBegin() + "m" + '\0' + id; }
  std::string Delay(const std::string& id) const { return RulesBegin() + "d" + '\0' + id; }
  std::string RulesBegin() const { return Under("c") + '\0'; }
  std::string RulesEnd() const { return Under("c") + '\x01'; }
  // [HoldsBegin, HoldsEnd): every hold key but K (shared holds and permits).
  std::string HoldsBegin() const { return Under("h"); }
  std::string HoldsEnd() const { return Under("i"); }

 private:
  std::string k_;
};

// A permit key as a read shows it.
struct PermitHold {
  const KeyValue* kv;
  uint32_t n;     // the semaphore's size
  uint32_t take;  // the permits this hold counts for (1 unless its key ends in \0take)
};

// What a read of [K, K\x01) shows.
struct NameView {
  const KeyValue* exclusive = nullptr;
  std::vector<const KeyValue*> shared;
  std::vector<PermitHold> permits;
  uint64_t taken = 0;  // the permits' takes, summed
  std::vector<const KeyValue*> writers;
  const KeyValue* closed = nullptr;  // the closed marker
  std::vector<const KeyValue*> rules;  // job rules' markers
  const KeyValue* ours = nullptr;  // the hold key asked about, holding our owner value
};

NameView Classify(const NameKeys& keys, const std::vector<KeyValue>& kvs, const std::string& own_key,
                  const std::string& owner_value) {
  NameView v;
  const std::string shared = keys.Under("hs") + '\0', permit = keys.Under("hp") + '\0',
                    writer = keys.Under("w") + '\0', rules = keys.RulesBegin();
  for (const KeyValue& kv : kvs) {
    if (kv.key == own_key && OwnerPart(kv.value) == owner_value) v.ours = &kv;
    if (kv.key == keys.exclusive()) {
      v.exclusive = &kv;
    } else if (kv.key == keys.Closed()) {
      v.closed = &kv;
    } else if (kv.key.compare(0, rules.size(), rules) == 0) {
      v.rules.push_back(&kv);
    } else if (kv.key.compare(0, shared.size(), shared) == 0) {
      v.shared.push_back(&kv);
    } else if (kv.key.compare(0, permit.size(), permit) == 0) {
      const char* begin = kv.key.data() + permit.size();
      const char* end = kv.key.data() + kv.key.size();
      uint32_t n = 0;
      auto [stop, ec] = std::from_chars(begin, end, n);
      if (ec != std::errc() || stop == end || *stop != '\0' || n == 0) continue;
      // After n: ID, then NUL and the take when the hold took more than one (an ID holds no NUL).
      uint32_t take = 1;
      const std::string_view rest(stop + 1, static_cast<size_t>(end - stop - 1));
      const size_t nul = rest.find('\0');
      if (nul != std::string_view::npos) {
        const char* t = rest.data() + nul + 1;
        auto [t_stop, t_ec] = std::from_chars(t, end, take);
        if (t_ec != std::errc() || t_stop != end || take == 0) take = 1;  // not dlock's: one
      }
      v.permits.push_back({&kv, n, take});
      v.taken += take;
    } else if (kv.key.compare(0, writer.size(), writer) == 0) {
      v.writers.push_back(&kv);
    }
  }
  return v;
}

// The holds a read shows, oldest first, and the sort of name they make (as Inspect reports
// it): the exclusive holder, else the shared holds, else the permits. Only one of these can
// stand at a time; announcements and the marker are no holds.
std::vector<const KeyValue*> HoldsOf(const NameView& view, LockInfo* info) {
  std::vector<const KeyValue*> holds;
  if (view.exclusive != nullptr) holds.push_back(view.exclusive);
  if (!view.shared.empty()) {
    if (holds.empty()) info->kind = LockKind::kShared;
    holds.insert(holds.end(), view.shared.begin(), view.shared.end());
  }
  for (const auto& permit : view.permits) {
    if (holds.empty()) info->permits = permit.n;
    holds.push_back(permit.kv);
  }
  std::sort(holds.begin(), holds.end(),
            [](const KeyValue* a, const KeyValue* b) { return a->create_revision < b->create_revision; });
  return holds;
}

// The distinct non-zero leases of kvs.
std::vector<int64_t> LeasesOf(const std::vector<const KeyValue*>& kvs) {
  std::vector<int64_t> leases;
  for (const KeyValue* kv : kvs) {
    if (kv->lease != 0 && std::find(leases.begin(), leases.end(), kv->lease) == leases.end()) {
      leases.push_back(kv->lease);
    }
  }
  return leases;
}

HolderInfo HolderOf(const KeyValue& kv, int64_t remaining_ms) {
  HolderInfo holder;
  holder.owner = OwnerLabel(std::string(OwnerPart(kv.value)));
  holder.value = ValuePart(kv.value).substr(0, kMaxValueBytes);  // more is not dlock's
  holder.remaining_ms = kv.lease == 0 ? -1 : remaining_ms;
  holder.fencing_token = static_cast<uint64_t>(kv.create_revision);
  return holder;
}

// A record's token as its key ends: 20 digits, zero-padded.
std::string TokenDigits(uint64_t token) {
  std::string digits = std::to_string(token);
  return std::string(kTokenDigits - digits.size(), '0') + digits;
}

Status NotHeld(const EtcdConfig& config, const std::string& name) {
  return Status::NotHeld(config.Describe() + ": lock '" + name +
                         "' is not held by this owner any more (its key is gone or another holds it)");
}

}  // namespace

std::string HoldId(const std::string& owner_value) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(owner_value.data(), owner_value.size(), digest, &n, EVP_sha256(), nullptr) != 1 || n < 16) {
    // Cannot happen with a working libcrypto; the owner value is unique all the same.
    return Base64Encode(owner_value);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned int i = 0; i < 16; ++i) {
    id += kHex[digest[i] >> 4];
    id += kHex[digest[i] & 15];
  }
  return id;
}

std::string Stored(const std::string& owner_value, const std::string& value) {
  if (value.empty()) return owner_value;
  std::string stored = owner_value;
  stored += '\0';
  stored += value;
  return stored;
}
std::string_view OwnerPart(std::string_view stored) { return stored.substr(0, stored.find('\0')); }
std::string_view ValuePart(std::string_view stored) {
  const size_t nul = stored.find('\0');
  return nul == std::string_view::npos ? std::string_view() : stored.substr(nul + 1);
}

int64_t LeaseTtlSeconds(uint64_t lease_ms) {
  return static_cast<int64_t>((lease_ms + 999) / 1000) + 1;
}

std::string LockProtocol::HoldKey(const std::string& name, LockKind kind, uint32_t permits, uint32_t take,
                                  const std::string& owner_value) const {
  if (mutex_layout()) return LinePrefix(name) + HoldId(owner_value);  // exclusive only
  NameKeys keys(KeyFor(name));
  if (permits != 0) return keys.Permit(permits, HoldId(owner_value), take);
  if (kind == LockKind::kShared) return keys.Shared(HoldId(owner_value));
  return keys.exclusive();
}

std::string LockProtocol::KeyOf(const LockState& lock) const {
  const EtcdLockData* data = DataOf(lock);
  if (data != nullptr && !data->key.empty()) return data->key;
  return HoldKey(lock.name, lock.kind, lock.permits, lock.take, lock.owner_value);
}

// ---- Leases ----

void LockProtocol::Refreshed(int64_t lease, int64_t ttl_s, TimePoint sent) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [asked, shared] : leases_) {
    if (shared.id != lease) continue;
    shared.ttl_s = ttl_s;
    shared.alive_until = std::max(shared.alive_until, sent + LeaseSpan(ttl_s));
  }
}

void LockProtocol::Forget(int64_t lease) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    it = it->second.id == lease ? leases_.erase(it) : std::next(it);
  }
}

void LockProtocol::Count(int64_t lease, const std::string& key) {
  if (lease == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  counted_[lease].insert(key);
}

void LockProtocol::Uncount(int64_t lease, const std::string& key) {
  if (lease == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counted_.find(lease);
  if (it == counted_.end()) return;
  auto one = it->second.find(key);
  if (one != it->second.end()) it->second.erase(one);
  if (it->second.empty()) counted_.erase(it);
}

void LockProtocol::Forgotten(const LockState& lock) {
  EtcdLockData* data = DataOf(lock);
  if (data != nullptr && data->counted.exchange(false)) Uncount(data->lease.load(), KeyOf(lock));
}

void LockProtocol::SweepStrays(int64_t lease, const std::unordered_set<std::string>& keys) {
  std::vector<std::string> strays;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counted_.find(lease);
    for (const std::string& key : keys) {
      if (it == counted_.end() || it->second.count(key) == 0) strays.push_back(key);
    }
  }
  for (const std::string& key : strays) {
    if (background_) background_(kTxn, IfOnLeaseDeleteTxn(key, lease));
  }
}

void LockProtocol::KeepAlive(Transport* t, int64_t lease, TimePoint deadline,
                             std::function<void(Status, int64_t)> done) {
  const TimePoint sent = Now();
  t->Call(kKeepAlive, LeaseIdBody(lease), deadline, [this, lease, sent, done = std::move(done)](CallResult r) {
    int64_t ttl_s = 0;
    if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &ttl_s);
    if (!r.status.ok()) return done(r.status, 0);
    if (ttl_s > 0) {
      Refreshed(lease, ttl_s, sent);
    } else {
      Forget(lease);
    }
    done(Status::Ok(), ttl_s);
  });
}

void LockProtocol::EnsureLease(Transport* t, uint64_t lease_ms, TimePoint deadline,
                               std::function<void(Status, int64_t)> done) {
  if (lease_ms == 0) return done(Status::Ok(), 0);
  const int64_t asked = LeaseTtlSeconds(lease_ms);
  SharedLease known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(asked);
    if (it != leases_.end()) known = it->second;
  }
  const TimePoint now = Now();
  if (known.id != 0 && known.alive_until - now >= Millis(lease_ms)) return done(Status::Ok(), known.id);
  auto grant = [this, t, asked, deadline, done]() {
    const TimePoint sent = Now();
    t->Call(kGrant, LeaseGrantBody(asked), deadline, [this, asked, sent, done](CallResult r) {
      int64_t id = 0, ttl_s = 0;
      if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &ttl_s);
      if (!r.status.ok()) return done(r.status, 0);
      {
        std::lock_guard<std::mutex> lock(mu_);
        SharedLease& shared = leases_[asked];
        // Another thread's grant may have won meanwhile: both leases work; later locks share
        // the newer one, and an unused one simply expires.
        shared = {id, ttl_s, sent + LeaseSpan(ttl_s)};
      }
      done(Status::Ok(), id);
    });
  };
  if (known.id == 0 || known.alive_until <= now) return grant();
  // Alive, but maybe not for a whole lease more: keep it alive first.
  KeepAlive(t, known.id, deadline, [known, grant, done](Status s, int64_t ttl_s) {
    if (!s.ok()) return done(s, 0);
    if (ttl_s == 0) return grant();  // etcd forgot it
    done(Status::Ok(), known.id);
  });
}

void LockProtocol::HolderTtl(Transport* t, int64_t lease, TimePoint deadline,
                             std::function<void(Status, int64_t, int64_t)> done) {
  if (lease == 0) return done(Status::Ok(), -1, 0);
  t->Call(kTimeToLive, LeaseTimeToLiveBody(lease, false), deadline, [done = std::move(done)](CallResult r) {
    int64_t ttl_s = 0;
    if (r.status.ok()) r.status = ReadTimeToLive(r.answer, &ttl_s, nullptr);
    if (!r.status.ok()) return done(r.status, -2, 0);
    const int64_t granted_s = ttl_s < 0 ? 0 : ReadGrantedTtl(r.answer);
    // etcd counts whole seconds, rounded down: 0 is "under a second" (and the lease is revoked
    // only at etcd's next expiry pass, up to 500 ms later), not "now". Read as a second, the
    // waiter sleeps until the watch tells it of the key's deletion, instead of asking again
    // every few ms (measured: about 240 attempts per failover before, bench/election).
    done(Status::Ok(), ttl_s < 0 ? 0 : ttl_s == 0 ? 1000 : ttl_s * 1000, granted_s);
  });
}

// ---- Acquire ----

struct LockProtocol::AcquireOp {
  LockRequest request;
  std::string key;  // the hold's key: K, or a shared hold's, or a permit's
  TimePoint deadline;
  std::function<void(Status, AcquireAttempt)> done;
  bool lease_retried = false;  // a shared lease etcd had forgotten was replaced once
  int joins = 0;               // shared acquires' tries to join holds beside markers
  bool Exclusive() const { return request.kind == LockKind::kExclusive && request.permits == 0; }
};

void LockProtocol::Acquire(Transport* t, const LockRequest& request, TimePoint deadline,
                           std::function<void(Status, AcquireAttempt)> done) {
  auto op = std::make_shared<AcquireOp>();
  op->request = request;
  op->key = HoldKey(request.name, request.kind, request.permits, request.take, request.owner_value);
  op->deadline = deadline;
  op->done = std::move(done);
  AcquireRound(t, std::move(op));
}

void LockProtocol::AcquireMany(Transport* t, std::vector<LockRequest> requests, TimePoint deadline,
                               std::function<void(Status, std::vector<AcquireAttempt>)> done) {
  const uint64_t lease_ms = requests.empty() ? 0 : requests.front().lease_ms;
  EnsureLease(t, lease_ms, deadline, [this, t, requests = std::move(requests), deadline,
                                      done = std::move(done)](Status s, int64_t lease) mutable {
    if (!s.ok()) return done(s, {});
    Json compare = Json::array();
    Json success = Json::array();
    std::vector<std::string> keys;
    for (const LockRequest& request : requests) {
      const NameKeys names(KeyFor(request.name));
      keys.push_back(names.exclusive());
      Count(lease, keys.back());  // before it is sent, as in AcquireRound
      compare.push_back(CompareCreateEqual(names.exclusive(), 0));
      compare.push_back(CompareRangeEmpty(names.MarkersBegin(), names.MarkersEnd()));
      compare.push_back(CompareRangeEmpty(names.HoldsBegin(), names.HoldsEnd()));
      success.push_back(PutRequest(names.exclusive(), Stored(request.owner_value, request.value), lease));
      success.push_back(DeleteRequest(names.Writer(HoldId(request.owner_value))));
    }
    t->Call(kTxn, TxnBody(compare, success, Json::array()), deadline,
            [this, requests = std::move(requests), keys = std::move(keys), lease,
             done = std::move(done)](CallResult r) {
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (r.status.ok() && txn.succeeded) {
        std::vector<AcquireAttempt> won(requests.size());
        for (size_t k = 0; k < requests.size(); ++k) {
          WriterDone(requests[k].owner_value);
          won[k].acquired = true;
          won[k].fencing_token = static_cast<uint64_t>(txn.revision);  // every put's create revision
          won[k].backend_data = std::make_shared<EtcdLockData>(lease, keys[k]);
        }
        return done(Status::Ok(), std::move(won));
      }
      for (const std::string& key : keys) Uncount(lease, key);
      if (r.status.ok() || LeaseNotFound(r)) {
        if (!r.status.ok()) Forget(lease);  // the names one at a time grant a new one
        return done(Status::Ok(), {});
      }
      if (r.maybe_applied) {  // as AcquireUnknown: not there yet is not never
        Forget(lease);
        for (size_t k = 0; lease == 0 && background_ && k < requests.size(); ++k) {
          background_(kTxn, IfValueDeleteTxn(keys[k], Stored(requests[k].owner_value, requests[k].value)));
        }
      }
      done(r.status, {});
    });
  });
}

void LockProtocol::Won(Transport* t, std::shared_ptr<AcquireOp> op, int64_t sent_lease, int64_t kv_lease,
                       int64_t token, int64_t owned_revision) {
  if (kv_lease != sent_lease) {  // an earlier try's lease: count the key where it hangs (first:
    Count(kv_lease, op->key);     // a renewal's sweep never finds it uncounted in between)
    Uncount(sent_lease, op->key);
  }
  if (op->Exclusive()) WriterDone(op->request.owner_value);
  AcquireAttempt attempt;
  attempt.acquired = true;
  attempt.fencing_token = static_cast<uint64_t>(token);
  auto data = std::make_shared<EtcdLockData>(kv_lease, op->key);
  data->owned_revision = owned_revision;
  attempt.backend_data = std::move(data);
  if (op->request.min_hold_ms != 0 || op->request.lock_delay_ms != 0) return PutRules(t, op, std::move(attempt), token);
  op->done(Status::Ok(), attempt);
}

int64_t LockProtocol::DelayTtlSeconds(uint64_t lease_ms, int64_t hold_lease, uint64_t delay_ms) {
  int64_t hold_s = LeaseTtlSeconds(lease_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& entry : leases_) {
      if (entry.second.id == hold_lease) hold_s = std::max(hold_s, entry.second.ttl_s);  // as etcd granted it
    }
  }
  return std::min(kMaxLeaseTtlS, hold_s + static_cast<int64_t>((delay_ms + 999) / 1000) + 1);
}

void LockProtocol::DropLease(int64_t lease) {
  if (lease != 0 && background_) background_(kRevoke, LeaseIdBody(lease));
}

void LockProtocol::PutRules(Transport* t, std::shared_ptr<AcquireOp> op, AcquireAttempt attempt, int64_t token) {
  const LockRequest& request = op->request;
  auto data = std::static_pointer_cast<EtcdLockData>(attempt.backend_data);
  const NameKeys keys(KeyFor(request.name));
  const std::string id = HoldId(request.owner_value);
  if (request.lock_delay_ms != 0) data->delay_key = keys.Delay(id);
  struct Grants {
    int64_t min_lease = 0, min_granted_s = 0, delay_lease = 0, delay_granted_s = 0;
    Status error;
    int left = 0;
    TimePoint sent;
  };
  auto g = std::make_shared<Grants>();
  const int64_t min_ttl_s =
      request.min_hold_ms == 0
          ? 0
          : std::min(kMaxLeaseTtlS, std::max<int64_t>(1, static_cast<int64_t>((request.min_hold_ms + kRuleSpareMs + 999) / 1000)));
  // A hold that never expires never ends uncleanly: no lock-delay marker (an extend to a lease
  // puts one: ExtendDelay).
  const int64_t delay_ttl_s = request.lock_delay_ms == 0 || request.lease_ms == 0
                                  ? 0
                                  : DelayTtlSeconds(request.lease_ms, data->lease.load(), request.lock_delay_ms);
  g->left = (min_ttl_s != 0 ? 1 : 0) + (delay_ttl_s != 0 ? 1 : 0);
  if (g->left == 0) return op->done(Status::Ok(), attempt);
  const std::string min_key = keys.MinHold(id);
  // The hold goes back (with whatever markers landed, and their leases): the attempt failed.
  auto give_back = [this, op, data, g, min_key, token](Status failed) {
    if (background_) {
      Json deletes = Json::array({DeleteRequest(op->key), DeleteRequest(min_key)});
      if (!data->delay_key.empty()) deletes.push_back(DeleteRequest(data->delay_key));
      background_(kTxn, TxnBody(Json::array({CompareCreateEqual(op->key, token)}), deletes, Json()));
    }
    DropLease(g->min_lease);
    DropLease(g->delay_lease);
    if (data->counted.exchange(false)) Uncount(data->lease.load(), op->key);
    op->done(failed, AcquireAttempt());
  };
  auto put = [this, t, op, attempt, data, g, min_key, token, delay_ttl_s, give_back]() {
    if (!g->error.ok()) return give_back(g->error);
    Json success = Json::array();
    if (g->min_lease != 0) success.push_back(PutRequest(min_key, kClosedByMinHold, g->min_lease));
    if (g->delay_lease != 0) success.push_back(PutRequest(data->delay_key, kClosedByLockDelay, g->delay_lease));
    t->Call(kTxn, TxnBody(Json::array({CompareCreateEqual(op->key, token)}), success, Json()), op->deadline,
            [this, t, op, attempt, data, g, delay_ttl_s, give_back, min_key](CallResult r) {
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (!r.status.ok()) return give_back(r.status);
      if (!txn.succeeded) {  // the hold went meanwhile (a break): not acquired, try again
        DropLease(g->min_lease);
        DropLease(g->delay_lease);
        if (data->counted.exchange(false)) Uncount(data->lease.load(), op->key);
        AcquireAttempt refused;
        refused.holder_ttl_ms = 0;
        return op->done(Status::Ok(), refused);
      }
      auto finish = [op, attempt, data, g, delay_ttl_s, min_key]() {
        if (g->min_lease != 0) data->min_key = min_key;
        data->delay_lease = g->delay_lease;
        data->delay_ttl_s = delay_ttl_s;
        op->done(Status::Ok(), attempt);
      };
      // The min hold's lease was granted for min hold + a spare: a slower commit than the spare
      // allows has it kept alive once now, which restarts its whole TTL after the commit.
      const int64_t slack_ms = g->min_granted_s * 1000 - static_cast<int64_t>(op->request.min_hold_ms);
      if (g->min_lease == 0 || std::chrono::duration_cast<Millis>(Now() - g->sent).count() <= slack_ms) return finish();
      t->Call(kKeepAlive, LeaseIdBody(g->min_lease), op->deadline, [finish, give_back](CallResult r) {
        int64_t ttl_s = 0;
        if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &ttl_s);
        if (r.status.ok() && ttl_s == 0) r.status = Status::BackendError("the min hold marker's lease ended at once");
        if (!r.status.ok()) return give_back(r.status);
        finish();
      });
    });
  };
  g->sent = Now();
  auto grant = [t, op, g, put](int64_t ttl_s, bool min) {
    t->Call(kGrant, LeaseGrantBody(ttl_s), op->deadline, [g, put, min](CallResult r) {
      int64_t id = 0, granted_s = 0;
      if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &granted_s);
      if (!r.status.ok()) {
        if (g->error.ok()) g->error = r.status;
      } else if (min) {
        g->min_lease = id;
        g->min_granted_s = granted_s;
      } else {
        g->delay_lease = id;
        g->delay_granted_s = granted_s;
      }
      if (--g->left == 0) put();
    });
  };
  if (min_ttl_s != 0) grant(min_ttl_s, true);
  if (delay_ttl_s != 0) grant(delay_ttl_s, false);
}

void LockProtocol::AcquireRound(Transport* t, std::shared_ptr<AcquireOp> op) {
  if (mutex_layout()) return MutexRound(t, std::move(op));
  EnsureLease(t, op->request.lease_ms, op->deadline, [this, t, op](Status s, int64_t lease) {
    if (!s.ok()) return op->done(s, AcquireAttempt());
    Count(lease, op->key);  // before it is sent: a renewal sweeping the lease must spare it
    if (op->request.permits != 0) return SemaphoreRound(t, op, lease, 0);
    LockTxn(t, op, lease);
  });
}

void LockProtocol::AcquireUnknown(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, CallResult r) {
  // Settle: did our create land?
  ReadOwner(t, op->key, op->request.owner_value, 0, op->deadline,
            [this, t, op, lease, failed = r.status](Status s, bool ours, KeyValue kv) {
    if (s.ok() && ours && !mutex_layout()) return Won(t, op, lease, kv.lease, kv.create_revision);
    // layout=mutex: a waiter's key keeps its place in line (its next attempt, or its leaving
    // the line, settles it); a single try's is given back below.
    if (s.ok() && ours && !op->request.waiter_id.empty()) {
      InLine(op->request, op->key, lease, kv, "");
      return op->done(failed, AcquireAttempt());
    }
    // Not there yet is not never: a proposal queued on a node without a leader commits
    // when the partition heals. See "An acquire whose outcome stays unknown".
    Uncount(lease, op->key);
    Forget(lease);
    if ((lease == 0 || mutex_layout()) && background_) {
      background_(kTxn, IfValueDeleteTxn(op->key, Stored(op->request.owner_value, op->request.value)));
    }
    op->done(failed, AcquireAttempt());
  });
}

bool LockProtocol::SettledFailure(Transport* t, const std::shared_ptr<AcquireOp>& op, int64_t lease,
                                  CallResult& r, TxnAnswer* txn) {
  if (LeaseNotFound(r) && !op->lease_retried) {
    op->lease_retried = true;
    Uncount(lease, op->key);
    Forget(lease);
    AcquireRound(t, op);
    return true;
  }
  if (r.status.ok()) r.status = ReadTxn(r.answer, txn);
  if (r.status.ok()) return false;
  if (!r.maybe_applied) {
    Uncount(lease, op->key);
    op->done(r.status, AcquireAttempt());
  } else {
    AcquireUnknown(t, op, lease, std::move(r));
  }
  return true;
}

void LockProtocol::LockTxn(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, const KeyValue* join) {
  const NameKeys keys(KeyFor(op->request.name));
  const std::string& owner = op->request.owner_value;
  // Not while a break or a job rule keeps the name closed: the markers' absence is part of the
  // compare, so no acquire gets in between a break and its marker, nor past a rule's. A shared
  // hold joining shared holds beside their markers asks that one of them still stand instead.
  Json compare = Json::array({CompareCreateEqual(keys.exclusive(), 0)});
  if (join == nullptr) {
    compare.push_back(CompareRangeEmpty(keys.MarkersBegin(), keys.MarkersEnd()));
  } else {
    compare.push_back(CompareCreateEqual(keys.Closed(), 0));
    compare.push_back(CompareCreateEqual(join->key, join->create_revision));
  }
  Json success = Json::array({PutRequest(op->key, Stored(owner, op->request.value), lease)});
  if (op->Exclusive()) {
    compare.push_back(CompareRangeEmpty(keys.Under("h"), keys.Under("i")));  // no hold of any kind
    success.push_back(DeleteRequest(keys.Writer(HoldId(owner))));             // our announcement
  } else {
    compare.push_back(CompareCreateEqual(op->key, 0));  // an earlier try of ours did not land
    compare.push_back(CompareRangeEmpty(keys.Under("hp"), keys.Under("hq")));  // no semaphore
    compare.push_back(CompareRangeEmpty(keys.Under("w"), keys.Under("x")));    // no waiting writer
  }
  const Json failure = Json::array({RangeRequest(keys.exclusive(), keys.end())});
  t->Call(kTxn, TxnBody(compare, success, failure), op->deadline, [this, t, op, lease](CallResult r) {
    TxnAnswer txn;
    if (SettledFailure(t, op, lease, r, &txn)) return;
    if (txn.succeeded) return Won(t, op, lease, lease, txn.revision);  // the put's create revision
    const NameKeys keys(KeyFor(op->request.name));
    const NameView view = Classify(keys, txn.kvs, op->key, op->request.owner_value);
    if (view.ours != nullptr) {
      // Ours already: an earlier try of this very acquire landed (its answer was lost).
      return Won(t, op, lease, view.ours->lease, view.ours->create_revision);
    }
    if (view.closed == nullptr && !view.rules.empty() && !op->Exclusive() && view.exclusive == nullptr &&
        view.permits.empty() && view.writers.empty() && !view.shared.empty() && ++op->joins < kSemaphoreRounds &&
        Now() < op->deadline) {
      return LockTxn(t, op, lease, view.shared.front());  // shared holds stand beside their markers: join them
    }
    Uncount(lease, op->key);
    if (view.closed != nullptr) return ClosedRefusal(t, op, *view.closed);
    if (!view.permits.empty()) {
      return op->done(SortMismatch(op->request.name, view.permits[0].n, 0), AcquireAttempt());
    }
    if (!view.rules.empty() && view.exclusive == nullptr && view.shared.empty()) {
      return RulesRefusal(t, op, view.rules);  // no hold stands: the job rules' markers close it
    }
    // What stands in the way: the exclusive holder, and every shared hold (exclusive) or
    // every announcement (shared). None: it went between the compare and the read, which one
    // transaction rules out; try again at once all the same.
    std::vector<int64_t> leases;
    if (view.exclusive != nullptr) leases.push_back(view.exclusive->lease);
    for (const KeyValue* kv : op->Exclusive() ? view.shared : view.writers) leases.push_back(kv->lease);
    if (op->Exclusive() && op->request.queue_ms > 0) {
      return Announce(t, op, [this, t, op, leases] { RefusedBy(t, op, leases); });
    }
    RefusedBy(t, op, std::move(leases));
  });
}

void LockProtocol::SemaphoreRound(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, int round) {
  const NameKeys keys(KeyFor(op->request.name));
  t->Call(kRange, RangeBody(keys.exclusive(), keys.end()), op->deadline, [this, t, op, lease, round](CallResult r) {
    std::vector<KeyValue> kvs;
    int64_t revision = 0;
    if (r.status.ok()) r.status = ReadRangeAll(r.answer, &kvs, &revision);
    if (!r.status.ok()) {  // a read: nothing was written
      Uncount(lease, op->key);
      return op->done(r.status, AcquireAttempt());
    }
    const NameKeys keys(KeyFor(op->request.name));
    const NameView view = Classify(keys, kvs, op->key, op->request.owner_value);
    if (view.ours != nullptr) return Won(t, op, lease, view.ours->lease, view.ours->create_revision);
    if (view.closed != nullptr) {
      Uncount(lease, op->key);
      return ClosedRefusal(t, op, *view.closed);
    }
    const uint32_t n = op->request.permits;
    Status sort;
    if (view.exclusive != nullptr || !view.shared.empty()) sort = SortMismatch(op->request.name, 0, n);
    std::vector<int64_t> leases;
    for (const auto& permit : view.permits) {
      if (permit.n != n && sort.ok()) sort = SortMismatch(op->request.name, permit.n, n);
      leases.push_back(permit.kv->lease);
    }
    if (!sort.ok()) {
      Uncount(lease, op->key);
      return op->done(sort, AcquireAttempt());
    }
    if (view.taken + op->request.take > n) {  // the holds' takes and ours: more than n
      Uncount(lease, op->key);
      return RefusedBy(t, op, std::move(leases));
    }
    if (!view.rules.empty() && view.permits.empty()) {  // no hold stands: the job rules' markers close it
      Uncount(lease, op->key);
      return RulesRefusal(t, op, view.rules);
    }
    // Room for our take at revision: ours, if nothing of the name's holds moved since, and no
    // marker stands (or, beside permits' markers, one of those permits still does: it joins them).
    Json compare = Json::array({CompareCreateEqual(keys.exclusive(), 0),
                                CompareRangeEmpty(keys.Under("hs"), keys.Under("ht")),
                                CompareRangeModAtMost(keys.Under("hp"), keys.Under("hq"), revision)});
    if (view.rules.empty()) {
      compare.push_back(CompareRangeEmpty(keys.MarkersBegin(), keys.MarkersEnd()));
    } else {
      compare.push_back(CompareCreateEqual(keys.Closed(), 0));
      compare.push_back(CompareCreateEqual(view.permits.front().kv->key, view.permits.front().kv->create_revision));
    }
    Json success = Json::array({PutRequest(op->key, Stored(op->request.owner_value, op->request.value), lease)});
    t->Call(kTxn, TxnBody(compare, success, Json()), op->deadline, [this, t, op, lease, round](CallResult r) {
      TxnAnswer txn;
      if (SettledFailure(t, op, lease, r, &txn)) return;
      if (txn.succeeded) return Won(t, op, lease, lease, txn.revision);
      // Another acquire (or an extend) moved a permit, or a lock came, since the read.
      if (round + 1 < kSemaphoreRounds && Now() < op->deadline) return SemaphoreRound(t, op, lease, round + 1);
      Uncount(lease, op->key);
      AcquireAttempt attempt;
      attempt.holder_ttl_ms = 0;
      op->done(Status::Ok(), attempt);
    });
  });
}

void LockProtocol::RefusedBy(Transport* t, std::shared_ptr<AcquireOp> op, std::vector<int64_t> leases) {
  AcquireAttempt attempt;
  if (leases.empty()) {
    attempt.holder_ttl_ms = 0;
    return op->done(Status::Ok(), attempt);
  }
  std::vector<int64_t> expiring;
  for (int64_t lease : leases) {
    if (lease != 0 && std::find(expiring.begin(), expiring.end(), lease) == expiring.end() &&
        expiring.size() < kMaxTtlLookups) {
      expiring.push_back(lease);
    }
  }
  if (expiring.empty()) {  // none of them expires
    attempt.holder_ttl_ms = -1;
    return op->done(Status::Ok(), attempt);
  }
  LeaseTtls(t, expiring, op->deadline, [op](Status, std::map<int64_t, LeaseTime> ttls) {
    AcquireAttempt attempt;
    attempt.holder_ttl_ms = -2;  // unknown when every look failed: not worth failing for
    for (const auto& entry : ttls) {
      const int64_t ms = entry.second.remaining_ms;
      if (ms >= 0 && (attempt.holder_ttl_ms < 0 || ms < attempt.holder_ttl_ms)) attempt.holder_ttl_ms = ms;
    }
    op->done(Status::Ok(), attempt);
  });
}

void LockProtocol::ClosedRefusal(Transport* t, std::shared_ptr<AcquireOp> op, const KeyValue& marker) {
  std::string by;
  Status s = ReadClosedBy(op->request.name, marker, &by);
  if (!s.ok()) return op->done(s, AcquireAttempt());
  auto refuse = [this, t, op, lease = marker.lease, by] {
    HolderTtl(t, lease, op->deadline, [op, by](Status, int64_t ttl_ms, int64_t) {
      AcquireAttempt attempt;
      attempt.holder_ttl_ms = ttl_ms;  // -2 when the look failed: the jittered retry then
      attempt.closed_by = by;
      op->done(Status::Ok(), attempt);
    });
  };
  // A waiting writer keeps its place: when the name opens, it goes before new shared holds.
  if (op->Exclusive() && op->request.queue_ms > 0) return Announce(t, op, refuse);
  refuse();
}

void LockProtocol::RulesRefusal(Transport* t, std::shared_ptr<AcquireOp> op, std::vector<const KeyValue*> markers) {
  // What each marker says (checked now: the read's kvs do not outlive this call), on which lease.
  std::vector<std::pair<int64_t, std::string>> rules;
  for (const KeyValue* marker : markers) {
    std::string by;
    Status s = ReadClosedBy(op->request.name, *marker, &by);
    if (!s.ok()) return op->done(s, AcquireAttempt());
    rules.emplace_back(marker->lease, std::move(by));
  }
  auto refuse = [this, t, op, rules] {
    std::vector<int64_t> leases;
    for (const auto& rule : rules) {
      if (rule.first != 0 && std::find(leases.begin(), leases.end(), rule.first) == leases.end() &&
          leases.size() < kMaxTtlLookups) {
        leases.push_back(rule.first);
      }
    }
    LeaseTtls(t, leases, op->deadline, [op, rules](Status, std::map<int64_t, LeaseTime> ttls) {
      // The name opens when the last marker goes: the longest time, and what left it.
      AcquireAttempt attempt;
      attempt.holder_ttl_ms = -2;  // unknown when every look failed: the jittered retry then
      attempt.closed_by = rules.front().second;
      for (const auto& rule : rules) {
        const int64_t ms = rule.first == 0 ? -1 : ttls.count(rule.first) ? ttls[rule.first].remaining_ms : -2;
        if (attempt.holder_ttl_ms == -1 || ms == -2) continue;
        if (ms == -1 || ms > attempt.holder_ttl_ms) {
          attempt.holder_ttl_ms = ms;
          attempt.closed_by = rule.second;
        }
      }
      op->done(Status::Ok(), attempt);
    });
  };
  // A waiting writer keeps its place: when the name opens, it goes before new shared holds.
  if (op->Exclusive() && op->request.queue_ms > 0) return Announce(t, op, refuse);
  refuse();
}

void LockProtocol::LeaseTtls(Transport* t, const std::vector<int64_t>& leases, TimePoint deadline,
                             std::function<void(Status, std::map<int64_t, LeaseTime>)> done) {
  struct Gather {
    Status first_error;
    std::map<int64_t, LeaseTime> ttls;
    size_t left = 0;
  };
  auto gather = std::make_shared<Gather>();
  gather->left = leases.size();
  if (leases.empty()) return done(Status::Ok(), {});
  for (int64_t lease : leases) {
    HolderTtl(t, lease, deadline, [gather, lease, done](Status s, int64_t ttl_ms, int64_t granted_s) {
      gather->ttls[lease] = {ttl_ms, granted_s};  // -2 when the look failed
      if (!s.ok() && gather->first_error.ok()) gather->first_error = s;
      if (--gather->left == 0) done(gather->first_error, std::move(gather->ttls));
    });
  }
}

// ---- Writer announcements ----

void LockProtocol::Announce(Transport* t, std::shared_ptr<AcquireOp> op, std::function<void()> then) {
  const uint64_t queue_ms = op->request.queue_ms;
  const int64_t ttl_s = std::max<int64_t>(1, static_cast<int64_t>((queue_ms + 999) / 1000));
  const std::string& owner = op->request.owner_value;
  const TimePoint now = Now();
  Announcement known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Writers that gave up: their leases ran out on their own.
    for (auto it = announces_.begin(); it != announces_.end();) {
      it = it->second.alive_until <= now ? announces_.erase(it) : std::next(it);
    }
    auto it = announces_.find(owner);
    if (it != announces_.end()) known = it->second;
  }
  auto grant = [this, t, op, ttl_s, then]() {
    const TimePoint sent = Now();
    t->Call(kGrant, LeaseGrantBody(ttl_s), op->deadline, [this, t, op, ttl_s, sent, then](CallResult r) {
      int64_t id = 0, granted_s = 0;
      if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &granted_s);
      if (!r.status.ok()) return then();  // best effort: the writer waits all the same
      int64_t replaced = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        Announcement& a = announces_[op->request.owner_value];
        replaced = a.id;
        a = {id, ttl_s, sent + LeaseSpan(granted_s)};
      }
      PutAnnouncement(t, op, id, replaced != id ? replaced : 0, then);
    });
  };
  // None yet, or one that would outlast this writer's wait: a new lease.
  if (known.id == 0 || ttl_s < known.asked_s) return grant();
  // Alive: made to last a whole queue_ms more (the core tries again within half of it).
  const TimePoint sent = Now();
  t->Call(kKeepAlive, LeaseIdBody(known.id), op->deadline, [this, t, op, known, sent, grant, then](CallResult r) {
    int64_t ttl = 0;
    if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &ttl);
    if (!r.status.ok()) return then();
    if (ttl == 0) return grant();  // it ran out meanwhile
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = announces_.find(op->request.owner_value);
      if (it != announces_.end() && it->second.id == known.id) it->second.alive_until = sent + LeaseSpan(ttl);
    }
    PutAnnouncement(t, op, known.id, 0, then);
  });
}

void LockProtocol::PutAnnouncement(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, int64_t replaced,
                                   std::function<void()> then) {
  // Put each time: the key may have gone with an earlier lease of this writer.
  const NameKeys keys(KeyFor(op->request.name));
  t->Call(kPut, PutBody(keys.Writer(HoldId(op->request.owner_value)), op->request.owner_value, lease), op->deadline,
          [this, replaced, then](CallResult r) {
    // The key hangs on the new lease now: the old one can go (revoked before, it would have
    // taken the key with it for a moment).
    if (r.status.ok() && replaced != 0 && background_) background_(kRevoke, LeaseIdBody(replaced));
    then();
  });
}

void LockProtocol::WriterDone(const std::string& owner_value) {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = announces_.find(owner_value);
    if (it == announces_.end()) return;
    lease = it->second.id;
    announces_.erase(it);
  }
  // Its key went with the acquire; the lease would run out by itself, soon.
  if (background_) background_(kRevoke, LeaseIdBody(lease));
}

void LockProtocol::ReadOwner(Transport* t, const std::string& key, const std::string& owner_value,
                             int64_t create_revision, TimePoint deadline,
                             std::function<void(Status, bool, KeyValue)> done) {
  t->Call(kRange, RangeBody(key), deadline, [owner_value, create_revision, done = std::move(done)](CallResult r) {
    KeyValue kv;
    bool found = false;
    if (r.status.ok()) r.status = ReadRange(r.answer, &kv, &found);
    if (!r.status.ok()) return done(r.status, false, kv);
    bool ours = found && OwnerPart(kv.value) == owner_value &&
                (create_revision == 0 || kv.create_revision == create_revision);
    done(Status::Ok(), ours, kv);
  });
}

// ---- Extend, release ----

void LockProtocol::Extend(Transport* t, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
                          TimePoint deadline, Done done) {
  EnsureLease(t, lease_ms, deadline, [this, t, lock, lease_ms, deadline, done](Status s, int64_t lease) {
    if (!s.ok()) return done(s);
    ChangeLease(t, lock, lease, deadline, false, [this, t, lock, lease_ms, deadline, done](Status s) {
      if (!s.ok() || DataOf(*lock)->delay_key.empty()) return done(s);
      ExtendDelay(t, lock, lease_ms, deadline, done);
    });
  });
}

void LockProtocol::ExtendDelay(Transport* t, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
                               TimePoint deadline, Done done) {
  EtcdLockData* data = DataOf(*lock);
  const int64_t old = data->delay_lease.load();
  const std::string key = KeyOf(*lock);
  const Json owned = Json::array({CompareCreateEqual(key, OwnedRevisionOf(*lock))});
  if (lease_ms == 0) {  // no expiry: the hold never ends uncleanly, and its marker goes
    if (old == 0) return done(Status::Ok());
    t->Call(kTxn, TxnBody(owned, Json::array({DeleteRequest(data->delay_key)}), Json()), deadline,
            [this, lock, old, done](CallResult r) {
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (!r.status.ok()) return done(r.status);
      if (!txn.succeeded) return done(NotHeld(*config_, lock->name));
      DataOf(*lock)->delay_lease = 0;
      DataOf(*lock)->delay_ttl_s = 0;
      DataOf(*lock)->delay_unsettled = false;
      DropLease(old);
      done(Status::Ok());
    });
    return;
  }
  const int64_t ttl_s = DelayTtlSeconds(lease_ms, data->lease.load(), lock->lock_delay_ms);
  // The same length: kept alive, as a renewal does (unless the marker may hang elsewhere: then
  // it moves afresh below).
  if (old != 0 && ttl_s == data->delay_ttl_s.load() && !data->delay_unsettled.load()) {
    t->Call(kKeepAlive, LeaseIdBody(old), deadline, [this, lock, done](CallResult r) {
      int64_t left_s = 0;
      if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &left_s);
      if (!r.status.ok()) return done(r.status);
      if (left_s == 0) {
        return done(Status::NotHeld(config_->Describe() + ": lock '" + lock->name +
                                    "' is lost: its lock-delay marker's etcd lease expired"));
      }
      done(Status::Ok());
    });
    return;
  }
  // Another length: the marker moves to a new lease (put over it), then the old one goes.
  t->Call(kGrant, LeaseGrantBody(ttl_s), deadline, [this, t, lock, owned, old, ttl_s, deadline, done](CallResult r) {
    int64_t id = 0, granted_s = 0;
    if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &granted_s);
    if (!r.status.ok()) return done(r.status);
    const std::string delay_key = DataOf(*lock)->delay_key;
    auto moved = [this, lock, old, ttl_s](int64_t now_on) {
      DataOf(*lock)->delay_lease = now_on;
      DataOf(*lock)->delay_ttl_s = ttl_s;
      DataOf(*lock)->delay_unsettled = false;
      DropLease(old);
    };
    t->Call(kTxn, TxnBody(owned, Json::array({PutRequest(delay_key, kClosedByLockDelay, id)}), Json()), deadline,
            [this, t, lock, id, ttl_s, delay_key, deadline, moved, done](CallResult r) {
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (r.status.ok()) {
        if (!txn.succeeded) {
          DropLease(id);
          return done(NotHeld(*config_, lock->name));
        }
        moved(id);
        return done(Status::Ok());
      }
      if (!r.maybe_applied) {
        DropLease(id);
        return done(r.status);
      }
      // Settled by reading the marker: the lease it hangs on is the one renewals keep alive.
      ReadOwner(t, delay_key, kClosedByLockDelay, 0, deadline,
                [this, lock, id, ttl_s, moved, failed = r.status, done](Status s, bool, KeyValue kv) {
        if (s.ok() && kv.lease == id) {
          moved(id);
        } else if (s.ok()) {
          DropLease(id);  // the put did not land: the marker stays where it was
        } else {
          // Still unknown: neither lease is revoked (revoked, the one the marker hangs on would
          // take it along). The new one is kept alive from now on, and the next renewal puts the
          // marker on it for certain; the old one runs out by itself.
          EtcdLockData* data = DataOf(*lock);
          data->delay_lease = id;
          data->delay_ttl_s = ttl_s;
          data->delay_unsettled = true;
        }
        done(failed);
      });
    });
  });
}

void LockProtocol::ChangeLease(Transport* t, std::shared_ptr<const LockState> lock, int64_t lease,
                               TimePoint deadline, bool retried, Done done) {
  const std::string key = KeyOf(*lock);
  Count(lease, key);  // before it is sent: a renewal sweeping the lease must spare it
  // The put landed: the key hangs on now_on; the count sent for `sent` and the one on the old
  // lease give way to one on now_on.
  auto moved = [this, lock, key, lease](int64_t now_on) {
    EtcdLockData* data = DataOf(*lock);
    Uncount(lease, key);
    if (data->counted.load()) {
      Uncount(data->lease.load(), key);
      Count(now_on, key);
    }
    data->lease = now_on;
  };
  t->Call(kTxn, IfOwnedMoveTxn(key, OwnedRevisionOf(*lock), lease), deadline,
          [this, t, lock, lease, deadline, retried, key, moved, done](CallResult r) {
    if (LeaseNotFound(r) && !retried) {  // the shared lease was forgotten: a new one, once
      Uncount(lease, key);
      Forget(lease);
      return EnsureLease(t, lock->lease_ms.load(), deadline, [this, t, lock, deadline, done](Status s, int64_t l) {
        if (!s.ok()) return done(s);
        ChangeLease(t, lock, l, deadline, true, done);
      });
    }
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (r.status.ok()) {
      if (!txn.succeeded) {
        Uncount(lease, key);
        return done(NotHeld(*config_, lock->name));
      }
      moved(lease);
      return done(Status::Ok());
    }
    if (!r.maybe_applied) {
      Uncount(lease, key);
      return done(r.status);
    }
    ReadOwner(t, key, lock->owner_value, OwnedRevisionOf(*lock), deadline,
              [this, lock, lease, key, moved, failed = r.status, done](Status s, bool ours, KeyValue kv) {
      if (s.ok() && ours) {
        moved(kv.lease);  // where the key hangs now, whichever write landed
        return done(kv.lease == lease ? Status::Ok() : failed);
      }
      // Not ours, or unknown: if the put lands later, the key moves to a lease where no lock
      // counts it, and that lease's renewals delete it (the lock is then reported lost).
      Uncount(lease, key);
      done(!s.ok() ? failed : NotHeld(*config_, lock->name));
    });
  });
}

void LockProtocol::Release(Transport* t, std::shared_ptr<const LockState> lock, TimePoint deadline, Done done) {
  // Whatever the answer, the caller's handle is gone: the key no longer counts as held (if it
  // stays on a lease, that lease's renewals delete it).
  ReleaseRound(t, lock, deadline, [this, lock, done = std::move(done)](Status s) {
    Forgotten(*lock);
    if (!s.ok() && s.code() != Code::kNotHeld) {
      // The key may still be there: released again in the background, and its lease no longer
      // kept alive by acquires (see "An acquire whose outcome stays unknown").
      Forget(DataOf(*lock)->lease.load());
      if (background_) background_(kTxn, ReleaseTxn(*lock));
    }
    // A clean end: the lock-delay marker went with the key, and its lease goes now. (Not held:
    // the hold ended uncleanly, or was broken; its marker's lease runs out by itself.)
    if (s.ok()) DropLease(DataOf(*lock)->delay_lease.exchange(0));
    done(s);
  });
}

void LockProtocol::ReleaseRound(Transport* t, std::shared_ptr<const LockState> lock, TimePoint deadline,
                                Done done) {
  const std::string key = KeyOf(*lock);
  t->Call(kTxn, ReleaseTxn(*lock), deadline,
          [this, t, lock, deadline, key, done](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (r.status.ok()) return done(txn.succeeded ? Status::Ok() : NotHeld(*config_, lock->name));
    if (!r.maybe_applied) return done(r.status);
    ReadOwner(t, key, lock->owner_value, OwnedRevisionOf(*lock), deadline,
              [this, t, lock, deadline, failed = r.status, done](Status s, bool ours, KeyValue) {
      if (!s.ok()) return done(failed);
      if (!ours) return done(Status::Ok());  // our delete landed (or the key went anyway)
      if (Now() >= deadline) return done(failed);
      ReleaseRound(t, lock, deadline, done);
    });
  });
}

std::string LockProtocol::ReleaseTxn(const LockState& lock) const {
  const EtcdLockData* data = DataOf(lock);
  const std::string key = KeyOf(lock);
  const bool drop_min_hold = data != nullptr && !data->min_key.empty() && lock.given_back.load();
  if (data == nullptr || (data->delay_key.empty() && !drop_min_hold)) return IfOwnedDeleteTxn(key, OwnedRevisionOf(lock));
  // The lock-delay marker goes with the hold: a clean end. The min hold's marker stays, unless
  // the hold is given back (an acquire nobody took: as if it had not happened).
  Json deletes = Json::array({DeleteRequest(key)});
  if (!data->delay_key.empty()) deletes.push_back(DeleteRequest(data->delay_key));
  if (drop_min_hold) deletes.push_back(DeleteRequest(data->min_key));
  return TxnBody(Json::array({CompareCreateEqual(key, OwnedRevisionOf(lock))}), deletes, Json());
}

void LockProtocol::SetValue(Transport* t, std::shared_ptr<const LockState> lock, const std::string& value,
                            TimePoint deadline, Done done) {
  const std::string key = KeyOf(*lock);
  const std::string stored = Stored(lock->owner_value, value);
  t->Call(kTxn, IfOwnedSetTxn(key, stored, OwnedRevisionOf(*lock)), deadline,
          [this, t, lock, key, stored, deadline, done](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (r.status.ok()) return done(txn.succeeded ? Status::Ok() : NotHeld(*config_, lock->name));
    if (!r.maybe_applied) return done(r.status);
    // Settled by reading it: ours with this value, or not ours any more.
    ReadOwner(t, key, lock->owner_value, OwnedRevisionOf(*lock), deadline,
              [this, lock, stored, failed = r.status, done](Status s, bool ours, KeyValue kv) {
      if (!s.ok()) return done(failed);
      if (!ours) return done(NotHeld(*config_, lock->name));
      done(kv.value == stored ? Status::Ok() : failed);
    });
  });
}

// ---- Renew ----

void LockProtocol::Renew(Transport* t, const std::vector<std::shared_ptr<const LockState>>& locks,
                         TimePoint deadline, std::function<void(size_t, Status)> reported) {
  // A lock with a lock-delay marker has its marker's lease kept alive in the same round; its
  // verdict waits for both (a not-held verdict over an error, an error over ok).
  struct Verdict {
    Status status;
    int left = 1;
  };
  auto verdicts = std::make_shared<std::vector<Verdict>>(locks.size());
  auto done = [verdicts, reported](size_t k, Status s) {
    Verdict& v = (*verdicts)[k];
    if (!s.ok() && (v.status.ok() || s.code() == Code::kNotHeld)) v.status = std::move(s);
    if (--v.left == 0) reported(k, v.status);
  };
  for (size_t k = 0; k < locks.size(); ++k) {
    const int64_t delay_lease = DataOf(*locks[k])->delay_lease.load();
    if (delay_lease == 0) continue;
    ++(*verdicts)[k].left;
    t->Call(kKeepAlive, LeaseIdBody(delay_lease), deadline, [this, k, lock = locks[k], done](CallResult r) {
      int64_t ttl_s = 0;
      if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &ttl_s);
      if (r.status.ok() && ttl_s == 0) {
        r.status = Status::NotHeld(config_->Describe() + ": lock '" + lock->name +
                                   "' is lost: its lock-delay marker's etcd lease expired");
      }
      done(k, r.status);
    });
    if (!DataOf(*locks[k])->delay_unsettled.load()) continue;
    // The marker's last move stayed unknown: put over on the lease kept alive (ExtendDelay).
    // Until that is known to land, each round tries again; an error here is no verdict.
    ++(*verdicts)[k].left;
    const Json owned = Json::array({CompareCreateEqual(KeyOf(*locks[k]), OwnedRevisionOf(*locks[k]))});
    const Json put = Json::array({PutRequest(DataOf(*locks[k])->delay_key, kClosedByLockDelay, delay_lease)});
    t->Call(kTxn, TxnBody(owned, put, Json()), deadline, [this, k, lock = locks[k], delay_lease, done](CallResult r) {
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (!r.status.ok()) return done(k, Status::Ok());
      if (!txn.succeeded) return done(k, NotHeld(*config_, lock->name));
      if (DataOf(*lock)->delay_lease.load() == delay_lease) DataOf(*lock)->delay_unsettled = false;
      done(k, Status::Ok());
    });
  }
  std::map<int64_t, std::vector<size_t>> by_lease;
  for (size_t k = 0; k < locks.size(); ++k) by_lease[DataOf(*locks[k])->lease.load()].push_back(k);
  for (const auto& group : by_lease) {
    const int64_t lease = group.first;
    const std::vector<size_t>& members = group.second;  // named: clang 14 cannot capture a binding
    if (lease == 0) {  // no lease to keep alive: only check the key is still ours
      for (size_t k : members) {
        ReadOwner(t, KeyOf(*locks[k]), locks[k]->owner_value, OwnedRevisionOf(*locks[k]), deadline,
                  [this, k, lock = locks[k], done](Status s, bool ours, KeyValue) {
          done(k, !s.ok() ? s : ours ? Status::Ok() : NotHeld(*config_, lock->name));
        });
      }
      continue;
    }
    // The keepalive and the look at the lease's keys go out together; the verdict waits for
    // both.
    struct Round {
      Status alive;
      int64_t ttl_s = 0;
      Status listed;
      std::unordered_set<std::string> keys;
      int answers = 0;
    };
    auto round = std::make_shared<Round>();
    auto judge = [this, round, members, locks, done, lease_id = lease] {
      if (++round->answers < 2) return;
      if (round->alive.ok() && round->ttl_s > 0 && round->listed.ok()) SweepStrays(lease_id, round->keys);
      for (size_t k : members) {
        const LockState& lock = *locks[k];
        if (!round->alive.ok()) {
          done(k, round->alive);
        } else if (round->ttl_s == 0) {
          Forgotten(lock);
          done(k, Status::NotHeld(config_->Describe() + ": lock '" + lock.name + "' is lost: its etcd lease " +
                                  std::to_string(lease_id) + " expired"));
        } else if (!round->listed.ok()) {
          done(k, round->listed);
        } else if (round->keys.count(KeyOf(lock)) == 0) {
          Forgotten(lock);
          done(k, NotHeld(*config_, lock.name));
        } else {
          done(k, Status::Ok());
        }
      }
    };
    KeepAlive(t, lease, deadline, [round, judge](Status s, int64_t ttl_s) {
      round->alive = s;
      round->ttl_s = ttl_s;
      judge();
    });
    t->Call(kTimeToLive, LeaseTimeToLiveBody(lease, true), deadline, [round, judge](CallResult r) {
      int64_t ttl_s = 0;
      std::vector<std::string> keys;
      if (r.status.ok()) r.status = ReadTimeToLive(r.answer, &ttl_s, &keys);
      round->listed = r.status;
      round->keys.insert(std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()));
      judge();
    });
  }
}

// ---- Inspect, break ----

std::string LockProtocol::RecordsBegin(const std::string& name) const {
  std::string key = config_->params.prefix;
  key += '\0';
  key += "broken";
  key += '\0';
  key += name;
  key += '\0';
  return key;
}

std::string LockProtocol::RecordsEnd(const std::string& name) const {
  std::string end = RecordsBegin(name);
  end.back() = '\x01';
  return end;
}

Status LockProtocol::ReadRecords(const std::string& name, const std::vector<KeyValue>& kvs,
                                 std::vector<BrokenRecord>* out) const {
  out->clear();
  const std::string begin = RecordsBegin(name);
  for (const KeyValue& kv : kvs) {
    if (kv.key.compare(0, begin.size(), begin) != 0) continue;
    const std::string_view digits = std::string_view(kv.key).substr(begin.size());
    uint64_t token = 0;
    auto [stop, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), token);
    if (digits.size() != kTokenDigits || ec != std::errc() || stop != digits.data() + digits.size() || token == 0) {
      return Status::BackendError(config_->Describe() + ": a break record of lock '" + name +
                                  "' has a key dlock did not write (it ends '" + ServerText(digits) + "')");
    }
    out->push_back({token, kv.value.substr(0, kMaxStoredReasonBytes)});
  }
  return Status::Ok();
}

Status LockProtocol::ReadClosedBy(const std::string& name, const KeyValue& marker, std::string* by) const {
  // dlock writes a short word there ("broken", "min_hold", "lock_delay").
  const std::string& v = marker.value;
  const bool word = !v.empty() && v.size() <= 32 &&
                    std::all_of(v.begin(), v.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-' || c == '_'; });
  if (!word) {
    return Status::BackendError(config_->Describe() + ": lock '" + name +
                                "' is closed by a marker dlock did not write (its value: '" + ServerText(v) + "')");
  }
  *by = v;
  return Status::Ok();
}

void LockProtocol::ReadName(Transport* t, const std::string& name, TimePoint deadline,
                            std::function<void(Status, NameKvs, int64_t)> done) {
  const NameKeys keys(KeyFor(name));
  // A read-only transaction: both ranges at one revision, in one round trip.
  const Json reads =
      Json::array({RangeRequest(keys.exclusive(), keys.end()), RangeRequest(RecordsBegin(name), RecordsEnd(name))});
  t->Call(kTxn, TxnBody(Json::array(), reads, Json()), deadline, [done = std::move(done)](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (!r.status.ok()) return done(r.status, nullptr, 0);
    done(Status::Ok(), std::make_shared<const std::vector<KeyValue>>(std::move(txn.kvs)), txn.revision);
  });
}

void LockProtocol::Inspect(Transport* t, const std::string& name, TimePoint deadline,
                           std::function<void(Status, LockInfo)> done) {
  if (mutex_layout()) return InspectMutex(t, name, deadline, std::move(done));
  ReadName(t, name, deadline, [this, t, name, deadline, done](Status s, NameKvs kvs, int64_t) {
    if (!s.ok()) return done(s, LockInfo());
    auto info = std::make_shared<LockInfo>();
    s = ReadRecords(name, *kvs, &info->broken);
    const NameView view = Classify(NameKeys(KeyFor(name)), *kvs, std::string(), std::string());
    std::string closed_by;
    if (s.ok() && view.closed != nullptr) s = ReadClosedBy(name, *view.closed, &closed_by);
    if (!s.ok()) return done(s, LockInfo());
    // The newest records only (more stand only if another writer added them).
    std::sort(info->broken.begin(), info->broken.end(),
              [](const BrokenRecord& a, const BrokenRecord& b) { return a.fencing_token > b.fencing_token; });
    if (info->broken.size() > kMaxBrokenRecords) info->broken.resize(kMaxBrokenRecords);
    const std::vector<const KeyValue*> holds = HoldsOf(view, info.get());
    std::map<const KeyValue*, uint32_t> takes;  // a permit's, when it took more than one
    for (const auto& permit : view.permits) {
      if (permit.take > 1) takes[permit.kv] = std::min(permit.take, permit.n);  // the key's: clamped
    }
    std::vector<const KeyValue*> timed = holds;
    const KeyValue* marker = view.closed;
    if (marker != nullptr) timed.push_back(marker);
    // The job rules' markers close the name only while no hold stands ("Job rules").
    std::vector<std::pair<const KeyValue*, std::string>> rules;
    if (holds.empty()) {
      for (const KeyValue* kv : view.rules) {
        std::string by;
        s = ReadClosedBy(name, *kv, &by);
        if (!s.ok()) return done(s, LockInfo());
        rules.emplace_back(kv, std::move(by));
        timed.push_back(kv);
      }
    }
    LeaseTtls(t, LeasesOf(timed), deadline,
              [kvs, holds, takes, marker, closed_by, rules, info, done](Status s, std::map<int64_t, LeaseTime> ttls) {
      if (!s.ok()) return done(s, LockInfo());
      for (const KeyValue* kv : holds) {
        info->holders.push_back(HolderOf(*kv, ttls[kv->lease].remaining_ms));
        if (auto it = takes.find(kv); it != takes.end()) info->holders.back().take = it->second;
      }
      if (marker != nullptr) {
        // -1: a marker without a lease (not dlock's) closes it for good; 0: it ended just now.
        info->closed_ms = marker->lease == 0 ? -1 : ttls[marker->lease].remaining_ms;
        if (info->closed_ms != 0) info->closed_by = closed_by;
      }
      // The marker that lasts longest says how long the name stays closed, and by what.
      for (const auto& rule : rules) {
        if (info->closed_ms == -1) break;
        const int64_t ms = rule.first->lease == 0 ? -1 : ttls[rule.first->lease].remaining_ms;
        if (ms == -1 || ms > info->closed_ms) {
          info->closed_ms = ms;
          info->closed_by = rule.second;
        }
      }
      done(Status::Ok(), std::move(*info));
    });
  });
}

struct LockProtocol::BreakOp {
  std::string name;
  std::string reason;
  bool now = false;
  TimePoint deadline;
  std::function<void(Status, BreakResult)> done;
  int round = 0;
  bool lease_retried = false;  // a lease etcd had forgotten was replaced once
};

// One round of a break: what its read found, and the leases its transaction writes with.
struct LockProtocol::BreakPlan {
  NameKvs kvs;          // the read (holds and marker point into it)
  int64_t revision = 0;  // ... made at this revision
  std::vector<const KeyValue*> holds;
  const KeyValue* marker = nullptr;    // the marker standing at the read
  std::vector<BrokenRecord> records;   // the records standing at the read
  BreakResult result;                  // kind, permits, the holds it breaks
  int64_t closed_need_ms = 0;          // how long the name must stay closed (0: not at all)
  // An earlier break's marker (unless now): what is left of its lease's TTL (a lower bound,
  // whole seconds; 0: none, or gone), asked at ttls_asked. When that covers closed_need_ms the
  // marker is kept as it stands (keep_marker): no new lease.
  int64_t earlier_ms = 0;
  TimePoint ttls_asked;
  bool keep_marker = false;
  int64_t marker_lease = 0;            // the new marker's lease; 0: no marker
  int64_t marker_granted_s = 0;
  TimePoint marker_sent;               // when its grant was sent
  int64_t record_lease = 0;
};

void LockProtocol::Break(Transport* t, const std::string& name, const std::string& reason, bool now,
                         TimePoint deadline, std::function<void(Status, BreakResult)> done) {
  auto op = std::make_shared<BreakOp>();
  op->name = name;
  op->reason = reason.substr(0, kMaxStoredReasonBytes);
  op->now = now;
  op->deadline = deadline;
  op->done = std::move(done);
  BreakRound(t, std::move(op));
}

void LockProtocol::BreakRound(Transport* t, std::shared_ptr<BreakOp> op) {
  ReadName(t, op->name, op->deadline, [this, t, op](Status s, NameKvs kvs, int64_t revision) {
    if (!s.ok()) return op->done(s, BreakResult());
    auto plan = std::make_shared<BreakPlan>();
    plan->kvs = kvs;
    plan->revision = revision;
    s = ReadRecords(op->name, *kvs, &plan->records);
    if (!s.ok()) return op->done(s, BreakResult());
    const NameView view = Classify(NameKeys(KeyFor(op->name)), *kvs, std::string(), std::string());
    plan->holds = HoldsOf(view, &plan->result);
    plan->marker = view.closed;
    // An earlier break's marker keeps what is left of its time, unless now: the holders it
    // broke may not have heard yet. (One without a lease is not dlock's: it goes.)
    const KeyValue* earlier = view.closed;
    if (op->now || earlier == nullptr || earlier->lease == 0 || earlier->value != kClosedByBreak) earlier = nullptr;
    std::vector<const KeyValue*> timed = plan->holds;
    if (earlier != nullptr) timed.push_back(earlier);
    plan->ttls_asked = Now();
    LeaseTtls(t, LeasesOf(timed), op->deadline,
              [this, t, op, plan, earlier](Status s, std::map<int64_t, LeaseTime> ttls) {
      if (!s.ok()) return op->done(s, BreakResult());  // nothing written
      for (const KeyValue* kv : plan->holds) {
        const LeaseTime& time = ttls[kv->lease];
        plan->result.holders.push_back(HolderOf(*kv, time.remaining_ms));
        if (kv->lease == 0 || time.remaining_ms <= 0) continue;  // no expiry, or expired: nothing to wait
        // "Closed time" in lock_protocol.h. Both terms are clamped (ms below 10^13).
        const int64_t need = std::max(time.remaining_ms + 1000, (time.granted_s - 1) * 1000);
        plan->closed_need_ms = std::max(plan->closed_need_ms, need);
      }
      if (earlier != nullptr) plan->earlier_ms = std::max<int64_t>(0, ttls[earlier->lease].remaining_ms);
      if (plan->earlier_ms > 0) {
        // When what is left of it (its lease's TTL in whole seconds, rounded down: a lower
        // bound; 1000 for "under a second", which covers no broken holder, each needing at
        // least 2000) covers the broken holds, the marker stays as it stands. Else the new
        // marker covers both, the earlier one's time counted up to its next whole second.
        if (plan->closed_need_ms <= plan->earlier_ms) {
          plan->keep_marker = true;
          plan->closed_need_ms = 0;
        } else {
          plan->closed_need_ms = std::max(plan->closed_need_ms, plan->earlier_ms + 1000);
        }
      }
      BreakLeases(t, op, plan);
    });
  });
}

void LockProtocol::BreakLeases(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan) {
  auto with_records = [this, t, op, plan] {
    if (plan->holds.empty()) return BreakTxn(t, op, plan);
    RecordLease(t, op->deadline, [this, t, op, plan](Status s, int64_t lease) {
      if (!s.ok()) {
        DropMarkerLease(*plan);
        return op->done(s, BreakResult());
      }
      plan->record_lease = lease;
      BreakTxn(t, op, plan);
    });
  };
  if (op->now || plan->closed_need_ms == 0) return with_records();
  const int64_t ttl_s = std::min(kMaxLeaseTtlS, (plan->closed_need_ms + kMarkerSpareMs + 999) / 1000);
  plan->marker_sent = Now();
  t->Call(kGrant, LeaseGrantBody(ttl_s), op->deadline, [op, plan, with_records](CallResult r) {
    if (r.status.ok()) r.status = ReadGrant(r.answer, &plan->marker_lease, &plan->marker_granted_s);
    // A grant that landed unseen holds no key: it runs out by itself.
    if (!r.status.ok()) return op->done(r.status, BreakResult());
    with_records();
  });
}

void LockProtocol::DropMarkerLease(BreakPlan& plan) {
  // Revoked, a late commit of the transaction that would have put the marker fails whole.
  if (plan.marker_lease != 0 && background_) background_(kRevoke, LeaseIdBody(plan.marker_lease));
  plan.marker_lease = 0;
}

void LockProtocol::BreakTxn(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan) {
  const NameKeys keys(KeyFor(op->name));
  const std::string records_begin = RecordsBegin(op->name);
  const int64_t read_at = plan->revision;
  // Nothing the plan rests on was made or changed since the read (a deletion since is fine).
  const Json compare = Json::array({CompareModAtMost(keys.exclusive(), read_at),
                                    CompareRangeModAtMost(keys.HoldsBegin(), keys.HoldsEnd(), read_at),
                                    CompareModAtMost(keys.Closed(), read_at),
                                    CompareRangeModAtMost(records_begin, RecordsEnd(op->name), read_at)});
  // Every job rule's marker goes too: what keeps the name closed after a break is its own marker.
  Json success = Json::array({DeleteRequest(keys.exclusive()), DeleteRangeRequest(keys.HoldsBegin(), keys.HoldsEnd()),
                              DeleteRangeRequest(keys.RulesBegin(), keys.RulesEnd())});
  // The new marker is put over the old one (a transaction may not both delete and put a key);
  // an earlier break's marker that outlasts the broken holds is left as it stands (the compare
  // above holds it as read).
  if (plan->marker_lease != 0) {
    success.push_back(PutRequest(keys.Closed(), kClosedByBreak, plan->marker_lease));
  } else if (!plan->keep_marker) {
    success.push_back(DeleteRequest(keys.Closed()));
  }
  // The newest kMaxBrokenRecords of the standing records and the new ones are kept.
  std::vector<uint64_t> tokens;
  for (const BrokenRecord& record : plan->records) tokens.push_back(record.fencing_token);
  for (const HolderInfo& holder : plan->result.holders) tokens.push_back(holder.fencing_token);
  std::sort(tokens.begin(), tokens.end(), std::greater<uint64_t>());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  uint64_t oldest_kept = 0;
  if (tokens.size() > kMaxBrokenRecords) {
    oldest_kept = tokens[kMaxBrokenRecords - 1];
    success.push_back(DeleteRangeRequest(records_begin, records_begin + TokenDigits(oldest_kept)));
  }
  for (const HolderInfo& holder : plan->result.holders) {
    if (holder.fencing_token < oldest_kept) continue;
    success.push_back(PutRequest(records_begin + TokenDigits(holder.fencing_token), op->reason, plan->record_lease));
  }
  t->Call(kTxn, TxnBody(compare, success, Json()), op->deadline, [this, t, op, plan](CallResult r) {
    if (LeaseNotFound(r) && !op->lease_retried) {  // the records' lease was revoked: new leases, once
      op->lease_retried = true;
      ForgetRecordLease(plan->record_lease);
      DropMarkerLease(*plan);
      return BreakRound(t, op);
    }
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (!r.status.ok()) {
      if (r.maybe_applied) return BreakUnknown(t, op, plan, r.status);
      DropMarkerLease(*plan);
      return op->done(r.status, BreakResult());
    }
    if (txn.succeeded) return BreakDone(t, op, plan);
    DropMarkerLease(*plan);  // the name changed since the read: again, from a new read
    if (++op->round < kBreakRounds && Now() < op->deadline) return BreakRound(t, op);
    op->done(Status::BackendError(config_->Describe() + ": lock '" + op->name + "' changed under each of " +
                                  std::to_string(kBreakRounds) + " tries to break it; nothing was broken"),
             BreakResult());
  });
}

void LockProtocol::BreakUnknown(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan,
                                Status failed) {
  ReadName(t, op->name, op->deadline, [this, t, op, plan, failed](Status s, NameKvs kvs, int64_t) {
    bool applied = s.ok();
    if (applied) {
      const NameView view = Classify(NameKeys(KeyFor(op->name)), *kvs, std::string(), std::string());
      // The holds are gone, and their newest record stands ...
      uint64_t newest = 0;
      for (const KeyValue* held : plan->holds) {
        newest = std::max(newest, static_cast<uint64_t>(held->create_revision));
        for (const KeyValue& kv : *kvs) {
          if (kv.key == held->key && kv.create_revision == held->create_revision) applied = false;
        }
      }
      if (newest != 0) {
        const std::string record = RecordsBegin(op->name) + TokenDigits(newest);
        applied = applied && std::any_of(kvs->begin(), kvs->end(), [&](const KeyValue& kv) { return kv.key == record; });
      }
      // ... and our marker, or the old one is gone (unless it was kept).
      if (plan->marker_lease != 0) {
        applied = applied && view.closed != nullptr && view.closed->lease == plan->marker_lease;
      } else if (plan->marker != nullptr && !plan->keep_marker) {
        applied = applied && (view.closed == nullptr || view.closed->mod_revision != plan->marker->mod_revision);
      }
    }
    if (applied) return BreakDone(t, op, plan);
    // Revoked only when the read shows the break did not land. Unread, it may have: the holds
    // are gone then, and revoking would take the marker along and free the name at once while
    // the broken holders may still work; the lease runs out by itself (its length is bounded).
    if (s.ok()) DropMarkerLease(*plan);
    op->done(failed, BreakResult());
  });
}

void LockProtocol::BreakDone(Transport* t, std::shared_ptr<BreakOp> op, std::shared_ptr<BreakPlan> plan) {
  if (plan->keep_marker) {
    // The earlier marker's lease, from when its TTL was asked (a lower bound, as below).
    const int64_t left = plan->earlier_ms - std::chrono::duration_cast<Millis>(Now() - plan->ttls_asked).count();
    plan->result.closed_ms = std::max<int64_t>(0, left);
    if (plan->result.closed_ms > 0) plan->result.closed_by = kClosedByBreak;
    return op->done(Status::Ok(), std::move(plan->result));
  }
  if (plan->marker_lease == 0) return op->done(Status::Ok(), std::move(plan->result));
  // What the server holds: the marker's lease from its grant (a lower bound: etcd counted from
  // a moment after marker_sent).
  auto report = [op, plan](TimePoint from, int64_t ttl_s) {
    const int64_t left = ttl_s * 1000 - std::chrono::duration_cast<Millis>(Now() - from).count();
    plan->result.closed_ms = std::max<int64_t>(0, left);
    if (plan->result.closed_ms > 0) plan->result.closed_by = kClosedByBreak;
    op->done(Status::Ok(), std::move(plan->result));
  };
  if (Now() - plan->marker_sent <= Millis(kMarkerSpareMs)) return report(plan->marker_sent, plan->marker_granted_s);
  // The transaction took longer than the spare second: kept alive now, the marker's lease runs
  // its whole TTL from here, past the time the broken holds need.
  const TimePoint sent = Now();
  t->Call(kKeepAlive, LeaseIdBody(plan->marker_lease), op->deadline, [plan, sent, report](CallResult r) {
    int64_t ttl_s = 0;
    if (r.status.ok()) r.status = ReadKeepAlive(r.answer, &ttl_s);
    if (r.status.ok() && ttl_s > 0) return report(sent, ttl_s);
    report(plan->marker_sent, plan->marker_granted_s);
  });
}

void LockProtocol::RecordLease(Transport* t, TimePoint deadline, std::function<void(Status, int64_t)> done) {
  SharedLease known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = record_lease_;
  }
  if (known.id != 0 && known.alive_until - Now() >= Millis(kBrokenRecordMs)) return done(Status::Ok(), known.id);
  const TimePoint sent = Now();
  t->Call(kGrant, LeaseGrantBody(kRecordLeaseS), deadline, [this, sent, done = std::move(done)](CallResult r) {
    int64_t id = 0, ttl_s = 0;
    if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &ttl_s);
    if (!r.status.ok()) return done(r.status, 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      record_lease_ = {id, ttl_s, sent + LeaseSpan(ttl_s)};
    }
    done(Status::Ok(), id);
  });
}

void LockProtocol::ForgetRecordLease(int64_t lease) {
  std::lock_guard<std::mutex> lock(mu_);
  if (record_lease_.id == lease) record_lease_ = SharedLease();
}

// ---- Release requests ----

std::string EncodeReleaseRequest(const std::string& id, const std::string& reason) { return id + '\n' + reason; }

bool DecodeReleaseRequest(std::string_view value, std::string* id, std::string* reason) {
  const size_t nl = value.find('\n');
  if (nl == std::string_view::npos || nl == 0 || nl > kMaxRequestIdBytes) return false;
  id->assign(value.substr(0, nl));
  reason->assign(value.substr(nl + 1, kMaxReasonBytes));
  return true;
}

std::string LockProtocol::RequestKey(const std::string& name) const {
  std::string key = config_->params.prefix;
  key += '\0';
  key += "request";
  key += '\0';
  key += name;
  return key;
}

void LockProtocol::RequestRelease(Transport* t, const std::string& name, const std::string& reason,
                                  TimePoint deadline, std::function<void(Status, uint32_t)> done) {
  std::string id;
  Status s = NewOwnerToken(&id);  // 128 random bits: tells this request from any other
  if (!s.ok()) return done(s, 0);
  std::string value = EncodeReleaseRequest(id, reason);
  RequestLease(t, deadline, [this, t, name, value = std::move(value), deadline, done](Status s, int64_t lease) {
    if (!s.ok()) return done(s, 0);
    RequestTxn(t, name, value, lease, deadline, false, done);
  });
}

void LockProtocol::RequestTxn(Transport* t, const std::string& name, std::string value, int64_t lease,
                              TimePoint deadline, bool retried, std::function<void(Status, uint32_t)> done) {
  const NameKeys keys(KeyFor(name));
  const Json put = PutRequest(RequestKey(name), value, lease);
  const Json read = RangeRequest(keys.exclusive(), keys.end());
  // An exclusive holder, or else a shared hold or a permit: either way the request is put, and
  // the name's keys read at the same revision (to count the holds asked).
  const Json held_some_other_way =
      TxnRequest(Json::array({CompareRangeNotEmpty(keys.HoldsBegin(), keys.HoldsEnd())}), Json::array({put}), Json());
  const std::string body = TxnBody(Json::array({CompareExists(keys.exclusive())}), Json::array({put, read}),
                                   Json::array({held_some_other_way, read}));
  t->Call(kTxn, body, deadline,
          [this, t, name, value = std::move(value), lease, deadline, retried, done](CallResult r) mutable {
    if (!retried && LeaseNotFound(r)) {  // the shared lease is gone (revoked behind our back): once more
      ForgetRequestLease(lease);
      return RequestLease(t, deadline, [this, t, name, value = std::move(value), deadline, done](Status s, int64_t l) {
        if (!s.ok()) return done(s, 0);
        RequestTxn(t, name, value, l, deadline, true, done);
      });
    }
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    // An answer lost on the way (maybe applied): an error all the same; asking again is harmless.
    if (!r.status.ok()) return done(r.status.Prefixed("release request for lock '" + name + "'"), 0);
    const NameView view = Classify(NameKeys(KeyFor(name)), txn.kvs, std::string(), std::string());
    const size_t holds = (view.exclusive != nullptr ? 1 : 0) + view.shared.size() + view.permits.size();
    done(Status::Ok(), static_cast<uint32_t>(std::min<size_t>(holds, UINT32_MAX)));
  });
}

void LockProtocol::RequestLease(Transport* t, TimePoint deadline, std::function<void(Status, int64_t)> done) {
  SharedLease known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = request_lease_;
  }
  if (known.id != 0 && known.alive_until - Now() >= Millis(kRequestKeepMs)) return done(Status::Ok(), known.id);
  const TimePoint sent = Now();
  t->Call(kGrant, LeaseGrantBody(kRequestLeaseS), deadline, [this, sent, done = std::move(done)](CallResult r) {
    int64_t id = 0, ttl_s = 0;
    if (r.status.ok()) r.status = ReadGrant(r.answer, &id, &ttl_s);
    if (!r.status.ok()) return done(r.status, 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      request_lease_ = {id, ttl_s, sent + LeaseSpan(ttl_s)};
    }
    done(Status::Ok(), id);
  });
}

void LockProtocol::ForgetRequestLease(int64_t lease) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request_lease_.id == lease) request_lease_ = SharedLease();
}

// ---- Close, open ----

void LockProtocol::ReleaseAll(Transport* t, const std::vector<std::shared_ptr<LockState>>& locks,
                              TimePoint deadline) {
  std::unordered_set<int64_t> leases;
  for (const auto& lock : locks) {
    Forgotten(*lock);
    int64_t lease = DataOf(*lock)->lease.load();
    if (lease != 0) {
      leases.insert(lease);
      // A clean end: the lock-delay marker's own lease goes with it (and the marker).
      const int64_t delay_lease = DataOf(*lock)->delay_lease.exchange(0);
      if (delay_lease != 0) leases.insert(delay_lease);
    } else {
      Release(t, lock, deadline, [](Status) {});
    }
  }
  {
    // Waiting writers' announcements go too, and so does every shared lease of the client: the
    // keys on it are all its own (layout=mutex: its waiters' places in line; acquires whose
    // outcome stayed unknown).
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& entry : announces_) leases.insert(entry.second.id);
    announces_.clear();
    for (const auto& entry : leases_) leases.insert(entry.second.id);
    line_.clear();
  }
  for (int64_t lease : leases) {
    Forget(lease);
    t->Call(kRevoke, LeaseIdBody(lease), deadline, [](CallResult) {});
  }
}

void LockProtocol::Probe(Transport* t, TimePoint deadline, Done done) {
  t->Call(kRange, RangeBody(KeyFor(".dlock-open-check")), deadline,
          [done = std::move(done)](CallResult r) { done(r.status); });
}

}  // namespace dlock::etcd
