// redlock://: a lock held on a quorum (N/2 + 1) of N independent Redis masters. Each master
// runs the scripts one Redis runs (lock_ops.h: the operations are the same, written once); this
// file asks every master at once and counts the answers.
//
// What it promises (docs/redlock.md): an acquire succeeds when a quorum granted it and the
// lease's validity (lease - elapsed - drift, on the monotonic clock from the send) is still
// positive; otherwise what was won is given back on every master before the call returns.
// Release and extend go to every master; a renewal confirmed by fewer than a quorum before the
// local deadline loses the lock, and the loss is reported. The token is the greatest the
// granting masters issued, written back to them before it is handed out, so a later quorum
// (which shares a master with this one) issues a greater one, as long as no master forgets its
// counter: independent masters cannot promise more, and Capabilities() says so (no
// kCapFencingStrict). Shared holds, as one Redis has them. No semaphores (independent counts cannot bound the holders across
// masters: with 3 masters and 2 permits, three holders can each win a different pair) and no
// fair line (each master would hand the lock to its own first waiter).
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/token.h"
#include "loop/event_loop.h"
#include "redis/lock_ops.h"
#include "redis/topology/node_channel.h"
#include "redis/redis_backend.h"
#include "redis/redis_url.h"

namespace dlock::redis {
namespace {

// One master's answer to one call.
template <typename R>
struct Vote {
  enum class State { kNotAsked, kPending, kAnswered };
  State state = State::kNotAsked;
  Status status = Status::IoError("no answer");
  R out{};
};
template <typename R>
using Votes = std::vector<Vote<R>>;

// "2 of 3 masters": counts in words, and the failures named. Masters asked that have not
// answered yet are pending (a call may be decided before they answer); those not asked count
// nowhere.
struct Count {
  size_t yes = 0, no = 0, failed = 0, pending = 0;
  std::string failures;  // "redis h:p: why; ..."
  template <typename R, typename IsYes, typename IsNo>
  static Count Of(const Votes<R>& votes, IsYes is_yes, IsNo is_no) {
    Count c;
    for (const Vote<R>& v : votes) {
      if (v.state == Vote<R>::State::kNotAsked) continue;
      if (v.state == Vote<R>::State::kPending) {
        ++c.pending;
      } else if (is_yes(v)) {
        ++c.yes;
      } else if (is_no(v)) {
        ++c.no;
      } else {
        ++c.failed;
        c.failures += (c.failures.empty() ? "" : "; ") + v.status.message();
      }
    }
    return c;
  }
  // ", 1 did not answer in time", or nothing.
  std::string Unanswered() const {
    return pending == 0 ? "" : ", " + std::to_string(pending) + " did not answer in time";
  }
};

// How the votes of each call count (yes, no, and anything else failed).
template <typename R>
bool Answered(const Vote<R>& v) { return v.status.ok(); }
template <typename R>
bool SaidNotHeld(const Vote<R>& v) { return v.status.code() == Code::kNotHeld; }
inline bool Granted(const Vote<AcquireAttempt>& v) { return v.status.ok() && v.out.acquired; }
template <typename R>
bool Never(const Vote<R>&) { return false; }

// When a call is decided. Each rule is asked again as answers come in, and the call ends as
// soon as more answers could not change its outcome: a master that is paused or cut off costs
// nothing while a quorum answers. What was sent to it still runs there, in order, if it comes
// back: a late grant is renewed, released or left to expire like any other hold.
//
// An acquire: once a quorum granted, or every master answered. A master yet to answer while
// the others have decided nothing (a quorum of them answered, or too few are left to grant)
// gets a grace of twice what the others took (at least kStraggleMin), not its whole timeout;
// then the attempt ends as the votes stand (StartStraggleTimer). Waiting the timeout would hold
// what the attempt won on the others meanwhile: with one master of three paused, competing
// attempts that split the other two would each hold one until the paused master's timeout,
// and none reach a quorum (issue 30). A master cut off this way may still grant: the
// give-back sent to it follows the acquire on the same connection, so it runs there after it,
// however late.
struct AcquireDecided {
  size_t quorum;
  bool operator()(const Votes<AcquireAttempt>& votes) const {
    return Count::Of(votes, Granted, Answered<AcquireAttempt>).yes >= quorum;
  }
  bool Straggling(const Votes<AcquireAttempt>& votes) const {
    Count c = Count::Of(votes, Granted, Answered<AcquireAttempt>);
    return c.pending > 0 && (c.yes + c.no + c.failed >= quorum || c.yes + c.pending < quorum);
  }
};
constexpr Millis kStraggleMin{20};
// The token's write-back: once the confirmations still `needed` for a quorum came (the master
// that issued the token is not asked), or too few can.
struct FenceDecided {
  size_t needed;
  bool operator()(const Votes<NoResult>& votes) const {
    Count c = Count::Of(votes, Answered<NoResult>, Never<NoResult>);
    return c.yes >= needed || c.yes + c.pending < needed;
  }
};
// Release and extend: Ok (a quorum), NotHeld (more than N - quorum deny it) or failed, once it
// cannot change.
struct SettledDecided {
  size_t masters, quorum;
  bool operator()(const Votes<NoResult>& votes) const {
    Count c = Count::Of(votes, Answered<NoResult>, SaidNotHeld<NoResult>);
    return c.yes >= quorum || c.no > masters - quorum ||
           (c.yes + c.pending < quorum && c.no + c.pending <= masters - quorum);
  }
};
// Every master's answer counts: a failed acquire's give-back (no key left behind), and Inspect
// (two that answered may disagree).
template <typename R>
struct EveryAnswer {
  bool operator()(const Votes<R>&) const { return false; }
};

// Relays one watcher's release messages from every master: live once a quorum of the
// masters' subscriptions are, and woken once a quorum of masters published a release.
class QuorumWatch {
 public:
  QuorumWatch(ReleaseWatcher* target, size_t masters, size_t quorum)
      : target_(target), quorum_(quorum), live_(masters, false) {
    for (size_t i = 0; i < masters; ++i) relays_.emplace_back(this, i);
  }
  ReleaseWatcher* relay(size_t master) { return &relays_[master]; }

