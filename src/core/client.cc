#include "core/client.h"

#include <algorithm>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "core/acquisition.h"
#include "core/release_requests.h"
#include "core/waiting.h"
#include "core/token.h"
#include "core/url.h"

namespace dlock {

// ----- opening and closing ---------------------------------------------------------------

Status Client::Open(const Url& url, OpenBackendFn open_backend, std::shared_ptr<Client>* out) {
  std::shared_ptr<Client> client(new Client());
  Status s = EventLoop::Start(&client->loop_);
  if (!s.ok()) return s;
  return Finish(url, open_backend, std::move(client), out);
}

Status Client::OpenOnLoop(const Url& url, OpenBackendFn open_backend,
                          std::unique_ptr<EventLoop> loop, std::shared_ptr<Client>* out) {
  std::shared_ptr<Client> client(new Client());
  client->loop_ = std::move(loop);
  return Finish(url, open_backend, std::move(client), out);
}

Status Client::Finish(const Url& url, OpenBackendFn open_backend, std::shared_ptr<Client> client,
                      std::shared_ptr<Client>* out) {
  Status s = open_backend(url, client->loop_.get(), &client->backend_);
  if (s.ok()) s = client->backend_->Check();
  if (!s.ok()) {
    client->Close();
    return s;
  }
  client->heartbeats_ = std::make_unique<Heartbeats>(client->loop_.get(), client->backend_.get(),
                                                     &client->callbacks_, &client->metrics_);
  uint32_t groups = 0;
  (void)ParseMetricsGroups(url, &groups);  // checked by the backend's ParseCommonParams
  client->metrics_.EnableGroups(groups);
  *out = std::move(client);
  return Status::Ok();
}

uint32_t Client::Capabilities() const { return backend_ != nullptr ? backend_->Capabilities() : 0; }

Client::~Client() {
  Close();
  Teardown();
}

bool Client::IsClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void Client::Close() {
  std::vector<std::shared_ptr<LockState>> to_release;
  std::vector<std::shared_ptr<AsyncAcquire>> to_cancel;
  std::unordered_map<Observer*, std::shared_ptr<Observer>> observers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    observers.swap(observers_);
    for (auto& [name, lock_state] : held_) {
      if (lock_state->Transition(LockPhase::kClosed)) to_release.push_back(lock_state);
      if (lock_state->request_listener != nullptr) {
        backend_->UnwatchReleaseRequests(lock_state->name, lock_state->request_listener.get());
      }
    }
    held_.clear();
    for (auto& [ptr, op] : pending_) to_cancel.push_back(op);
    pending_.clear();
  }
  // No report after close; the observers let go of the backend before it shuts down (the
  // posts run before the teardown's).
  for (auto& [ptr, observer] : observers) observer->Cancel();
  bool acquires_in_flight = false;  // cancelled, but the server may still grant them
  if (!to_cancel.empty() && loop_ != nullptr) {
    loop_->RunSync([&] {
      for (auto& op : to_cancel) {
        acquires_in_flight = acquires_in_flight || op->attempt_in_flight();
        op->Cancel(Status::Cancelled("the client was closed"));
      }
      // What the cancels sent (a fair waiter leaving the line) must reach the server too.
      if (backend_ != nullptr) acquires_in_flight = acquires_in_flight || backend_->PendingAsync() > 0;
    });
  }
  if (backend_ != nullptr && !to_release.empty()) backend_->ReleaseAll(to_release);

  std::shared_ptr<Client> keepalive = weak_from_this().lock();
  if (loop_ == nullptr || keepalive == nullptr || heartbeats_ == nullptr) {  // failed open, destructor
    Teardown();
    return;
  }
  if (!loop_->InLoopThread()) {
    Teardown();
    return;
  }
  // On the loop thread: the callback running now (if any), and the answers still in flight,
  // need this client's loop, connections and heartbeats a little longer.
  loop_->RunSync([this] { heartbeats_->StopOnLoop(); });
  if (!loop_->owns_thread() && callbacks_.depth == 0 && !acquires_in_flight) {
    Teardown();  // nothing needs the loop any more: finish now
    return;
  }
  if (loop_->owns_thread()) {
    // An owned loop thread cannot join itself: another thread finishes the teardown.
    std::thread([keepalive] { keepalive->Teardown(); }).detach();
    return;
  }
  DeferTeardownOnBase(std::move(keepalive), Now() + kCloseDrainLimit);
}

// Polls on the caller's base until the async answers in flight are in (or the limit), then
// tears down; the client stays alive meanwhile. The base must keep running for this.
void Client::DeferTeardownOnBase(std::shared_ptr<Client> self, TimePoint until) {
  loop_->RunOnceAfter(Millis(2), [self = std::move(self), until]() mutable {
    Client* c = self.get();
    if (c->backend_->PendingAsync() > 0 && Now() < until) {
      c->DeferTeardownOnBase(std::move(self), until);
      return;
    }
    c->Teardown();
  });
}

void Client::Teardown() {
  if (torn_down_) return;
  torn_down_ = true;
  if (loop_ == nullptr) return;
  loop_->RunSync([this] {
    if (heartbeats_ != nullptr) heartbeats_->StopOnLoop();
  });
  if (!loop_->InLoopThread() && backend_ != nullptr) {
    // An acquire cancelled by close may have won on the server: its give-back is queued on
    // the async connection behind it. Let those answers arrive (bounded) before dropping it.
    TimePoint until = Now() + kCloseDrainLimit;
    while (Now() < until) {
      size_t pending = 0;
      loop_->RunSync([&] { pending = backend_->PendingAsync(); });
      if (pending == 0) break;
      std::this_thread::sleep_for(Millis(2));
    }
  }
  loop_->RunSync([this] {
    if (backend_ != nullptr) backend_->ShutdownOnLoop();
  });
  loop_->Stop();
}

