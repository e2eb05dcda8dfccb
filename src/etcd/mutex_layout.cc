// layout=mutex: etcd's own lock recipe (lock_protocol.h, "layout=mutex"), the part of
// LockProtocol that differs from dlock's layout: acquire, leaving the line, inspect.
#include <algorithm>

#include "core/server_text.h"
#include "etcd/lock_protocol.h"

namespace dlock::etcd {
namespace {

constexpr char kMutexTxn[] = "/v3/kv/txn";
// A waiter in line whose hold will have no lease still waits on one, so that its key goes when
// it dies: a lease this long, kept alive by its attempts (at least every half of it).
constexpr uint64_t kNoLeaseWaiterMs = 10000;
// Reads an attempt makes again when the key before its own went while it asked.
constexpr int kMaxLineReads = 8;
// Keys deleted while a waiter's attempt is out that it keeps to look through (more: it reads
// again whatever its answer says).
constexpr size_t kMaxGone = 64;

// The read of one key, as a transaction's request.
Json RangeKeyRequest(const std::string& key) { return RangeRequest(key, key + '\0'); }

}  // namespace

bool LockProtocol::InLine(const LockRequest& request, const std::string& key, int64_t sent_lease,
                          const KeyValue& mine, std::string predecessor) {
  int64_t counted = -1;  // the lease it was counted on in line before (-1: none)
  bool went = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    LineEntry& e = line_[request.waiter_id];
    if (e.counted) counted = e.lease;
    e.key = key;
    e.counted = true;
    e.lease = mine.lease;
    e.create_revision = mine.create_revision;
    went = predecessor.empty() ? (!e.gone.empty() || e.gone_overflow)
                               : (e.gone_overflow || std::find(e.gone.begin(), e.gone.end(), predecessor) != e.gone.end());
    e.predecessor = std::move(predecessor);
    e.asking = false;
    e.gone.clear();
    e.gone_overflow = false;
  }
  // Counted where it hangs before any other count goes: a renewal's sweep never finds it
  // uncounted in between.
  if (counted != mine.lease) Count(mine.lease, key);
  Uncount(sent_lease, key);  // the attempt's own count
  if (counted != -1 && counted != mine.lease) Uncount(counted, key);
  return went;
}

int64_t LockProtocol::OutOfLine(const std::string& waiter_id) {
  LineEntry e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = line_.find(waiter_id);
    if (it == line_.end()) return -1;
    e = std::move(it->second);
    line_.erase(it);
  }
  if (!e.counted) return -1;
  Uncount(e.lease, e.key);
  return e.lease;
}

int64_t LockProtocol::Attempting(const std::string& waiter_id) {
  std::lock_guard<std::mutex> lock(mu_);
  LineEntry& e = line_[waiter_id];
  e.asking = true;
  e.gone.clear();
  e.gone_overflow = false;
  return e.create_revision;
}

LineWake LockProtocol::WakeOf(const std::string& waiter_id, const std::vector<std::string>& deleted) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = line_.find(waiter_id);
  if (it == line_.end()) return LineWake::kRelease;
  LineEntry& e = it->second;
  const bool behind =
      !e.predecessor.empty() && std::find(deleted.begin(), deleted.end(), e.predecessor) != deleted.end();
  if (e.asking) {  // its answer may name one of these as its predecessor: InLine will tell
    for (const std::string& key : deleted) {
      if (e.gone.size() < kMaxGone) {
        e.gone.push_back(key);
      } else {
        e.gone_overflow = true;
      }
    }
    return behind ? LineWake::kHandOver : LineWake::kNone;
  }
  if (e.predecessor.empty()) return LineWake::kRelease;
  return behind ? LineWake::kHandOver : LineWake::kNone;
}

void LockProtocol::MutexRound(Transport* t, std::shared_ptr<AcquireOp> op) {
  const bool in_line = !op->request.waiter_id.empty();
  const uint64_t lease_ms = op->request.lease_ms == 0 && in_line ? kNoLeaseWaiterMs : op->request.lease_ms;
  EnsureLease(t, lease_ms, op->deadline, [this, t, op](Status s, int64_t lease) {
    if (!s.ok()) return op->done(s, AcquireAttempt());
    Count(lease, op->key);  // before it is sent: a renewal sweeping the lease must spare it
    MutexTxn(t, op, lease);
  });
}