 private:
  class Relay : public ReleaseWatcher {
   public:
    Relay(QuorumWatch* owner, size_t master) : owner_(owner), master_(master) {}
    void OnWatchReady(bool live) override { owner_->Ready(master_, live); }
    void OnReleased() override { owner_->Released(); }
    // Every master carries a request: each is passed on, and the holder's listener hears the
    // first (it drops repeats by id).
    void OnReleaseRequested(const std::string& id, const std::string& reason) override {
      owner_->target_->OnReleaseRequested(id, reason);
    }

   private:
    QuorumWatch* owner_;
    size_t master_;
  };

  void Ready(size_t master, bool live) {
    std::lock_guard<std::mutex> lock(mu_);
    live_[master] = live;
    const bool now = static_cast<size_t>(std::count(live_.begin(), live_.end(), true)) >= quorum_;
    // A master lost while a quorum stays live changes nothing: the others' messages still make
    // a quorum. Without one, every failure is told, with a wake-up: the waiter tries again.
    if (now == told_live_ && (now || live)) return;
    told_live_ = now;
    target_->OnWatchReady(now);
    if (!now) target_->OnReleased();
  }
  void Released() {
    std::lock_guard<std::mutex> lock(mu_);
    if (++messages_ < quorum_) return;
    messages_ = 0;
    target_->OnReleased();
  }

  ReleaseWatcher* target_;
  const size_t quorum_;
  std::mutex mu_;
  std::vector<bool> live_;
  bool told_live_ = false;
  size_t messages_ = 0;
  std::vector<Relay> relays_;  // never resized after construction: the masters hold pointers
};

class RedlockBackend : public Backend {
 public:
  RedlockBackend(EventLoop* loop, const RedlockConfig& config)
      : loop_(loop),
        prefix_(config.node.params.prefix),
        quorum_(config.quorum()),
        // A call is two round trips at most (a script that asks for all its keys), each bounded
        // by the timeouts; the slack is for a busy loop thread.
        blocking_bound_(Millis(2 * (int64_t{config.node.params.connect_timeout_ms} +
                                    config.node.params.timeout_ms) + 1000)),
        connections_(config.node.connections) {
    for (const HostPort& master : config.masters) {
      masters_.push_back(std::make_unique<NodeChannel>(loop, config.At(master)));
    }
  }

  Status Check() override {
    Votes<NoResult> votes(masters_.size());
    for (size_t i = 0; i < masters_.size(); ++i) {
      votes[i].state = Vote<NoResult>::State::kAnswered;
      votes[i].status = masters_[i]->Ping();
    }
    Count c = Count::Of(votes, Answered<NoResult>, Never<NoResult>);
    if (c.yes >= quorum_) return Status::Ok();
    return Status::IoError("redlock: " + std::to_string(c.yes) + " of " + Masters() +
                           " answered, a quorum is " + std::to_string(quorum_) + ": " + c.failures);
  }

  Status TryAcquire(const LockRequest& request, AcquireAttempt* out) override {
    if (CanWaitOnLoop()) {
      // The whole attempt (acquire, write-back, any give-back) in one trip to the loop thread:
      // each trip costs two thread switches.
      std::pair<Status, AcquireAttempt> result;
      bool posted = false;
      if (RunOnLoop(
              [this, request](auto finish) {
                TryAcquireAsync(request, [finish](const Status& s, const AcquireAttempt& attempt) {
                  finish(std::make_pair(s, attempt));
                });
              },
              3 * blocking_bound_, &result, &posted)) {
        *out = result.second;
        return result.first;
      }
      if (posted) {
        return Status::IoError("redlock: acquire of lock '" + request.name + "': no answer within " +
                               std::to_string((3 * blocking_bound_).count()) + " ms");
      }
    }
    const TimePoint sent = Now();
    Verdict v = JudgeAcquire(
        request, Ask<AcquireAttempt>(
                     AllMasters(), [&](size_t) { return AcquireOp(prefix_, request); }, AcquireDecided{quorum_}));
    if (v.acquired()) {
      auto fenced = Ask<NoResult>(
          v.behind, [&](size_t) { return FenceOp(prefix_, HoldRef::Of(request), v.attempt.fencing_token); },
          FenceDecided{StillNeeded(v)});
      v = JudgeFence(request, std::move(v), fenced, sent);
    }
    if (v.give_back) {
      // Before returning: no key is left behind a failed acquire.
      (void)Ask<NoResult>(
          v.give_back_to, [&](size_t) { return ReleaseOp(prefix_, HoldRef::Of(request)); },
          EveryAnswer<NoResult>{});
    }
    *out = v.attempt;
    return v.status;
  }