// ----- acquiring -------------------------------------------------------------------------

Status Client::MakeRequest(const std::string& name, const AcquireOptions& options,
                           LockRequest* out) const {
  const uint32_t caps = Capabilities();
  if (options.kind == LockKind::kShared && (caps & kCapShared) == 0) {
    return Status::InvalidArgument("lock '" + name +
                                   "': this backend does not offer shared locks (see "
                                   "dlock_client_capabilities)" +
                                   backend_->CapabilityNote());
  }
  if (options.permits != 0 && (caps & kCapPermits) == 0) {
    return Status::InvalidArgument("lock '" + name +
                                   "': this backend does not offer semaphores (permits; see "
                                   "dlock_client_capabilities)" +
                                   backend_->CapabilityNote());
  }
  if (options.min_hold_ms != 0 && (caps & kCapMinHold) == 0) {
    return Status::InvalidArgument("lock '" + name +
                                   "': this backend does not offer min_hold_ms (see "
                                   "dlock_client_capabilities)" +
                                   backend_->CapabilityNote());
  }
  if (options.lock_delay_ms != 0 && (caps & kCapLockDelay) == 0) {
    return Status::InvalidArgument("lock '" + name +
                                   "': this backend does not offer lock_delay_ms (see "
                                   "dlock_client_capabilities)" +
                                   backend_->CapabilityNote());
  }
  if (options.on_release_requested && (caps & kCapReleaseRequest) == 0) {
    return Status::InvalidArgument("lock '" + name +
                                   "': this backend cannot deliver release requests "
                                   "(on_release_requested; see dlock_client_capabilities)" +
                                   backend_->CapabilityNote());
  }
  if (options.kind == LockKind::kExclusive && options.permits == 0) {
    // No upgrade: an exclusive acquire would wait for this client's own shared hold forever.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto [it, end] = held_.equal_range(name); it != end; ++it) {
      const LockState* state = it->second.get();
      if (state->kind == LockKind::kShared && state->Phase() == LockPhase::kHeld) {
        return Status::InvalidArgument(
            "lock '" + name +
            "': this client holds it shared; an exclusive acquire would wait for itself "
            "(no upgrade: release the shared hold first)");
      }
    }
  }
  out->name = name;
  out->kind = options.kind;
  out->permits = options.permits;
  out->take = options.take;
  out->owner_label = options.owner;
  out->lease_ms = options.lease_ms;
  out->min_hold_ms = options.min_hold_ms;
  out->lock_delay_ms = options.lock_delay_ms;
  out->value = options.value;
  Status s = NewOwnerToken(&out->owner_value);
  if (!s.ok()) return s;
  if (!options.owner.empty()) out->owner_value += "|" + options.owner;
  // A hand-over carries no job rules: an acquire with them waits without a place in line.
  // Shared holds and semaphores wait in line too (shared waiters served together, permits
  // handed to the first whose takes fit).
  if (options.fair && options.wait_ms != 0 &&
      options.min_hold_ms == 0 && options.lock_delay_ms == 0 &&
      (caps & kCapFair) != 0 && (caps & kCapNotifies) != 0) {
    out->waiter_id = WaiterId(out->owner_value);
  }
  return Status::Ok();
}

Status Client::Inspect(const std::string& name, LockInfo* out) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  return backend_->Inspect(name, out);
}

Status Client::Break(const std::string& name, const std::string& reason, bool now,
                     BreakResult* out) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  if (reason.size() > kMaxReasonBytes) {
    return Status::InvalidArgument("break of '" + name + "': the reason is " +
                                   std::to_string(reason.size()) + " bytes, more than " +
                                   std::to_string(kMaxReasonBytes));
  }
  *out = BreakResult();
  return backend_->Break(name, reason, now, out);
}

Status Client::RequestRelease(const std::string& name, const std::string& reason, uint32_t* asked) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  if (reason.size() > kMaxReasonBytes) {
    return Status::InvalidArgument("release request for '" + name + "': the reason is " +
                                   std::to_string(reason.size()) + " bytes, more than " +
                                   std::to_string(kMaxReasonBytes));
  }
  *asked = 0;
  Status s = backend_->RequestRelease(name, reason, asked);
  if (s.ok() && *asked == 0) {
    return Status::NotHeld("nobody holds lock '" + name + "': there is no holder to ask");
  }
  return s;
}

