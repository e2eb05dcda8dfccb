// Client: one backend, its event loop (a thread it owns, or the caller's event_base), its
// heartbeats, the locks it holds and the async acquires in progress. Implements the waiting
// policy of guarantee 5 (docs/guarantees.md) on top of Backend, blocking (Acquire) and async
// (AsyncAcquire).
#ifndef DLOCK_CORE_CLIENT_H_
#define DLOCK_CORE_CLIENT_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/async_acquire.h"
#include "core/backend.h"
#include "core/callback_scope.h"
#include "core/options.h"
#include "core/status.h"
#include "core/url.h"
#include "loop/event_loop.h"
#include "core/heartbeats.h"
#include "core/metrics.h"
#include "core/observer.h"

struct event_base;

namespace dlock {

// How a client makes its backend, on the client's loop: the registry's entry for the URL's
// scheme (backends/registry.h's OpenClient finds it; the core names no backend).
using OpenBackendFn = Status (*)(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);

class Client : public std::enable_shared_from_this<Client> {
 public:
  // A client with its own loop thread.
  static Status Open(const Url& url, OpenBackendFn open_backend, std::shared_ptr<Client>* out);
  // A client on a loop the caller runs (its event_base, or its own loop through hooks); call
  // on the thread that runs it.
  static Status OpenOnLoop(const Url& url, OpenBackendFn open_backend,
                           std::unique_ptr<EventLoop> loop, std::shared_ptr<Client>* out);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Blocking calls.
  Status Acquire(const std::string& name, const AcquireOptions& options,
                 std::shared_ptr<LockState>* out);
  Status Release(const std::shared_ptr<LockState>& lock);
  Status Extend(const std::shared_ptr<LockState>& lock, uint64_t lease_ms);
  // Replaces the value stored with a held lock ("" removes it); any thread.
  Status SetValue(const std::shared_ptr<LockState>& lock, const std::string& value);
  void SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done);