void LockProtocol::MutexTxn(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease) {
  const std::string begin = LinePrefix(op->request.name), end = PrefixEnd(begin);
  const Json first = RangeFirstCreatedRequest(begin, end);
  const Json put = PutRequest(op->key, Stored(op->request.owner_value, op->request.value), lease);
  const bool in_line = !op->request.waiter_id.empty();
  // A single try (or an unfair waiter) puts its key only where no key is: it never stands in
  // line, and leaves nothing behind when refused. A waiter in line puts its key once (Go's
  // tryAcquire) and from then on reads where it stands: the first key, and the one right
  // before its own (its predecessor, whose deletion alone wakes it: WakeOf).
  Json compare, success, failure;
  int64_t my_revision = 0;
  if (!in_line) {
    compare = Json::array({CompareRangeEmpty(begin, end)});
    success = Json::array({put});
    failure = Json::array({first});
  } else {
    my_revision = Attempting(op->request.waiter_id);
    compare = Json::array({CompareCreateEqual(op->key, 0)});
    success = Json::array({RangeLastCreatedRequest(begin, end, 0), put, first});
    failure = Json::array({RangeKeyRequest(op->key)});
    if (my_revision > 0) failure.push_back(RangeLastCreatedRequest(begin, end, my_revision - 1));
    failure.push_back(first);
  }
  t->Call(kMutexTxn, TxnBody(compare, success, failure), op->deadline,
          [this, t, op, lease, in_line, my_revision](CallResult r) {
    TxnAnswer txn;
    if (SettledFailure(t, op, lease, r, &txn)) return;
    KeyValue mine;  // our key as it stands (create_revision 0: none)
    const KeyValue* head = nullptr;
    const KeyValue* before = nullptr;  // the key right before ours (a waiter's)
    const std::vector<KeyValue>& kvs = txn.kvs;
    if (!in_line) {
      if (!kvs.empty()) head = &kvs[0];
      if (txn.succeeded) {
        mine.create_revision = txn.revision;  // the put's
        mine.lease = lease;
      } else if (head != nullptr && head->key == op->key && OwnerPart(head->value) == op->request.owner_value) {
        mine = *head;  // an earlier try of this very acquire landed (its answer was lost)
      }
    } else if (txn.succeeded) {  // [before?, head]: head is there (ours at least)
      mine.create_revision = txn.revision;
      mine.lease = lease;
      if (!kvs.empty()) head = &kvs.back();
      if (kvs.size() > 1) before = &kvs[0];
    } else {  // [ours, before? (asked when our revision was known), head]
      if (!kvs.empty() && kvs[0].key == op->key) mine = kvs[0];
      if (kvs.size() > 1) head = &kvs.back();
      if (kvs.size() > 2 && my_revision > 0) before = &kvs[1];
      if (mine.create_revision != 0 && OwnerPart(mine.value) != op->request.owner_value) {
        Uncount(lease, op->key);
        return op->done(Status::BackendError(config_->Describe() + ": lock '" + op->request.name + "': key " +
                                             ServerText(op->key) + " holds another owner's value (written by hand?)"),
                        AcquireAttempt());
      }
      // Asked by our last known revision: a key made again since has another one.
      if (before != nullptr && before->create_revision >= mine.create_revision) before = nullptr;
    }
    // Go's rule: the key created first holds the lock; with none there (ours just went), ours.
    const bool first_is_ours =
        mine.create_revision != 0 && (head == nullptr || head->create_revision == mine.create_revision);
    if (first_is_ours) {
      mine.key = op->key;
      return MutexWon(t, op, lease, std::move(mine), txn.revision);
    }
    if (!in_line || mine.create_revision == 0) {
      Uncount(lease, op->key);
      return RefusedBy(t, op, head == nullptr ? std::vector<int64_t>() : std::vector<int64_t>{head->lease});
    }
    const std::string predecessor = before != nullptr ? before->key : std::string();
    const int64_t holder_lease = head != nullptr ? head->lease : 0;  // not ours first: head is there
    // A waiting key on a lease the client no longer keeps alive (replaced after an unknown
    // outcome) would lapse, and its place with it: moved onto this attempt's lease, which keeps
    // its create revision (its place).
    if (lease != 0 && mine.lease != lease) {
      return t->Call(kMutexTxn, IfOwnedMoveTxn(op->key, mine.create_revision, lease), op->deadline,
                     [this, t, op, lease, mine, predecessor, holder_lease](CallResult r) mutable {
        TxnAnswer moved;
        if (r.status.ok() && ReadTxn(r.answer, &moved).ok() && moved.succeeded) mine.lease = lease;
        StandInLine(t, op, lease, mine, predecessor, holder_lease);
      });
    }
    StandInLine(t, op, lease, mine, predecessor, holder_lease);
  });
}

void LockProtocol::StandInLine(Transport* t, std::shared_ptr<AcquireOp> op, int64_t lease, const KeyValue& mine,
                               const std::string& predecessor, int64_t holder_lease) {
  const bool went = InLine(op->request, op->key, lease, mine, predecessor);
  if (went) {
    // The key before ours went while we asked, before we could listen for it: read again, or,
    // out of reads or time, try again at once (holder_ttl_ms 0) rather than sleep on a wake
    // that already came.
    if (++op->joins < kMaxLineReads && Now() < op->deadline) return MutexRound(t, op);
    return RefusedBy(t, op, {});
  }
  RefusedBy(t, op, {holder_lease});  // the first key's (0: it has no lease: never expires)
}

