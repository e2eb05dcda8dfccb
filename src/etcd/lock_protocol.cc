#include "etcd/lock_protocol.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace dlock::etcd {
namespace {

constexpr char kTxn[] = "/v3/kv/txn";
constexpr char kRange[] = "/v3/kv/range";
constexpr char kGrant[] = "/v3/lease/grant";
constexpr char kKeepAlive[] = "/v3/lease/keepalive";
constexpr char kTimeToLive[] = "/v3/lease/timetolive";
constexpr char kRevoke[] = "/v3/lease/revoke";

int64_t TokenOf(const LockState& lock) { return static_cast<int64_t>(std::min<uint64_t>(lock.fencing_token, INT64_MAX)); }

EtcdLockData* DataOf(const LockState& lock) { return static_cast<EtcdLockData*>(lock.backend_data.get()); }

bool LeaseNotFound(const CallResult& r) {
  return r.grpc_code == kGrpcNotFound && r.status.message().find("lease not found") != std::string::npos;
}

// How long etcd says a lease lives, for time arithmetic: at most ten years (as the core clamps
// a holder's TTL), so that no server-supplied TTL can overflow a time point.
Millis LeaseSpan(int64_t ttl_s) { return Millis(std::min<int64_t>(ttl_s, int64_t{10} * 365 * 86400) * 1000); }

Status NotHeld(const EtcdConfig& config, const std::string& name) {
  return Status::NotHeld(config.Describe() + ": lock '" + name +
                         "' is not held by this owner any more (its key is gone or another holds it)");
}

}  // namespace

int64_t LeaseTtlSeconds(uint64_t lease_ms) {
  return static_cast<int64_t>((lease_ms + 999) / 1000) + 1;
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
  if (data != nullptr && data->counted.exchange(false)) Uncount(data->lease.load(), KeyFor(lock.name));
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
                             std::function<void(Status, int64_t)> done) {
  if (lease == 0) return done(Status::Ok(), -1);
  t->Call(kTimeToLive, LeaseTimeToLiveBody(lease, false), deadline, [done = std::move(done)](CallResult r) {
    int64_t ttl_s = 0;
    if (r.status.ok()) r.status = ReadTimeToLive(r.answer, &ttl_s, nullptr);
    if (!r.status.ok()) return done(r.status, -2);
    done(Status::Ok(), ttl_s < 0 ? 0 : ttl_s * 1000);
  });
}

// ---- Acquire ----

struct LockProtocol::AcquireOp {
  LockRequest request;
  std::string key;
  TimePoint deadline;
  std::function<void(Status, AcquireAttempt)> done;
  bool lease_retried = false;  // a shared lease etcd had forgotten was replaced once
};

void LockProtocol::Acquire(Transport* t, const LockRequest& request, TimePoint deadline,
                           std::function<void(Status, AcquireAttempt)> done) {
  auto op = std::make_shared<AcquireOp>();
  op->request = request;
  op->key = KeyFor(request.name);
  op->deadline = deadline;
  op->done = std::move(done);
  AcquireRound(t, std::move(op));
}

void LockProtocol::Won(AcquireOp& op, int64_t sent_lease, int64_t kv_lease, int64_t token) {
  if (kv_lease != sent_lease) {  // an earlier try's lease: count the key where it hangs
    Uncount(sent_lease, op.key);
    Count(kv_lease, op.key);
  }
  AcquireAttempt attempt;
  attempt.acquired = true;
  attempt.fencing_token = static_cast<uint64_t>(token);
  attempt.backend_data = std::make_shared<EtcdLockData>(kv_lease);
  op.done(Status::Ok(), attempt);
}

void LockProtocol::AcquireRound(Transport* t, std::shared_ptr<AcquireOp> op) {
  EnsureLease(t, op->request.lease_ms, op->deadline, [this, t, op](Status s, int64_t lease) {
    if (!s.ok()) return op->done(s, AcquireAttempt());
    Count(lease, op->key);  // before it is sent: a renewal sweeping the lease must spare it
    t->Call(kTxn, CreateIfAbsentTxn(op->key, op->request.owner_value, lease), op->deadline,
            [this, t, op, lease](CallResult r) {
      if (LeaseNotFound(r) && !op->lease_retried) {
        op->lease_retried = true;
        Uncount(lease, op->key);
        Forget(lease);
        return AcquireRound(t, op);
      }
      TxnAnswer txn;
      if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
      if (!r.status.ok()) {
        if (!r.maybe_applied) {
          Uncount(lease, op->key);
          return op->done(r.status, AcquireAttempt());
        }
        // Settle: did our create land?
        return ReadOwner(t, op->key, op->request.owner_value, 0, op->deadline,
                         [this, op, lease, failed = r.status](Status s, bool ours, KeyValue kv) {
          if (s.ok() && ours) return Won(*op, lease, kv.lease, kv.create_revision);
          // Not there yet is not never: a proposal queued on a node without a leader commits
          // when the partition heals. See "An acquire whose outcome stays unknown".
          Uncount(lease, op->key);
          Forget(lease);
          if (lease == 0 && background_) background_(kTxn, IfValueDeleteTxn(op->key, op->request.owner_value));
          op->done(failed, AcquireAttempt());
        });
      }
      if (txn.succeeded) return Won(*op, lease, lease, txn.revision);  // the put's create revision
      if (!txn.kvs.empty() && txn.kvs[0].value == op->request.owner_value) {
        // Ours already: an earlier try of this very acquire landed (its answer was lost).
        return Won(*op, lease, txn.kvs[0].lease, txn.kvs[0].create_revision);
      }
      Uncount(lease, op->key);
      if (txn.kvs.empty()) {  // deleted between the compare and the read: cannot happen in one txn
        AcquireAttempt attempt;
        attempt.holder_ttl_ms = 0;
        return op->done(Status::Ok(), attempt);
      }
      Refused(t, op, std::move(txn.kvs[0]));
    });
  });
}