  Status Release(const LockState& lock) override {
    return JudgeRelease(lock.name, Ask<NoResult>(
                                       AllMasters(),
                                       [&](size_t) { return ReleaseOp(prefix_, HoldRef::Of(lock)); },
                                       SettledDecided{masters_.size(), quorum_}));
  }

  void ReleaseAll(const std::vector<std::shared_ptr<LockState>>& locks) override {
    std::vector<ScriptCall> calls;
    calls.reserve(locks.size());
    for (const auto& l : locks) {
      auto op = ReleaseOp(prefix_, HoldRef::Of(*l));
      calls.push_back(std::move(op).TakeAllKeys());
    }
    for (auto& master : masters_) master->EvalAll(calls);
  }

  void TryAcquireAsync(const LockRequest& request, AttemptCallback done) override {
    const TimePoint sent = Now();
    AskAsync<AcquireAttempt>(
        AllMasters(), [this, request](size_t) { return AcquireOp(prefix_, request); },
        AcquireDecided{quorum_},
        [this, request, sent, done = std::move(done)](Votes<AcquireAttempt> votes) mutable {
          Verdict v = JudgeAcquire(request, votes);
          if (!v.acquired()) return Finish(request, std::move(v), std::move(done));
          // Read before v moves into the callback below.
          const std::vector<size_t> behind = v.behind;
          const uint64_t token = v.attempt.fencing_token;
          const size_t needed = StillNeeded(v);
          AskAsync<NoResult>(
              behind, [this, request, token](size_t) { return FenceOp(prefix_, HoldRef::Of(request), token); },
              FenceDecided{needed},
              [this, request, sent, v = std::move(v), done = std::move(done)](
                  Votes<NoResult> fenced) mutable {
                Finish(request, JudgeFence(request, std::move(v), fenced, sent), std::move(done));
              },
              std::max(kStraggleMin, 2 * std::chrono::duration_cast<Millis>(Now() - sent)));
        });
  }

  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done) override {
    const std::string name = lock->name;
    AskAsync<NoResult>(
        AllMasters(), [this, lock](size_t) { return ReleaseOp(prefix_, HoldRef::Of(*lock)); },
        SettledDecided{masters_.size(), quorum_},
        [this, name, done = std::move(done)](Votes<NoResult> votes) {
          done(JudgeRelease(name, votes));
        });
  }

  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) override {
    const std::string name = lock->name;
    AskAsync<NoResult>(
        AllMasters(),
        [this, lock, lease_ms](size_t) { return ExtendOp(prefix_, HoldRef::Of(*lock), lease_ms); },
        SettledDecided{masters_.size(), quorum_},
        [this, name, done = std::move(done)](Votes<NoResult> votes) {
          done(JudgeExtend(name, votes));
        });
  }

  void RenewBatch(std::vector<RenewRequest> batch, RenewSink* sink) override {
    // Every master's renewals of this round leave together: one round trip per master.
    for (auto& request : batch) {
      AskAsync<NoResult>(
          AllMasters(),
          [this, request](size_t) {
            return ExtendOp(prefix_, HoldRef::Of(*request.lock), request.lease_ms);
          },
          SettledDecided{masters_.size(), quorum_},
          [this, sink, request](Votes<NoResult> votes) {
            sink->OnRenewed(request, JudgeExtend(request.lock->name, votes));
          });
    }
  }