void LockProtocol::MutexWon(Transport* t, std::shared_ptr<AcquireOp> op, int64_t sent_lease, KeyValue mine,
                            int64_t token) {
  // A waiter's key may hang elsewhere than the hold needs: on the waiting lease of a hold
  // without one, or on a lease this client no longer keeps alive (replaced meanwhile). Moved in
  // one conditional put, which keeps the key's create revision (its place) and value.
  const int64_t wanted = op->request.lease_ms == 0 ? 0 : sent_lease;
  // Out of line once the key is counted where the hold keeps it (Won moves the attempt's count
  // there): a renewal's sweep never finds it uncounted in between.
  const std::string waiter = op->request.waiter_id;
  if (mine.lease == wanted) {
    Won(t, op, sent_lease, mine.lease, token, mine.create_revision);
    OutOfLine(waiter);
    return;
  }
  t->Call(kMutexTxn, IfOwnedMoveTxn(op->key, mine.create_revision, wanted), op->deadline,
          [this, t, op, sent_lease, mine, wanted, token, waiter](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (r.status.ok() && txn.succeeded) {
      Won(t, op, sent_lease, wanted, token, mine.create_revision);
      OutOfLine(waiter);
      return;
    }
    Uncount(sent_lease, op->key);
    OutOfLine(waiter);
    if (r.status.ok()) {  // the key went meanwhile (its lease ran out): not held, try again
      AcquireAttempt attempt;
      attempt.holder_ttl_ms = 0;
      return op->done(Status::Ok(), attempt);
    }
    // Moved or not, nobody will hold it: give it back.
    if (background_) background_(kMutexTxn, IfValueDeleteTxn(op->key, Stored(op->request.owner_value, op->request.value)));
    op->done(r.status, AcquireAttempt());
  });
}

void LockProtocol::LeaveLine(Transport* t, const LockRequest& request, TimePoint deadline, Done done) {
  const std::string key = HoldKey(request.name, request.kind, request.permits, request.take, request.owner_value);
  const int64_t lease = OutOfLine(request.waiter_id);
  // Our key, whatever its place: were it first by now, this is the hold given back.
  std::string body = IfValueDeleteTxn(key, Stored(request.owner_value, request.value));
  t->Call(kMutexTxn, body, deadline, [this, lease, body, done = std::move(done)](CallResult r) {
    if (!r.status.ok()) {
      // Not deleted, or not known to be: sent again in the background, and its lease takes no
      // new locks, so that the renewals of those on it sweep the key (it is no longer counted).
      if (background_) background_(kMutexTxn, body);
      if (lease > 0) Forget(lease);
    }
    done(r.status);
  });
}

void LockProtocol::InspectMutex(Transport* t, const std::string& name, TimePoint deadline,
                                std::function<void(Status, LockInfo)> done) {
  const std::string begin = LinePrefix(name);
  const Json reads = Json::array({RangeFirstCreatedRequest(begin, PrefixEnd(begin))});
  t->Call(kMutexTxn, TxnBody(Json::array(), reads, Json()), deadline,
          [this, t, begin, deadline, done = std::move(done)](CallResult r) {
    TxnAnswer txn;
    if (r.status.ok()) r.status = ReadTxn(r.answer, &txn);
    if (!r.status.ok()) return done(r.status, LockInfo());
    if (txn.kvs.empty()) return done(Status::Ok(), LockInfo());
    const KeyValue holder = txn.kvs.front();
    HolderTtl(t, holder.lease, deadline, [begin, holder, done](Status s, int64_t ttl_ms, int64_t) {
      if (!s.ok()) return done(s, LockInfo());
      LockInfo info;
      HolderInfo h;
      const std::string owner_value(OwnerPart(holder.value));
      if (holder.key == begin + HoldId(owner_value)) {  // dlock's
        h.owner = OwnerLabel(owner_value);
        h.value = ValuePart(holder.value).substr(0, kMaxValueBytes);
      } else {  // etcdctl lock, Go's Mutex, the v3lock service: their key is all they show
        h.owner = "etcd lock key " + ServerText(holder.key, 256);
      }
      h.remaining_ms = holder.lease == 0 ? -1 : ttl_ms;
      h.fencing_token = 0;  // a read's revision when it was won: kept by its holder alone
      // dlock's HoldId, or etcdctl's lease id: what follows NAME/ (a server that answered a key
      // outside the range asked for gets its whole key), at most 256 bytes.
      const bool under = holder.key.compare(0, begin.size(), begin) == 0;
      h.hold_id = holder.key.substr(under ? begin.size() : 0, 256);
      info.holders.push_back(std::move(h));
      done(Status::Ok(), std::move(info));
    });
  });
}

}  // namespace dlock::etcd