Status Client::AcquireMany(const std::vector<std::string>& names, const AcquireOptions& options,
                           std::vector<std::shared_ptr<LockState>>* out) {
  out->assign(names.size(), nullptr);
  std::vector<size_t> order(names.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return names[a] < names[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    if (names[order[k]] == names[order[k - 1]]) {
      return Status::InvalidArgument("lock '" + names[order[k]] + "' is named twice");
    }
  }
  const TimePoint start = Now();
  if (order.size() > 1 && backend_->AcquiresManyAtOnce() && options.reentrant_context.empty()) {
    bool one_at_a_time = false;
    Status s = AcquireAllAtOnce(names, order, options, out, &one_at_a_time);
    if (!one_at_a_time) return s;
  }
  const TimePoint until = WaitUntil(start, options.wait_ms);
  AcquireOptions each = options;
  Status s;
  size_t taken = 0;
  for (; taken < order.size(); ++taken) {
    if (options.wait_ms > 0) {  // what is left of the whole call's wait (at least one try)
      const int64_t left = std::chrono::duration_cast<Millis>(until - Now()).count();
      each.wait_ms = left > 0 ? left : 0;
    }
    s = Acquire(names[order[taken]], each, &(*out)[order[taken]]);
    if (!s.ok()) break;
  }
  if (s.ok()) return s;
  // None, then: give back what was taken, last first, as if it had not been (no job rule's
  // marker stays).
  while (taken-- > 0) {
    std::shared_ptr<LockState>& lock = (*out)[order[taken]];
    lock->given_back.store(true);
    (void)Release(lock);
    lock.reset();
  }
  out->assign(names.size(), nullptr);
  return s;
}

Status Client::AcquireAllAtOnce(const std::vector<std::string>& names,
                                const std::vector<size_t>& order, const AcquireOptions& options,
                                std::vector<std::shared_ptr<LockState>>* out,
                                bool* then_one_at_a_time) {
  *then_one_at_a_time = false;
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  const TimePoint start = Now();
  std::vector<std::unique_ptr<Acquisition>> acquisitions;
  acquisitions.reserve(order.size());
  for (size_t k : order) {
    LockRequest request;
    Status s = MakeRequest(names[k], options, &request);
    if (!s.ok()) return s;
    request.waiter_id.clear();  // one try: it takes no place in line
    acquisitions.push_back(std::make_unique<Acquisition>(std::move(request), options,
                                                         /*notifies=*/false, start, &metrics_));
    (void)acquisitions.back()->Start();  // an attempt, watching nothing
  }
  const TimePoint sent = Now();
  std::vector<LockRequest> requests;
  requests.reserve(order.size());
  for (auto& acquisition : acquisitions) {
    requests.push_back(acquisition->NextAttempt(sent));
    requests.back().queue_ms = 0;  // and announces no waiting writer
  }
  std::vector<AcquireAttempt> answers;
  size_t refused = 0;
  Status s = backend_->TryAcquireMany(requests, &answers, &refused);
  const TimePoint now = Now();
  if (!s.ok()) {
    for (auto& acquisition : acquisitions) (void)acquisition->Answered(s, AcquireAttempt(), now);
    return s;
  }
  const bool all = answers.size() == order.size() &&
                   std::all_of(answers.begin(), answers.end(), [](const AcquireAttempt& a) { return a.acquired; });
  if (!all) {
    // Nothing is held. A call that waits goes on one name at a time (this try is not counted
    // as finished for the others: their acquires go on), as does one whose refusal did not say
    // which name was in the way.
    if (options.wait_ms != 0 || refused >= answers.size()) {
      *then_one_at_a_time = true;
      return Status::Ok();
    }
    Acquisition& last = *acquisitions[refused];
    (void)last.Answered(s, answers[refused], now);
    return NotAcquiredStatus(last.request().name, answers[refused], last.attempts(), start);
  }
  Status failed;
  for (size_t k = 0; k < order.size(); ++k) {
    (void)acquisitions[k]->Answered(s, answers[k], now);
    // Every one is adopted, or given back by Adopt (a client closed meanwhile).
    Status adopted = Adopt(acquisitions[k]->request(), answers[k], acquisitions[k]->attempts(),
                           options, sent, &(*out)[order[k]]);
    if (!adopted.ok() && failed.ok()) failed = adopted;
  }
  if (failed.ok()) return failed;
  for (std::shared_ptr<LockState>& lock : *out) {
    if (lock == nullptr) continue;
    lock->given_back.store(true);
    (void)Release(lock);
    lock.reset();
  }
  return failed;
}

Status Client::ReleaseMany(
    const std::vector<std::pair<std::shared_ptr<Client>, std::shared_ptr<LockState>>>& holds) {
  // Each client's holds together: one call for them all where its backend takes several at
  // once (one Redis), one release at a time elsewhere.
  std::vector<Status> answers(holds.size());
  std::vector<bool> done(holds.size(), false);
  for (size_t k = 0; k < holds.size(); ++k) {
    if (done[k]) continue;
    Client* client = holds[k].first.get();
    std::vector<size_t> mine;
    std::vector<std::shared_ptr<LockState>> locks;
    for (size_t j = k; j < holds.size(); ++j) {
      if (done[j] || holds[j].first.get() != client) continue;
      mine.push_back(j);
      locks.push_back(holds[j].second);
      done[j] = true;
    }
    if (locks.size() == 1) {
      answers[k] = client->Release(locks[0]);
      continue;
    }
    std::vector<Status> theirs = client->ReleaseSeveral(locks);
    for (size_t i = 0; i < mine.size(); ++i) answers[mine[i]] = std::move(theirs[i]);
  }
  Status first;
  std::string failures;
  for (const Status& s : answers) {
    if (s.ok()) continue;
    if (first.ok() || (first.code() == Code::kNotHeld && s.code() != Code::kNotHeld)) first = s;
    failures += (failures.empty() ? "" : "; ") + s.message();
  }
  return first.ok() ? first : Status(first.code(), failures);
}

Status Client::Campaign(const std::string& name, const AcquireOptions& options,
                        std::shared_ptr<LockState>* out) {
  if (options.kind != LockKind::kExclusive || options.permits != 0) {
    return Status::InvalidArgument("campaign for '" + name +
                                   "': a leadership is exclusive (no shared kind, no permits)");
  }
  AcquireOptions candidate = options;
  candidate.wait_ms = -1;
  return Acquire(name, candidate, out);
}

Status Client::AsLeader(const std::string& name, Status s, LockInfo* info) {
  if (!s.ok()) return s;
  if (!info->holders.empty() && (info->kind != LockKind::kExclusive || info->permits != 0)) {
    const std::string sort = info->permits != 0 ? "a semaphore" : "held shared";
    *info = LockInfo();
    return Status::InvalidArgument("'" + name + "' is " + sort + ", not an election");
  }
  return s;
}

Status Client::Leader(const std::string& name, LockInfo* out) { return AsLeader(name, Inspect(name, out), out); }

Status Client::InspectAsync(const std::string& name, bool leader, InspectCallback done) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  bool posted = StartOnLoop([self = shared_from_this(), name, leader, done = std::move(done)]() mutable {
    self->backend_->InspectAsync(name, [self, name, leader, done = std::move(done)](const Status& s, LockInfo info) mutable {
      Status result = leader ? AsLeader(name, s, &info) : s;
      self->Complete([done = std::move(done), result, info = std::move(info)]() mutable { done(result, std::move(info)); });
    });
  });
  if (!posted) return Status::InvalidArgument("client is closed");
  return Status::Ok();
}