void LockProtocol::Refused(Transport* t, std::shared_ptr<AcquireOp> op, KeyValue holder) {
  HolderTtl(t, holder.lease, op->deadline, [op](Status, int64_t ttl_ms) {
    AcquireAttempt attempt;
    attempt.holder_ttl_ms = ttl_ms;  // -2 (unknown) when the look failed: not worth failing for
    op->done(Status::Ok(), attempt);
  });
}

void LockProtocol::ReadOwner(Transport* t, const std::string& key, const std::string& owner_value,
                             int64_t create_revision, TimePoint deadline,
                             std::function<void(Status, bool, KeyValue)> done) {
  t->Call(kRange, RangeBody(key), deadline, [owner_value, create_revision, done = std::move(done)](CallResult r) {
    KeyValue kv;
    bool found = false;
    if (r.status.ok()) r.status = ReadRange(r.answer, &kv, &found);
    if (!r.status.ok()) return done(r.status, false, kv);
    bool ours = found && kv.value == owner_value && (create_revision == 0 || kv.create_revision == create_revision);
    done(Status::Ok(), ours, kv);
  });
}

// ---- Extend, release ----

void LockProtocol::Extend(Transport* t, std::shared_ptr<const LockState> lock, uint64_t lease_ms,
                          TimePoint deadline, Done done) {
  EnsureLease(t, lease_ms, deadline, [this, t, lock, deadline, done](Status s, int64_t lease) {
    if (!s.ok()) return done(s);
    ChangeLease(t, lock, lease, deadline, false, done);
  });
}

void LockProtocol::ChangeLease(Transport* t, std::shared_ptr<const LockState> lock, int64_t lease,
                               TimePoint deadline, bool retried, Done done) {
  const std::string key = KeyFor(lock->name);
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
  t->Call(kTxn, IfOwnedPutTxn(key, lock->owner_value, TokenOf(*lock), lease), deadline,
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
    ReadOwner(t, key, lock->owner_value, TokenOf(*lock), deadline,
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
      if (background_) background_(kTxn, IfOwnedDeleteTxn(KeyFor(lock->name), lock->owner_value, TokenOf(*lock)));
    }
    done(s);
  });
}

void LockProtocol::ReleaseRound(Transport* t, std::shared_ptr<const LockState> lock, TimePoint deadline,
                                Done done) {
  const std::string key = KeyFor(lock->name);
  t->Call(kTxn, IfOwnedDeleteTxn(key, lock->owner_value, TokenOf(*lock)), deadline,
          [this, t, lock, deadline, key, done](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (r.status.ok()) return done(txn.succeeded ? Status::Ok() : NotHeld(*config_, lock->name));
    if (!r.maybe_applied) return done(r.status);
    ReadOwner(t, key, lock->owner_value, TokenOf(*lock), deadline,
              [this, t, lock, deadline, failed = r.status, done](Status s, bool ours, KeyValue) {
      if (!s.ok()) return done(failed);
      if (!ours) return done(Status::Ok());  // our delete landed (or the key went anyway)
      if (Now() >= deadline) return done(failed);
      ReleaseRound(t, lock, deadline, done);
    });
  });
}

// ---- Renew ----

void LockProtocol::Renew(Transport* t, const std::vector<std::shared_ptr<const LockState>>& locks,
                         TimePoint deadline, std::function<void(size_t, Status)> done) {
  std::map<int64_t, std::vector<size_t>> by_lease;
  for (size_t k = 0; k < locks.size(); ++k) by_lease[DataOf(*locks[k])->lease.load()].push_back(k);
  for (const auto& group : by_lease) {
    const int64_t lease = group.first;
    const std::vector<size_t>& members = group.second;  // named: clang 14 cannot capture a binding
    if (lease == 0) {  // no lease to keep alive: only check the key is still ours
      for (size_t k : members) {
        ReadOwner(t, KeyFor(locks[k]->name), locks[k]->owner_value, TokenOf(*locks[k]), deadline,
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
        } else if (round->keys.count(KeyFor(lock.name)) == 0) {
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

// ---- Inspect, close, open ----

void LockProtocol::Inspect(Transport* t, const std::string& name, TimePoint deadline,
                           std::function<void(Status, LockInfo)> done) {
  t->Call(kRange, RangeBody(KeyFor(name)), deadline, [this, t, deadline, done](CallResult r) {
    KeyValue kv;
    bool found = false;
    if (r.status.ok()) r.status = ReadRange(r.answer, &kv, &found);
    if (!r.status.ok() || !found) return done(r.status, LockInfo());
    HolderTtl(t, kv.lease, deadline, [kv, done](Status s, int64_t ttl_ms) {
      LockInfo info;
      if (!s.ok()) return done(s, info);
      HolderInfo holder;
      holder.owner = OwnerLabel(kv.value);
      holder.remaining_ms = ttl_ms;
      holder.fencing_token = static_cast<uint64_t>(kv.create_revision);
      info.holders.push_back(std::move(holder));
      done(Status::Ok(), std::move(info));
    });
  });
}

void LockProtocol::ReleaseAll(Transport* t, const std::vector<std::shared_ptr<LockState>>& locks,
                              TimePoint deadline) {
  std::unordered_set<int64_t> leases;
  for (const auto& lock : locks) {
    Forgotten(*lock);
    int64_t lease = DataOf(*lock)->lease.load();
    if (lease != 0) {
      leases.insert(lease);
    } else {
      Release(t, lock, deadline, [](Status) {});
    }
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