  // Async calls: any thread; done runs on the loop thread, exactly once, never inside the call.
  // A non-ok return means nothing was started.
  Status AcquireAsync(const std::string& name, const AcquireOptions& options, CancelKey key,
                      AcquireDone done);
  bool CancelAcquire(const CancelKey& key);  // true when a pending acquire had this key
  void ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback done);
  void ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done);

  // Stops heartbeats, cancels pending acquires, releases every held lock, stops the loop.
  // Idempotent. From inside one of this client's callbacks, the teardown finishes after the
  // callback returns.
  void Close();
  bool IsClosed();
  uint32_t Capabilities() const;  // the backend's kCap* bits
  // Who holds name now (dlock_inspect). Blocking.
  Status Inspect(const std::string& name, LockInfo* out);
  // An operator's takeover (dlock_break, Backend::Break): reason at most kMaxReasonBytes.
  // Blocking.
  Status Break(const std::string& name, const std::string& reason, bool now, BreakResult* out);
  // Asks the holders of name to let go (dlock_request_release, Backend::RequestRelease): reason
  // at most kMaxReasonBytes; NotHeld when nobody holds it. *asked: how many holds were asked.
  // Blocking.
  Status RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked);
  // Several names, all or none (dlock_acquire_many). Where one server keeps every name
  // (Backend::AcquiresManyAtOnce), the first try takes them all in one call. Otherwise, and
  // while waiting, each name is acquired in one fixed order (bytewise), so that two callers
  // asking for {a, b} and {b, a} never wait on each other; on any failure what was taken is
  // released, and the failure returned. out[k] holds names[k]. options.wait_ms bounds the
  // whole call. Blocking.
  Status AcquireMany(const std::vector<std::string>& names, const AcquireOptions& options,
                     std::vector<std::shared_ptr<LockState>>* out);
  // dlock_release_many: releases every hold (each through its own client). Ok when all were;
  // else NotHeld naming each one lost (or released already) when that is all that went wrong,
  // else the first error, its message naming every name that failed and why.
  static Status ReleaseMany(
      const std::vector<std::pair<std::shared_ptr<Client>, std::shared_ptr<LockState>>>& holds);
  // Leader election: an exclusive acquire that waits without limit (dlock_campaign); the
  // leader, or no holder (dlock_leader). Blocking.
  Status Campaign(const std::string& name, const AcquireOptions& options, std::shared_ptr<LockState>* out);
  Status Leader(const std::string& name, LockInfo* out);
  // Inspect (leader: Leader) asynchronously: done runs on the loop thread, exactly once, never
  // inside the call. A non-ok return means nothing was started.
  Status InspectAsync(const std::string& name, bool leader, InspectCallback done);
  // Starts an observer of name's leader (dlock_observe); any thread. Its reports run on the
  // loop thread until it is cancelled or the client closes.
  Status Observe(const std::string& name, Observer::Report report, std::shared_ptr<Observer>* out);
  void ForgetObserver(Observer* observer);

  // This client's metrics (dlock_client_metrics_text): the Prometheus text, or its samples.
  std::string MetricsText() const;
  void CollectMetrics(std::vector<MetricFamily>* families, std::vector<MetricSample>* samples) const;
  Metrics* metrics() { return &metrics_; }
  // dlock_client_set_event_hook: once per client; false when one is set already.
  bool SetEventHook(EventHook hook) { return metrics_.SetHook(std::move(hook)); }

  // For AsyncAcquire and the backends.
  EventLoop* loop() { return loop_.get(); }
  Backend* backend() { return backend_.get(); }
  // A re-entry (dlock_options_set_reentrant): this client's hold of name under options'
  // context, with one more handle on it, in *out; *out stays null when there is none (an
  // acquisition is needed). NotHeld when that hold was lost or is past its local deadline;
  // InvalidArgument when its kind or permits differ.
  Status Reenter(const std::string& name, const AcquireOptions& options, std::shared_ptr<LockState>* out);
  // The release of one handle on a re-entered hold while others remain: true, with the answer,
  // and the server is not asked. False for the last (or only) handle: its release goes on.
  bool LeaveReentry(LockState& lock, Status* answer);
  // Registers a newly acquired lock (heartbeats, close); gives it back if the client closed.
  Status Adopt(const LockRequest& request, const AcquireAttempt& attempt, uint32_t attempts,
               const AcquireOptions& options, TimePoint sent, std::shared_ptr<LockState>* out);
  // AcquireMany's first try, where the backend takes every name in one call: all of them, or
  // none. *then_one_at_a_time: refused, and the call may wait (nothing is held): the names are
  // then taken one at a time. order: names' indexes, bytewise.
  Status AcquireAllAtOnce(const std::vector<std::string>& names, const std::vector<size_t>& order,
                          const AcquireOptions& options, std::vector<std::shared_ptr<LockState>>* out,
                          bool* then_one_at_a_time);
  // The last attempt's refusal, as the caller is told it.
  Status NotAcquiredStatus(const std::string& name, const AcquireAttempt& last, uint32_t attempts,
                           TimePoint start) const;
  void ForgetPending(AsyncAcquire* acquire);
  // Runs a user callback, counted so that Close from inside it is deferred.
  template <typename Fn>
  void RunCallback(Fn&& fn) {
    CallbackScope scope(&callbacks_);
    fn();
  }
  // Runs an _async call's done callback: now, or on the loop's next turn when the call that
  // started the work is still on this thread's stack (it ran inline, StartOnLoop), so that done
  // never runs before its call returns. fn owns what it uses.
  template <typename Fn>
  void Complete(Fn fn) {
    if (starting_ > 0) {
      auto later = [self = shared_from_this(), fn = std::move(fn)]() mutable { self->RunCallback(fn); };
      if (loop_->Post(later)) return;
      later();  // the loop has stopped: nothing else would run it
      return;
    }
    RunCallback(fn);
  }

 private:
  Client() = default;
  // Runs work on the loop thread: inline when called there (the caller's own loop, or a
  // callback: no turn of the loop is lost, and no wake-up made), else posted. False when the
  // loop has stopped and work was dropped.
  template <typename Work>
  bool StartOnLoop(Work&& work) {
    if (!loop_->InLoopThread() || IsClosed()) return loop_->Post(std::forward<Work>(work));
    ++starting_;
    work();
    --starting_;
    return true;
  }
  static Status Finish(const Url& url, OpenBackendFn open_backend, std::shared_ptr<Client> client,
                       std::shared_ptr<Client>* out);
  Status NotHeldStatus(const LockState& lock) const;
  // An inspection's answer as dlock_leader gives it: EINVAL (and no holders) unless the name is
  // free or held exclusive.
  static Status AsLeader(const std::string& name, Status s, LockInfo* info);
  // A set_value's answer, as the caller sees it (NotHeld marks the lock lost).
  Status SettleSetValue(LockState& lock, const Status& s);
  Status ReleaseHeld(const std::shared_ptr<LockState>& lock);
  uint64_t HeldCount() const;
  // The gauges a scrape reads now: locks held, the backend's open connections.
  ClientGauges Gauges() const;
  // A release of a lock no longer held (lost, released, closed): counted and told as not_held.
  void CountReleaseOfUnheld(const LockState& lock);
  void Forget(const std::shared_ptr<LockState>& lock);

  // The backend's request for one hold: a fresh owner token, the kind checked against what
  // the backend offers.
  Status MakeRequest(const std::string& name, const AcquireOptions& options,
                     LockRequest* out) const;
  // Settles a release/extend answer into the lock's phase; returns what the caller sees.
  Status SettleRelease(const std::shared_ptr<LockState>& lock, const Status& s);
  // A release that needs no server (the hold was lost, released, or ended under a lock-delay):
  // true, with its answer. Else the server is asked, and ReleaseAnswered settles its answer.
  bool AnsweredWithoutServer(const std::shared_ptr<LockState>& lock, Status* answer);
  Status ReleaseAnswered(const std::shared_ptr<LockState>& lock, const Status& answer);
  // Several of this client's holds released together (Backend::ReleaseMany), each answered as
  // Release answers.
  std::vector<Status> ReleaseSeveral(const std::vector<std::shared_ptr<LockState>>& locks);
  // A release or set_value the server refused: the lock is lost, with the cause one look at
  // the name finds (ClassifyRefusal). The caller's thread (a blocking Inspect), or on the loop
  // after an answer (then runs once the look answered, or at once when answer is not NOT_HELD).
  void LoseExplained(const std::shared_ptr<LockState>& lock);
  void LoseExplainedOnLoop(const std::shared_ptr<LockState>& lock, const Status& answer,
                           std::function<void()> then);
  Status CheckExtend(const LockState& lock, uint64_t lease_ms) const;
  void Teardown();
  void DeferTeardownOnBase(std::shared_ptr<Client> self, TimePoint until);
  // How long close waits for async answers in flight.
  static constexpr Millis kCloseDrainLimit{3000};

  Metrics metrics_;  // before what counts into it, so that it outlives them
  std::unique_ptr<EventLoop> loop_;
  int starting_ = 0;  // StartOnLoop calls running inline (loop thread only)
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Heartbeats> heartbeats_;
  CallbackDepth callbacks_;
  mutable std::mutex mu_;
  bool closed_ = false;
  bool torn_down_ = false;
  // The holds of this client, by name: an exclusive acquire and a refusal ask "does this client
  // hold NAME?" with one look-up, not a scan of every lock held. The key views the state's own
  // name, which the value keeps alive: one node per hold, no copy of the name. Under mu_.
  std::unordered_multimap<std::string_view, std::shared_ptr<LockState>> held_;
  std::unordered_map<AsyncAcquire*, std::shared_ptr<AsyncAcquire>> pending_;
  std::unordered_map<Observer*, std::shared_ptr<Observer>> observers_;  // under mu_
};

}  // namespace dlock

#endif  // DLOCK_CORE_CLIENT_H_