Status Client::Observe(const std::string& name, Observer::Report report, std::shared_ptr<Observer>* out) {
  auto observer = std::make_shared<Observer>(this, name, std::move(report));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::InvalidArgument("client is closed");
    observers_.emplace(observer.get(), observer);
  }
  StartOnLoop([observer] { observer->Start(); });
  *out = std::move(observer);
  return Status::Ok();
}

void Client::ForgetObserver(Observer* observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observers_.erase(observer);
}

Status Client::NotAcquiredStatus(const std::string& name, const AcquireAttempt& last,
                                 uint32_t attempts, TimePoint start) const {
  auto waited = std::chrono::duration_cast<Millis>(Now() - start).count();
  const std::string gave_up = "gave up after " + std::to_string(attempts) + " attempt" +
                              (attempts == 1 ? "" : "s") + " in " + std::to_string(waited) + " ms";
  if (!last.why_not.empty()) {
    return Status::NotAcquired("lock '" + name + "' was not acquired: " + last.why_not + " (" +
                               gave_up + ")");
  }
  const int64_t holder_ttl_ms = ClampHolderTtl(last.holder_ttl_ms);
  if (!last.closed_by.empty()) {
    return Status::NotAcquired("lock '" + name + "' is closed with no holder (" + last.closed_by +
                               ") for " + std::to_string(std::max<int64_t>(holder_ttl_ms, 0)) +
                               " ms more (" + gave_up + ")");
  }
  std::string held_for = holder_ttl_ms == -1   ? " with no expiry"
                         : holder_ttl_ms >= 0 ? " for " + std::to_string(holder_ttl_ms) + " ms more"
                                              : "";
  // Without a shared context, acquires are not reentrant: a caller whose own client holds the
  // name should be told so.
  std::string holder = "another owner";
  std::string hint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto [it, end] = held_.equal_range(name); it != end; ++it) {
      const LockState* state = it->second.get();
      if (state->Phase() != LockPhase::kHeld) continue;
      holder = "this client";
      std::string label = OwnerLabel(state->owner_value);
      if (!label.empty()) holder += " (owner '" + label + "')";
      hint = "; an acquire re-enters a hold only under the same context (dlock_options_set_reentrant): "
             "release it first, or set one";
      break;
    }
  }
  return Status::NotAcquired("lock '" + name + "' is held by " + holder + held_for + " (" +
                             gave_up + hint + ")");
}

Status Client::Reenter(const std::string& name, const AcquireOptions& options,
                       std::shared_ptr<LockState>* out) {
  out->reset();
  if (options.reentrant_context.empty()) return Status::Ok();
  std::lock_guard<std::mutex> guard(mu_);
  for (auto [it, end] = held_.equal_range(name); it != end; ++it) {
    const std::shared_ptr<LockState>& held = it->second;
    if (held->reentrant_context != options.reentrant_context || held->entries == 0) continue;
    const std::string what = "lock '" + name + "' re-entered by context '" + options.reentrant_context + "'";
    if (!held->IsValid()) {
      std::string why = held->LostCause();
      return Status::NotHeld(what + ": the hold is no longer valid" + (why.empty() ? "" : " (" + why + ")"));
    }
    if (held->kind != options.kind || held->permits != options.permits || held->take != options.take) {
      return Status::InvalidArgument(what + ": the hold is " +
                                     (held->kind == LockKind::kShared ? "shared" : "exclusive") +
                                     (held->permits != 0 ? " with permits " + std::to_string(held->permits) : "") +
                                     (held->take > 1 ? " taking " + std::to_string(held->take) : "") +
                                     "; a re-entry asks for the same kind, permits and take");
    }
    ++held->entries;
    *out = held;
    return Status::Ok();
  }
  return Status::Ok();
}

bool Client::LeaveReentry(LockState& lock, Status* answer) {
  if (lock.reentrant_context.empty()) return false;
  std::lock_guard<std::mutex> guard(mu_);
  if (lock.entries > 1) {
    --lock.entries;
    *answer = lock.Phase() == LockPhase::kHeld ? Status::Ok() : NotHeldStatus(lock);
    return true;
  }
  lock.entries = 0;  // the last handle: no re-entry from now on
  return false;
}