  Status SetValue(const LockState& lock, const std::string& value) override {
    // Every master's answer is awaited (a quorum's would decide it): a read right after it, by
    // anyone, then finds the new value on every master that took it, not the old one on a
    // master still behind.
    return JudgeExtend(lock.name,
                       Ask<NoResult>(
                           AllMasters(),
                           [&](size_t) { return SetValueOp(prefix_, HoldRef::Of(lock), value); },
                           EveryAnswer<NoResult>{}),
                       "the value's write");
  }

  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) override {
    const std::string name = lock->name;
    AskAsync<NoResult>(
        AllMasters(), [this, lock, value](size_t) { return SetValueOp(prefix_, HoldRef::Of(*lock), value); },
        EveryAnswer<NoResult>{},
        [this, name, done = std::move(done)](Votes<NoResult> votes) {
          done(JudgeExtend(name, votes, "the value's write"));
        });
  }

  Status Inspect(const std::string& name, LockInfo* out) override {
    // Every master's view counts here (two that answered may disagree), so it waits for all.
    return JudgeInspect(name, Ask<LockInfo>(AllMasters(), [&](size_t) { return InspectOp(prefix_, name); },
                                            EveryAnswer<LockInfo>{}),
                        out);
  }

  void InspectAsync(const std::string& name, InspectCallback done) override {
    AskAsync<LockInfo>(
        AllMasters(), [this, name](size_t) { return InspectOp(prefix_, name); }, EveryAnswer<LockInfo>{},
        [this, name, done = std::move(done)](Votes<LockInfo> votes) {
          LockInfo info;
          Status s = JudgeInspect(name, votes, &info);
          done(s, std::move(info));
        });
  }

  // Every master breaks it: a hold left on a quorum would still renew. Ok once a quorum broke
  // it (the others' holds cannot make a quorum: they end with their leases); the holds any
  // master broke (one by its id), each with the token most masters had (the one handed out: a
  // quorum has it once written back; a master that granted late has its own) and the longest
  // lease left; closed as long as more than N - quorum masters stay closed (no quorum can grant
  // it before).
  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out) override {
    Votes<BreakResult> votes = Ask<BreakResult>(
        AllMasters(), [&](size_t) { return BreakOp(prefix_, name, reason, now); }, EveryAnswer<BreakResult>{});
    Count c = Count::Of(votes, Answered<BreakResult>, Never<BreakResult>);
    if (c.yes < quorum_) return NoQuorum("break of lock '" + name + "'", c);
    *out = BreakResult();
    std::map<std::string, HolderInfo> broken;
    std::map<std::string, std::map<uint64_t, size_t>> tokens;  // id -> token -> masters
    std::vector<int64_t> closed;
    for (const Vote<BreakResult>& v : votes) {
      if (!v.status.ok()) continue;
      closed.push_back(v.out.closed_ms);
      if (!v.out.holders.empty()) {
        out->kind = v.out.kind;
        out->permits = v.out.permits;
      }
      for (const HolderInfo& h : v.out.holders) {
        ++tokens[h.hold_id][h.fencing_token];
        auto [it, fresh] = broken.try_emplace(h.hold_id, h);
        auto rank = [](int64_t t) { return t == -1 ? INT64_MAX : t; };
        if (!fresh && rank(h.remaining_ms) > rank(it->second.remaining_ms)) it->second.remaining_ms = h.remaining_ms;
      }
    }
    for (auto& [id, h] : broken) {
      const auto& seen = tokens[id];
      h.fencing_token = std::max_element(seen.begin(), seen.end(), [](const auto& a, const auto& b) {
                          return a.second < b.second;
                        })->first;
      out->holders.push_back(std::move(h));
    }
    std::sort(closed.begin(), closed.end(), std::greater<int64_t>());
    const size_t refusers = masters_.size() - quorum_ + 1;  // closed masters that stop a quorum
    out->closed_ms = refusers <= closed.size() ? closed[refusers - 1] : 0;
    if (out->closed_ms > 0) out->closed_by = "broken";
    return Status::Ok();
  }

  // Every master is asked, each publishing the request where the name has holders there (a
  // holder listens on every master): Ok once one answered; the holds asked are the most any
  // master has.
  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) override {
    std::string id;
    Status s = NewOwnerToken(&id);
    if (!s.ok()) return s;
    Votes<Asked> votes = Ask<Asked>(
        AllMasters(), [&](size_t) { return RequestReleaseOp(prefix_, name, id, reason); },
        EveryAnswer<Asked>{});
    Count c = Count::Of(votes, Answered<Asked>, Never<Asked>);
    if (c.yes == 0) return NoQuorum("release request for lock '" + name + "'", c);
    for (const Vote<Asked>& v : votes) {
      if (v.status.ok()) *asked = std::max(*asked, v.out.holds);
    }
    return Status::Ok();
  }
  void WatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    Watch(name, watcher);
  }
  void UnwatchReleaseRequests(const std::string& name, ReleaseWatcher* watcher) override {
    Unwatch(name, watcher);
  }

  // What the masters' views of a name add up to.
  Status JudgeInspect(const std::string& name, const Votes<LockInfo>& votes, LockInfo* out) const {
    Count c = Count::Of(votes, Answered<LockInfo>, Never<LockInfo>);
    if (c.yes < quorum_) return NoQuorum("inspect of lock '" + name + "'", c);
    // The holds a quorum of masters list alike (kind, size, owner label and token: every
    // master that granted a hold keeps its token once it was written back; one that granted
    // late, after the quorum, keeps its own). The remaining lease shown is how long a quorum
    // still keeps the hold: the quorum-th longest of theirs. Not the least: a master that is
    // merely slow may not have run an extend yet that a quorum already confirmed. The value
    // shown is the one most of them keep (a write of a new one may have reached only some).
    using Key = std::tuple<int, uint32_t, std::string, uint64_t>;
    struct Seen {
      HolderInfo holder;
      std::vector<int64_t> remaining;
      std::map<std::string, size_t> values;  // value -> how many masters keep it
    };
    std::map<Key, Seen> seen;
    for (const Vote<LockInfo>& v : votes) {
      if (!v.status.ok()) continue;
      for (const HolderInfo& h : v.out.holders) {
        Seen& entry = seen[Key{static_cast<int>(v.out.kind), v.out.permits, h.owner, h.fencing_token}];
        entry.holder = h;
        entry.remaining.push_back(h.remaining_ms < 0 ? INT64_MAX : h.remaining_ms);  // -1: no expiry
        ++entry.values[h.value];
      }
    }
    *out = LockInfo();
    JudgeMarkers(votes, out);
    for (auto& [key, entry] : seen) {
      auto& [holder, remaining, values] = entry;
      if (remaining.size() < quorum_) continue;
      holder.value = std::max_element(values.begin(), values.end(), [](const auto& a, const auto& b) {
                       return a.second < b.second;
                     })->first;
      std::sort(remaining.begin(), remaining.end(), std::greater<int64_t>());
      holder.remaining_ms = remaining[quorum_ - 1] == INT64_MAX ? -1 : remaining[quorum_ - 1];
      out->kind = static_cast<LockKind>(std::get<0>(key));
      out->permits = std::get<1>(key);
      out->holders.push_back(holder);
    }
    if (!out->holders.empty()) {  // a marker counts only while nobody holds the name
      out->closed_ms = 0;
      out->closed_by.clear();
    }
    return Status::Ok();
  }

  // The break records any master keeps (a holder refused by one learns why), and the marker
  // that keeps a quorum from granting: the (N - quorum + 1)-th longest closed time.
  void JudgeMarkers(const Votes<LockInfo>& votes, LockInfo* out) const {
    std::vector<std::pair<int64_t, std::string>> closed;
    std::set<uint64_t> tokens;
    for (const Vote<LockInfo>& v : votes) {
      if (!v.status.ok()) continue;
      closed.emplace_back(v.out.closed_ms, v.out.closed_by);
      for (const BrokenRecord& b : v.out.broken) {
        if (tokens.insert(b.fencing_token).second && out->broken.size() < kMaxBrokenRecords) {
          out->broken.push_back(b);
        }
      }
    }
    std::sort(closed.begin(), closed.end(), std::greater<>());
    const size_t refusers = masters_.size() - quorum_ + 1;
    if (refusers <= closed.size() && closed[refusers - 1].first > 0) {
      out->closed_ms = closed[refusers - 1].first;
      out->closed_by = closed[refusers - 1].second;
    }
  }

  // Shared holds are sound on a quorum: a writer's quorum and a reader's always share a
  // master, which refuses one of them; a waiting writer announces itself on every master, so
  // new readers find it on a quorum. Semaphores and a fair line are not (see the top).
  uint32_t Capabilities() const override {
    return kCapNotifies | kCapShared | kCapBreak | kCapMinHold | kCapLockDelay | kCapReleaseRequest;
  }

  void Watch(const std::string& name, ReleaseWatcher* watcher) override {
    const std::string channel = LockKeys::Channel(prefix_, name);
    QuorumWatch* watch;
    {
      std::lock_guard<std::mutex> lock(watches_mu_);
      auto& slot = watches_[{channel, watcher}];
      if (slot != nullptr) return;  // already watching
      slot = std::make_unique<QuorumWatch>(watcher, masters_.size(), quorum_);
      watch = slot.get();
    }
    for (size_t i = 0; i < masters_.size(); ++i) masters_[i]->Watch(channel, watch->relay(i));
  }

  void Unwatch(const std::string& name, ReleaseWatcher* watcher) override {
    const std::string channel = LockKeys::Channel(prefix_, name);
    std::unique_ptr<QuorumWatch> watch;
    {
      std::lock_guard<std::mutex> lock(watches_mu_);
      auto it = watches_.find({channel, watcher});
      if (it == watches_.end()) return;
      watch = std::move(it->second);
      watches_.erase(it);
    }
    for (size_t i = 0; i < masters_.size(); ++i) masters_[i]->Unwatch(channel, watch->relay(i));
  }

  size_t PendingAsync() const override {
    size_t n = 0;
    for (const auto& master : masters_) n += master->PendingAsync();
    return n;
  }

  void ShutdownOnLoop() override {
    for (auto& master : masters_) master->ShutdownOnLoop();
  }
  int64_t OpenConnections() const override { return connections_ ? connections_->open() : -1; }

 private:
  // An acquire's outcome across the masters.
  struct Verdict {
    Status status;
    AcquireAttempt attempt;
    std::vector<size_t> winners;       // the masters that granted
    std::vector<size_t> behind;        // of those, the ones whose counter is below the token
    std::vector<size_t> give_back_to;  // all but those that refused: a failed call may have run
    std::vector<size_t> stragglers;    // winners that stopped answering (the give-back does not wait)
    bool give_back = false;            // what they granted goes back
    bool acquired() const { return status.ok() && attempt.acquired; }
  };

  std::string Masters() const { return std::to_string(masters_.size()) + " masters"; }
  std::vector<size_t> AllMasters() const {
    std::vector<size_t> all(masters_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }
  Status NoQuorum(const std::string& what, const Count& c) const {
    return Status::IoError("redlock: " + what + ": " + std::to_string(c.failed) + " of " + Masters() +
                           " failed, so no quorum (" + std::to_string(quorum_) +
                           ") can answer: " + c.failures);
  }

  Verdict JudgeAcquire(const LockRequest& request, const Votes<AcquireAttempt>& votes) const {
    Verdict v;
    // The refusing masters' holder_ttl_ms, and what closed the name there if a marker did.
    std::vector<std::pair<int64_t, std::string>> waits;
    for (size_t i = 0; i < votes.size(); ++i) {
      const Vote<AcquireAttempt>& vote = votes[i];
      if (vote.state != Vote<AcquireAttempt>::State::kAnswered || !vote.status.ok()) {
        v.give_back_to.push_back(i);
        if (vote.state != Vote<AcquireAttempt>::State::kAnswered) continue;
      }
      if (vote.status.code() == Code::kInvalidArgument && v.status.ok()) v.status = vote.status;
      if (!vote.status.ok()) continue;
      if (!vote.out.acquired) {
        waits.emplace_back(vote.out.holder_ttl_ms, vote.out.closed_by);
        continue;
      }
      v.winners.push_back(i);
      v.give_back_to.push_back(i);
      v.attempt.fencing_token = std::max(v.attempt.fencing_token, vote.out.fencing_token);
      if (vote.out.remaining_ms >= 0 &&
          (v.attempt.remaining_ms < 0 || vote.out.remaining_ms < v.attempt.remaining_ms)) {
        v.attempt.remaining_ms = vote.out.remaining_ms;
      }
    }
    Count c = Count::Of(votes, Granted, Answered<AcquireAttempt>);
    // What the masters that granted won goes back, and a release follows the acquire to those
    // yet to answer, which may grant it late.
    v.give_back = !v.winners.empty() || c.pending > 0;
    if (!v.status.ok()) return v;  // the name is held as another sort: said by the master
    if (c.yes >= quorum_) {
      v.attempt.acquired = true;
      v.give_back = false;
      // The master that issued the token has its counter there already (acquire.lua set it).
      for (size_t i : v.winners) {
        if (votes[i].out.fencing_token < v.attempt.fencing_token) v.behind.push_back(i);
      }
      return v;
    }
    v.attempt = AcquireAttempt();
    if (c.failed > masters_.size() - quorum_) {
      v.status = Status::IoError("redlock: acquire of lock '" + request.name + "': " +
                                 std::to_string(c.yes) + " of " + Masters() + " granted, " +
                                 std::to_string(c.no) + " refused, " + std::to_string(c.failed) +
                                 " failed" + c.Unanswered() + " (a quorum is " + std::to_string(quorum_) +
                                 "): " + c.failures);
      return v;
    }
    if (c.yes + c.pending >= quorum_) {
      // Cut short while stragglers could still have made a quorum: the attempt split the
      // masters with others (or one is slow). Everyone's grants go back at once; retry after
      // a short jittered pause, so that competing attempts stop meeting.
      v.attempt.holder_ttl_ms = static_cast<int64_t>(RandomBetween(1, 2 * kStraggleMin.count()));
      v.attempt.why_not = "no quorum of " + Masters() + ": " + std::to_string(c.yes) + " granted, " +
                          std::to_string(c.no) + " refused, " + std::to_string(c.failed) + " failed" +
                          c.Unanswered() + " (given back at once; a quorum is " +
                          std::to_string(quorum_) + ")";
      return v;
    }
    // Refused. It may be free once enough of the refusing masters' holds end: with the masters
    // that granted (given back) and answered, `needed` more make a quorum.
    std::sort(waits.begin(), waits.end(), [](const auto& a, const auto& b) {
      auto rank = [](int64_t t) { return t == -1 ? INT64_MAX : std::max<int64_t>(t, 0); };
      return rank(a.first) < rank(b.first);
    });
    const size_t needed = quorum_ - c.yes;
    v.attempt.holder_ttl_ms = needed <= waits.size() ? waits[needed - 1].first : -2;
    // "Closed" only when the wait that decides is a marker's, not a holder's.
    if (needed <= waits.size()) v.attempt.closed_by = waits[needed - 1].second;
    return v;
  }

  // The write-back confirmations still needed for a quorum: the winners at the token count.
  size_t StillNeeded(const Verdict& v) const {
    const size_t at_token = v.winners.size() - v.behind.size();
    return at_token >= quorum_ ? 0 : quorum_ - at_token;
  }

  // After the write-back of the token: still a quorum, and still within the lease.
  Verdict JudgeFence(const LockRequest& request, Verdict v, const Votes<NoResult>& fenced,
                     TimePoint sent) const {
    Count c = Count::Of(fenced, Answered<NoResult>, Never<NoResult>);
    c.yes += v.winners.size() - v.behind.size();
    if (c.yes < quorum_ && c.yes + c.pending >= quorum_) {
      // Cut short: a master that granted stopped answering (StartStraggleTimer). The token
      // cannot be handed out; what was won goes back, and the attempt is retried soon.
      v.attempt = AcquireAttempt();
      v.attempt.holder_ttl_ms = static_cast<int64_t>(RandomBetween(1, 2 * kStraggleMin.count()));
      v.attempt.why_not = "the token went back to " + std::to_string(c.yes) + " of the " +
                          std::to_string(v.winners.size()) + " masters that granted it" +
                          c.Unanswered() + " (given back at once; a quorum is " +
                          std::to_string(quorum_) + ")";
      v.give_back = true;
      for (size_t i = 0; i < fenced.size(); ++i) {
        if (fenced[i].state == Vote<NoResult>::State::kPending) v.stragglers.push_back(i);
      }
      return v;
    }
    if (c.yes < quorum_) {
      v.status = Status::IoError("redlock: acquire of lock '" + request.name + "': the token went back to " +
                                 std::to_string(c.yes) + " of the " + std::to_string(v.winners.size()) +
                                 " masters that granted it" + c.Unanswered() + ", a quorum is " +
                                 std::to_string(quorum_) + ": " + c.failures);
      v.attempt = AcquireAttempt();
      v.give_back = true;
      return v;
    }
    if (request.lease_ms != 0 &&
        Now() - sent >= Millis(request.lease_ms) - LeaseDrift(request.lease_ms)) {
      // Granted too late to be of use: the lease is (nearly) over on the first master already.
      v.attempt = AcquireAttempt();
      v.attempt.holder_ttl_ms = 0;  // try again at once
      v.attempt.why_not = "a quorum of " + Masters() + " granted it after " +
                          std::to_string(std::chrono::duration_cast<Millis>(Now() - sent).count()) +
                          " ms, too late for its lease of " + std::to_string(request.lease_ms) +
                          " ms (the masters are too slow for it)";
      v.give_back = true;
    }
    return v;
  }

  Status JudgeRelease(const std::string& name, const Votes<NoResult>& votes) const {
    Count c = Count::Of(votes, Answered<NoResult>, SaidNotHeld<NoResult>);
    if (c.yes >= quorum_) return Status::Ok();
    if (c.no > masters_.size() - quorum_) {  // it cannot have been held by a quorum
      return Status::NotHeld("lock '" + name + "' is no longer held by this owner on a quorum of " +
                             Masters() + " (it was on " + std::to_string(c.yes) + ")");
    }
    return Status::IoError("redlock: release of lock '" + name + "': released on " +
                           std::to_string(c.yes) + " of " + Masters() + ", " +
                           std::to_string(c.failed) + " failed" + c.Unanswered() + ": " + c.failures);
  }

  Status JudgeExtend(const std::string& name, const Votes<NoResult>& votes,
                     const char* what = "renewal") const {
    Count c = Count::Of(votes, Answered<NoResult>, SaidNotHeld<NoResult>);
    if (c.yes >= quorum_) return Status::Ok();
    if (c.no > masters_.size() - quorum_) {
      return Status::NotHeld("lock '" + name + "' is no longer held by this owner on a quorum of " +
                             Masters() + " (still on " + std::to_string(c.yes) + ")");
    }
    return Status::IoError(std::string("redlock: ") + what + " of lock '" + name + "' reached " +
                           std::to_string(c.yes) + " of " + Masters() + " (a quorum is " +
                           std::to_string(quorum_) + ")" + c.Unanswered() + ": " + c.failures);
  }

  // Loop thread: the end of an async acquire; gives back what a failed one won. It waits for
  // the masters that granted (they just answered), never for one that has not answered or
  // failed: the release is sent to those too, behind the acquire, and not waited for.
  void Finish(const LockRequest& request, Verdict v, AttemptCallback done) {
    if (!v.give_back) return done(v.status, v.attempt);
    std::vector<size_t> winners;
    auto has = [](const std::vector<size_t>& set, size_t i) {
      return std::find(set.begin(), set.end(), i) != set.end();
    };
    for (size_t i : v.give_back_to) {
      if (has(v.winners, i) && !has(v.stragglers, i)) {
        winners.push_back(i);
      } else {
        RunAsync<NoResult>(masters_[i].get(), ReleaseOp(prefix_, HoldRef::Of(request)),
                           [](const Status&, NoResult) {});
      }
    }
    if (winners.empty()) return done(v.status, v.attempt);
    AskAsync<NoResult>(
        winners, [this, request](size_t) { return ReleaseOp(prefix_, HoldRef::Of(request)); },
        EveryAnswer<NoResult>{},
        [status = v.status, attempt = v.attempt, done = std::move(done)](Votes<NoResult>) {
          done(status, attempt);
        });
  }

  // Loop thread: make(i)'s operation on each master i of `which` at once; done(votes) once,
  // as soon as decided(votes) or every one answered (each bounded by its master's timeouts).
  // votes has an entry per master: those not asked are kNotAsked, those yet to answer
  // kPending.
  // grace (not 0): the call ends that long after it was sent even if undecided, with the votes
  // as they stand (the token's write-back: see StartStraggleTimer).
  template <typename R, typename MakeOp, typename Decided, typename Done>
  void AskAsync(const std::vector<size_t>& which, MakeOp make, Decided decided, Done done,
                Millis grace = Millis(0)) {
    struct Tally {
      Votes<R> votes;
      size_t waiting;
      Decided decided;
      std::optional<Done> done;  // reset once called: what it holds goes then, not at the last answer
      TimePoint sent;
      std::unique_ptr<Timer> straggle;  // an acquire's grace for stragglers (AcquireDecided)
    };
    auto tally = std::make_shared<Tally>(
        Tally{Votes<R>(masters_.size()), which.size(), std::move(decided), std::move(done), Now(), nullptr});
    for (size_t i : which) tally->votes[i].state = Vote<R>::State::kPending;
    if (which.empty()) {
      loop_->Post([tally] { (*tally->done)(std::move(tally->votes)); });
      return;
    }
    for (size_t i : which) {
      RunAsync<R>(masters_[i].get(), make(i), [this, tally, i](const Status& s, R out) {
        tally->votes[i] = {Vote<R>::State::kAnswered, s, std::move(out)};
        const bool all = --tally->waiting == 0;
        if (!tally->done) return;
        if (!(all || tally->decided(tally->votes))) {
          if constexpr (std::is_same_v<Decided, AcquireDecided>) {
            if (tally->straggle == nullptr && tally->decided.Straggling(tally->votes)) {
              StartStraggleTimer(tally, std::max(kStraggleMin, 2 * std::chrono::duration_cast<Millis>(
                                                                      Now() - tally->sent)));
            }
          }
          return;
        }
        if (tally->straggle != nullptr) tally->straggle->Cancel();
        Done finish = std::move(*tally->done);
        tally->done.reset();
        finish(all ? std::move(tally->votes) : tally->votes);
      });
    }
    if (grace.count() > 0 && tally->done) StartStraggleTimer(tally, grace);
  }

  // Loop thread: once the grace for an acquire's stragglers ends, it is decided with the votes
  // as they stand (AcquireDecided, and the token's write-back, which must not hold what the
  // acquire won while a master that stopped answering keeps it waiting either). The timer
  // holds the tally weakly: the answers still due keep it, and the timer goes with it.
  template <typename TallyPtr>
  void StartStraggleTimer(const TallyPtr& tally, Millis grace) {
    std::weak_ptr<typename TallyPtr::element_type> weak = tally;
    tally->straggle = std::make_unique<Timer>(loop_, [this, weak] {
      auto t = weak.lock();
      if (t == nullptr || !t->done) return;
      auto finish = std::move(*t->done);
      t->done.reset();
      finish(t->votes);
      loop_->Post([t] {});  // the tally (and this timer) never goes while its callback runs
    });
    tally->straggle->StartAfter(grace);
  }

  // Blocking, any thread: the same. With a loop thread of the library's own, the masters are
  // asked at once through it, and the call waits at most blocking_bound_ (each master's
  // answer is bounded by its timeouts; this bound holds even if the loop thread were stuck).
  // On that thread itself, or on a caller's event_base (whose loop may be waiting for this
  // very call), they are asked one after another, every one of them.
  template <typename R, typename MakeOp, typename Decided>
  Votes<R> Ask(const std::vector<size_t>& which, MakeOp make, Decided decided) {
    if (CanWaitOnLoop()) {
      std::vector<Op<R>> ops(masters_.size());
      for (size_t i : which) ops[i] = make(i);
      Votes<R> votes;
      bool posted = false;
      if (RunOnLoop(
              [this, which, ops = std::move(ops), decided](auto finish) {
                AskAsync<R>(which, [&ops](size_t i) { return ops[i]; }, decided, finish);
              },
              blocking_bound_, &votes, &posted)) {
        return votes;
      }
      if (posted) {
        votes.assign(masters_.size(), Vote<R>());
        for (size_t i : which) {
          votes[i].state = Vote<R>::State::kAnswered;
          votes[i].status = Status::IoError(masters_[i]->server() + ": no answer within " +
                                            std::to_string(blocking_bound_.count()) + " ms");
        }
        return votes;
      }
    }
    Votes<R> votes(masters_.size());
    for (size_t i : which) {
      votes[i].state = Vote<R>::State::kAnswered;
      votes[i].status = Run(masters_[i].get(), make(i), &votes[i].out);
    }
    return votes;
  }

  // Blocking calls may wait for the loop: it is the library's own, and this is not its thread.
  bool CanWaitOnLoop() const { return loop_->owns_thread() && !loop_->InLoopThread(); }

  // Runs start(finish) on the loop thread and waits, at most `bound`, for finish(result).
  // False when it could not be posted (*posted false: the loop is closing) or the bound passed.
  template <typename T, typename Start>
  bool RunOnLoop(Start start, Millis bound, T* out, bool* posted) {
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      T result{};
    };
    auto shared = std::make_shared<Shared>();
    auto finish = [shared](T result) {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result = std::move(result);
      shared->done = true;
      shared->cv.notify_all();
    };
    *posted = loop_->Post([start = std::move(start), finish]() mutable { start(finish); });
    if (!*posted) return false;
    std::unique_lock<std::mutex> lock(shared->mu);
    if (!shared->cv.wait_for(lock, bound, [&] { return shared->done; })) return false;
    *out = std::move(shared->result);
    return true;
  }

  EventLoop* loop_;
  const std::string prefix_;
  const size_t quorum_;
  const Millis blocking_bound_;
  const std::shared_ptr<ConnectionCount> connections_;  // every master's connections count here
  // Before masters_: the masters' subscribers, which point into these, go first.
  std::mutex watches_mu_;
  std::map<std::pair<std::string, ReleaseWatcher*>, std::unique_ptr<QuorumWatch>> watches_;
  std::vector<std::unique_ptr<NodeChannel>> masters_;
};

}  // namespace
}  // namespace dlock::redis

namespace dlock {

Status PrepareRedlock(const Url& url, int64_t) { return redis::CheckUrl(url, redis::ParseRedlockUrl); }

Status NewRedlockBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out) {
  return redis::OpenFromUrl(url, redis::ParseRedlockUrl, [loop](const redis::RedlockConfig& config) {
    return std::make_unique<redis::RedlockBackend>(loop, config);
  }, out);
}

}  // namespace dlock