Status Client::Adopt(const LockRequest& request, const AcquireAttempt& attempt,
                     uint32_t attempts, const AcquireOptions& options, TimePoint sent,
                     std::shared_ptr<LockState>* out) {
  auto state = std::make_shared<LockState>(request.name, request.owner_value,
                                           attempt.fencing_token, attempts,
                                           options, sent, attempt.backend_data);
  if (attempt.remaining_ms >= 0 && options.lease_ms > 0) {
    // Won before this attempt (a retry after a lost reply, a hand-over): the server's lease
    // is what is left of it, not a new one.
    const uint64_t left = std::min<uint64_t>(static_cast<uint64_t>(attempt.remaining_ms),
                                             options.lease_ms);
    state->CapDeadline(sent, left);
  }
  if (state->on_release_requested) {
    state->request_listener = std::make_shared<ReleaseRequestListener>(weak_from_this(), state);
  }
  bool registered = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) {
      held_.emplace(state->name, state);
      registered = true;
      // Under mu_: Close and Forget unwatch under it too, so never before this.
      if (state->request_listener != nullptr) {
        backend_->WatchReleaseRequests(state->name, state->request_listener.get());
      }
    }
  }
  if (!registered) {  // closed while acquiring: give it back
    (void)backend_->Release(*state);
    return Status::Cancelled("the client was closed during acquire");
  }
  heartbeats_->Track(state, /*fresh=*/true);
  *out = std::move(state);
  return Status::Ok();
}

namespace {

using StepKind = Acquisition::Step::Kind;

// Feeds what a blocking waiter heard since `seen` to its acquisition: an attempt if any of it
// asks for one (events end nothing: only a cancel does, and a blocking acquire has none).
Acquisition::Step FeedHeard(Acquisition* acquisition, const WakeSignal::Heard& heard,
                            WakeSignal::Heard* seen) {
  bool attempt = false;
  if (heard.handed_over) attempt |= acquisition->HandedOver().kind == StepKind::kAttempt;
  if (heard.releases != seen->releases) {
    attempt |= acquisition->Released().kind == StepKind::kAttempt;
  }
  if (heard.live != seen->live) {
    attempt |= acquisition->WatchLive(heard.live).kind == StepKind::kAttempt;
  }
  *seen = heard;
  return attempt ? Acquisition::Step::Of(StepKind::kAttempt) : Acquisition::Step();
}

}  // namespace

// The blocking driver of an Acquisition: attempts on this thread, waits on a WakeSignal that the
// loop thread fills.
Status Client::Acquire(const std::string& name, const AcquireOptions& options,
                       std::shared_ptr<LockState>* out) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  Status s = Reenter(name, options, out);  // a re-entry waits for nothing, on any thread
  if (!s.ok() || *out != nullptr) return s;
  if (options.wait_ms != 0 && loop_->InLoopThread()) {
    return Status::InvalidArgument(
        "dlock_acquire with a wait cannot run on the client's loop thread (in a callback, or on "
        "the event_base's thread): waiting needs that loop; use dlock_acquire_async, or wait_ms 0");
  }
  LockRequest request;
  s = MakeRequest(name, options, &request);
  if (!s.ok()) return s;

  Acquisition acquisition(std::move(request), options, backend_->NotifiesReleases(), Now(), &metrics_);
  WakeSignal signal(acquisition.request().waiter_id);
  WakeSignal::Heard seen;
  AcquireAttempt answer;
  TimePoint sent;
  TimePoint until;
  Acquisition::Step step = acquisition.Start();
  while (true) {
    if (step.watch) {
      backend_->Watch(name, &signal);
      // A name watched already is live at once: an attempt sent now cannot miss a release, and
      // must not be taken for one sent before the watch (which would be tried again).
      Acquisition::Step heard = FeedHeard(&acquisition, signal.Wait(seen, TimePoint::min()), &seen);
      if (heard.kind == StepKind::kAttempt) step.kind = StepKind::kAttempt;
    }
    if (step.unwatch) backend_->Unwatch(name, &signal);
    if (step.leave_line) backend_->LeaveLine(acquisition.request());
    switch (step.kind) {
      case StepKind::kAttempt:
        sent = Now();
        answer = AcquireAttempt();
        s = backend_->TryAcquire(acquisition.NextAttempt(sent), &answer);
        // What was heard while the attempt was out comes before its answer.
        (void)FeedHeard(&acquisition, signal.Wait(seen, TimePoint::min()), &seen);
        step = acquisition.Answered(s, answer, Now());
        break;
      case StepKind::kWait:
        until = step.until;
        [[fallthrough]];
      case StepKind::kNone:
        step = FeedHeard(&acquisition, signal.Wait(seen, until), &seen);
        if (step.kind == StepKind::kNone && Now() >= until) step = acquisition.TimerFired();
        break;
      case StepKind::kAcquired:
        return Adopt(acquisition.request(), answer, acquisition.attempts(), options, sent, out);
      case StepKind::kGaveUp:
        return NotAcquiredStatus(name, answer, acquisition.attempts(), acquisition.start());
      case StepKind::kFinished:
        return step.status;
    }
  }
}

Status Client::AcquireAsync(const std::string& name, const AcquireOptions& options, CancelKey key,
                            AcquireDone done) {
  if (IsClosed()) return Status::InvalidArgument("client is closed");
  std::shared_ptr<LockState> reentered;
  Status s = Reenter(name, options, &reentered);
  if (!s.ok()) return s;
  if (reentered != nullptr) {  // no acquisition: done on the loop, never before this returns
    bool posted = StartOnLoop([self = shared_from_this(), reentered, done = std::move(done)]() mutable {
      self->Complete([reentered, done = std::move(done)] { done(Status::Ok(), reentered); });
    });
    if (!posted) return Status::InvalidArgument("client is closed");
    return Status::Ok();
  }
  LockRequest request;
  s = MakeRequest(name, options, &request);
  if (!s.ok()) return s;
  auto op = std::make_shared<AsyncAcquire>(this, std::move(request), options, key, std::move(done));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.emplace(op.get(), op);
  }
  StartOnLoop([op] { op->Start(); });
  return Status::Ok();
}

bool Client::CancelAcquire(const CancelKey& key) {
  std::vector<std::shared_ptr<AsyncAcquire>> matching;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, op] : pending_) {
      if (op->key() == key) matching.push_back(op);
    }
  }
  if (matching.empty()) return false;
  loop_->Post([matching] {
    for (auto& op : matching) op->Cancel(Status::Cancelled("acquire cancelled"));
  });
  return true;
}

void Client::ForgetPending(AsyncAcquire* acquire) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(acquire);
}

// ----- releasing and extending -----------------------------------------------------------

Status Client::NotHeldStatus(const LockState& lock) const {
  switch (lock.Phase()) {
    case LockPhase::kClosed:
      return Status::NotHeld("lock '" + lock.name + "' was released when its client was closed");
    case LockPhase::kReleased:
      return Status::NotHeld("lock '" + lock.name + "' was already released");
    default: {
      // "CAUSE: details" (dlock_lock_lost_cause), so that a caller whose release freed the lock
      // can still tell the cause from the message.
      std::string cause = lock.LostCause();
      return Status::NotHeld("lock '" + lock.name + "' was lost" + (cause.empty() ? std::string() : ": " + cause));
    }
  }
}

void Client::Forget(const std::shared_ptr<LockState>& lock) {
  // Heartbeats skip (and drop) it on their own once it is no longer held.
  std::lock_guard<std::mutex> guard(mu_);
  for (auto [it, end] = held_.equal_range(lock->name); it != end; ++it) {
    if (it->second == lock) {
      if (lock->request_listener != nullptr) {
        backend_->UnwatchReleaseRequests(lock->name, lock->request_listener.get());
      }
      held_.erase(it);
      return;
    }
  }
}

Status Client::SettleRelease(const std::shared_ptr<LockState>& lock, const Status& s) {
  const Clock::duration held = Now() - lock->acquired_at;
  Status result = s;
  if (s.ok()) {
    const bool moved = lock->Transition(LockPhase::kReleased);
    Forget(lock);
    metrics_.Released(moved ? CallOutcome::kOk : CallOutcome::kNotHeld, held, lock->name);
    if (!moved) result = NotHeldStatus(*lock);
  } else if (s.code() == Code::kNotHeld) {
    // Lost already, with the cause a look found (LoseExplained): this only makes sure.
    if (lock->Phase() == LockPhase::kHeld) {
      lock->Lose(LossCause::kRefused, "the server no longer had this owner's lock", &metrics_);
    }
    Forget(lock);
    metrics_.Released(CallOutcome::kNotHeld, Clock::duration(), lock->name);
    result = NotHeldStatus(*lock);
  } else {
    // The server could not be asked: the lock stays ours until its lease runs out, and the
    // caller's handle is gone, so stop renewing it.
    lock->SetLostReason("release failed: " + s.message());
    lock->Transition(LockPhase::kReleased);
    Forget(lock);
    metrics_.Released(CallOutcome::kError, Clock::duration(), lock->name);
  }
  metrics_.Emit([&] {
    Event e{Event::Type::kReleased, lock->name};
    e.elapsed_ms = ElapsedMs(held);
    e.fencing_token = lock->fencing_token;
    e.status = static_cast<int>(result.code());
    e.detail = result.ok() ? std::string() : result.message();
    return e;
  });
  return result;
}

void Client::CountReleaseOfUnheld(const LockState& lock) {
  metrics_.Released(CallOutcome::kNotHeld, Clock::duration(), lock.name);
  metrics_.Emit([&] {
    Event e{Event::Type::kReleased, lock.name};
    e.fencing_token = lock.fencing_token;
    e.status = static_cast<int>(Code::kNotHeld);
    e.detail = NotHeldStatus(lock).message();
    return e;
  });
}

uint64_t Client::HeldCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t held = 0;
  for (const auto& [name, state] : held_) held += state->Phase() == LockPhase::kHeld ? 1 : 0;
  return held;
}

ClientGauges Client::Gauges() const {
  ClientGauges gauges;
  gauges.locks_held = HeldCount();
  gauges.connections = backend_->OpenConnections();
  return gauges;
}

std::string Client::MetricsText() const { return metrics_.Text(Gauges()); }

void Client::CollectMetrics(std::vector<MetricFamily>* families, std::vector<MetricSample>* samples) const {
  metrics_.Collect(Gauges(), families, samples);
}

Status Client::Release(const std::shared_ptr<LockState>& lock) {
  Status s;
  if (LeaveReentry(*lock, &s)) return s;
  s = ReleaseHeld(lock);
  // Wait out an on_lost call in progress: once release returns, the callback is neither running
  // nor going to run, so the caller may free what it uses.
  std::lock_guard<std::recursive_mutex> wait_for_callback(lock->callback_mu);
  return s;
}

namespace {
// A hold with a lock-delay that ended uncleanly (lost, or past its local deadline) is not
// released: a release is a clean end, which would cancel the delay that must follow it. Its
// hold ends with its lease on the server, and the delay after that. Marks it lost (expired) if
// it was not yet; true when the release must not reach the server.
bool EndedUncleanlyWithADelay(LockState& lock, Metrics* metrics) {
  if (lock.lock_delay_ms == 0) return false;
  if (lock.Phase() == LockPhase::kHeld && Now() < lock.LocalDeadline()) return false;
  lock.Lose(LossCause::kExpired, "its lease ran out before it was released", metrics);
  return lock.Phase() == LockPhase::kLost;
}
}  // namespace

Status Client::ReleaseHeld(const std::shared_ptr<LockState>& lock) {
  Status answer;
  if (AnsweredWithoutServer(lock, &answer)) return answer;
  lock->releasing.store(true);  // a renewal refused from now on is this release's doing
  return ReleaseAnswered(lock, backend_->Release(*lock));
}

bool Client::AnsweredWithoutServer(const std::shared_ptr<LockState>& lock, Status* answer) {
  if (lock->Phase() == LockPhase::kHeld && EndedUncleanlyWithADelay(*lock, &metrics_)) {
    CountReleaseOfUnheld(*lock);
    Forget(lock);
    *answer = NotHeldStatus(*lock);
    return true;
  }
  LockPhase phase = lock->Phase();
  if (phase == LockPhase::kHeld) return false;
  CountReleaseOfUnheld(*lock);
  if (phase == LockPhase::kLost) {
    Forget(lock);
    // Lost for a transient reason, the key may still be ours: clean up, best effort (not under
    // a lock-delay, which the unclean end keeps).
    if (!IsClosed() && lock->lock_delay_ms == 0) (void)backend_->Release(*lock);
  }
  *answer = NotHeldStatus(*lock);
  return true;
}

Status Client::ReleaseAnswered(const std::shared_ptr<LockState>& lock, const Status& answer) {
  if (answer.code() == Code::kNotHeld) LoseExplained(lock);
  return SettleRelease(lock, answer);
}

std::vector<Status> Client::ReleaseSeveral(const std::vector<std::shared_ptr<LockState>>& locks) {
  std::vector<Status> answers(locks.size());
  std::vector<size_t> sent;
  std::vector<const LockState*> to_send;
  for (size_t k = 0; k < locks.size(); ++k) {
    if (LeaveReentry(*locks[k], &answers[k]) || AnsweredWithoutServer(locks[k], &answers[k])) continue;
    locks[k]->releasing.store(true);  // as in ReleaseHeld
    sent.push_back(k);
    to_send.push_back(locks[k].get());
  }
  std::vector<Status> server_answers;
  if (!to_send.empty()) backend_->ReleaseMany(to_send, &server_answers);
  for (size_t i = 0; i < sent.size(); ++i) {
    answers[sent[i]] = ReleaseAnswered(locks[sent[i]], server_answers[i]);
  }
  for (const auto& lock : locks) {  // as in Release: on_lost is neither running nor to run
    std::lock_guard<std::recursive_mutex> wait_for_callback(lock->callback_mu);
  }
  return answers;
}

void Client::LoseExplained(const std::shared_ptr<LockState>& lock) {
  if (!lock->MarkRefused()) {  // past its deadline (an expiry), or lost already
    lock->Lose(LossCause::kRefused, "the server no longer had this owner's lock", &metrics_);
    return;
  }
  LockInfo info;
  const Status looked = backend_->Inspect(lock->name, &info);
  std::string reason;
  const LossCause cause = ClassifyRefusal(*lock, looked, std::move(info), &reason);
  lock->Lose(cause, std::move(reason), &metrics_, /*explained=*/true);
}

void Client::LoseExplainedOnLoop(const std::shared_ptr<LockState>& lock, const Status& answer,
                                 std::function<void()> then) {
  if (answer.code() != Code::kNotHeld) {
    then();
    return;
  }
  heartbeats_->ExplainRefusal(lock, [self = shared_from_this(), lock, then = std::move(then)](
                                        LossCause cause, std::string reason) {
    lock->Lose(cause, std::move(reason), &self->metrics_, /*explained=*/true);
    then();
  });
}

void Client::ReleaseAsync(std::shared_ptr<LockState> lock, StatusCallback user_done) {
  // As Release: done runs once on_lost is neither running nor going to run.
  StatusCallback done = [lock, user_done = std::move(user_done)](const Status& s) {
    std::lock_guard<std::recursive_mutex> wait_for_callback(lock->callback_mu);
    user_done(s);
  };
  if (Status s; LeaveReentry(*lock, &s)) {
    if (!StartOnLoop([self = shared_from_this(), done, s] { self->Complete([done, s] { done(s); }); })) done(s);
    return;
  }
  bool posted = StartOnLoop([self = shared_from_this(), lock, done]() mutable {
    const bool keeps_delay = lock->Phase() == LockPhase::kHeld && EndedUncleanlyWithADelay(*lock, &self->metrics_);
    LockPhase phase = lock->Phase();
    if (phase != LockPhase::kHeld) {
      self->CountReleaseOfUnheld(*lock);
      if (phase == LockPhase::kLost) {
        self->Forget(lock);
        if (!keeps_delay && lock->lock_delay_ms == 0) {
          self->backend_->ReleaseAsync(lock, [](const Status&) {});  // best effort, as above
        }
      }
      self->Complete([done = std::move(done), s = self->NotHeldStatus(*lock)] { done(s); });
      return;
    }
    lock->releasing.store(true);  // as in Release
    self->backend_->ReleaseAsync(lock, [self, lock, done = std::move(done)](const Status& answer) {
      self->LoseExplainedOnLoop(lock, answer, [self, lock, done, answer] {
        self->Complete([done, s = self->SettleRelease(lock, answer)] { done(s); });
      });
    });
  });
  if (!posted) done(NotHeldStatus(*lock));  // closed: nothing runs the loop any more
}

Status Client::CheckExtend(const LockState& lock, uint64_t lease_ms) const {
  Status s = CheckHeldLease(lease_ms);
  if (!s.ok()) return s;
  if (lease_ms == 0 && lock.max_hold_ms != 0) {
    return Status::InvalidArgument("lease_ms 0 (no expiry) would outlast the lock's max_hold_ms " +
                                   std::to_string(lock.max_hold_ms) + ": nothing would end the hold");
  }
  if (lock.heartbeat_explicit && lease_ms != 0 && lock.heartbeat_ms.load() >= lease_ms) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " must be longer than the lock's heartbeat_ms " +
                                   std::to_string(lock.heartbeat_ms.load()));
  }
  return Status::Ok();
}

Status Client::Extend(const std::shared_ptr<LockState>& lock, uint64_t lease_ms) {
  Status s = CheckExtend(*lock, lease_ms);
  if (!s.ok()) return s;
  if (lock->Phase() != LockPhase::kHeld) {
    metrics_.Extended(CallOutcome::kNotHeld);
    return NotHeldStatus(*lock);
  }
  if (loop_->InLoopThread()) {
    return Status::InvalidArgument(
        "dlock_extend cannot run on the client's loop thread (it waits for that loop); use "
        "dlock_extend_async there");
  }
  if (IsClosed()) return NotHeldStatus(*lock);
  // Through the loop, one lease command per lock at a time (see Heartbeats::Extend).
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> answer = result->get_future();
  if (!loop_->Post([self = shared_from_this(), lock, lease_ms, result] {
        self->heartbeats_->Extend(lock, lease_ms, [result](const Status& st) { result->set_value(st); });
      })) {
    return NotHeldStatus(*lock);
  }
  s = answer.get();
  if (s.code() == Code::kNotHeld) return NotHeldStatus(*lock);
  return s;
}

Status Client::SetValue(const std::shared_ptr<LockState>& lock, const std::string& value) {
  if (value.size() > kMaxValueBytes) return CheckValue(value.data(), value.size());
  if (lock->Phase() != LockPhase::kHeld || IsClosed()) return NotHeldStatus(*lock);
  // Set before the write: a release racing with it must remove what it may store.
  if (!value.empty()) lock->has_value.store(true);
  const Status answer = backend_->SetValue(*lock, value);
  if (answer.code() == Code::kNotHeld) LoseExplained(lock);
  return SettleSetValue(*lock, answer);
}

Status Client::SettleSetValue(LockState& lock, const Status& s) {
  if (s.code() != Code::kNotHeld) return s;
  // Found by the caller's own call: reported by its NOT_HELD, not by on_lost (as extend).
  // Lost already, with the cause a look found (LoseExplained): this only makes sure.
  if (lock.Phase() == LockPhase::kHeld) {
    lock.Lose(LossCause::kRefused, "the server no longer had this owner's lock", &metrics_);
  }
  return NotHeldStatus(lock);
}

void Client::SetValueAsync(std::shared_ptr<LockState> lock, std::string value, StatusCallback done) {
  bool posted = StartOnLoop([self = shared_from_this(), lock, value = std::move(value), done]() mutable {
    Status s = value.size() > kMaxValueBytes ? CheckValue(value.data(), value.size())
               : lock->Phase() != LockPhase::kHeld ? self->NotHeldStatus(*lock)
                                                   : Status::Ok();
    if (!s.ok()) {
      self->Complete([done = std::move(done), s] { done(s); });
      return;
    }
    if (!value.empty()) lock->has_value.store(true);
    self->backend_->SetValueAsync(lock, std::move(value), [self, lock, done = std::move(done)](const Status& answer) {
      self->LoseExplainedOnLoop(lock, answer, [self, lock, done, answer] {
        self->Complete([done, r = self->SettleSetValue(*lock, answer)] { done(r); });
      });
    });
  });
  if (!posted) done(NotHeldStatus(*lock));  // closed: nothing runs the loop any more
}

void Client::ExtendAsync(std::shared_ptr<LockState> lock, uint64_t lease_ms, StatusCallback done) {
  bool posted = StartOnLoop([self = shared_from_this(), lock, lease_ms, done]() mutable {
    Status s = self->CheckExtend(*lock, lease_ms);
    if (s.ok() && lock->Phase() != LockPhase::kHeld) {
      self->metrics_.Extended(CallOutcome::kNotHeld);
      s = self->NotHeldStatus(*lock);
    }
    if (!s.ok()) {
      self->Complete([done = std::move(done), s] { done(s); });
      return;
    }
    self->heartbeats_->Extend(lock, lease_ms, [self, lock, done = std::move(done)](const Status& answer) mutable {
      Status r = answer.code() == Code::kNotHeld ? self->NotHeldStatus(*lock) : answer;
      self->Complete([done = std::move(done), r] { done(r); });
    });
  });
  if (!posted) done(NotHeldStatus(*lock));  // closed: nothing runs the loop any more
}

}  // namespace dlock
