#include "core/client.h"

#include <algorithm>
#include <vector>

#include "core/token.h"
#include "core/url.h"
#include "redis/redis_backend.h"

namespace dlock {

Status Client::Open(const std::string& url_text, std::shared_ptr<Client>* out) {
  Url url;
  Status s = ParseUrl(url_text, &url);
  if (!s.ok()) return s;
  std::shared_ptr<Client> client(new Client());
  s = EventLoop::Start(&client->loop_);
  if (!s.ok()) return s;
  if (url.scheme == "redis" || url.scheme == "redis+unix") {
    s = NewRedisBackend(url, client->loop_.get(), &client->backend_);
  } else {
    s = Status::InvalidArgument("unsupported URL scheme '" + url.scheme +
                                "://' (supported: redis://, redis+unix://)");
  }
  if (s.ok()) s = client->backend_->Check();
  if (!s.ok()) {
    client->Close();
    return s;
  }
  client->heartbeats_ = std::make_unique<Heartbeats>(client->loop_.get(), client->backend_.get());
  *out = std::move(client);
  return Status::Ok();
}

Client::~Client() { Close(); }

void Client::Close() {
  std::vector<std::shared_ptr<LockState>> to_release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [ptr, lock_state] : held_) {
      if (lock_state->Transition(LockPhase::kClosed)) to_release.push_back(lock_state);
    }
    held_.clear();
  }
  if (loop_ != nullptr && heartbeats_ != nullptr) {
    loop_->RunSync([this] { heartbeats_->StopOnLoop(); });
  }
  if (backend_ != nullptr && !to_release.empty()) backend_->ReleaseAll(to_release);
  if (loop_ != nullptr && backend_ != nullptr) loop_->RunSync([this] { backend_->ShutdownOnLoop(); });
  if (loop_ != nullptr) loop_->Stop();
}

Status Client::Acquire(const std::string& name, const AcquireOptions& options,
                       std::shared_ptr<LockState>* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::InvalidArgument("client is closed");
  }
  std::string owner_value;
  Status s = NewOwnerToken(&owner_value);
  if (!s.ok()) return s;
  if (!options.owner.empty()) owner_value += "|" + options.owner;

  const TimePoint start = Now();
  const TimePoint wait_until =
      options.wait_ms < 0 ? TimePoint::max() : start + Millis(options.wait_ms);
  WakeSignal signal;
  bool watching = false;
  uint64_t seen = 0;
  uint32_t attempts = 0;
  uint64_t backoff = options.retry_min_ms;
  auto stop_watching = [&] {
    if (watching) backend_->Unwatch(name, &signal);
    watching = false;
  };

  while (true) {
    TimePoint sent = Now();
    AcquireAttempt attempt;
    ++attempts;
    s = backend_->TryAcquire(name, owner_value, options.lease_ms, &attempt);
    if (!s.ok()) {
      stop_watching();
      return s;
    }
    if (attempt.acquired) {
      stop_watching();
      auto state = std::make_shared<LockState>(name, owner_value, attempt.fencing_token, attempts,
                                               options, sent);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (closed_) {  // closed while we were acquiring: give it back
          (void)backend_->Release(*state);
          return Status::InvalidArgument("client was closed during acquire");
        }
        held_.emplace(state.get(), state);
      }
      heartbeats_->Track(state);
      *out = std::move(state);
      return Status::Ok();
    }
    TimePoint now = Now();
    if (options.wait_ms == 0 || now >= wait_until) {
      stop_watching();
      auto waited = std::chrono::duration_cast<Millis>(now - start).count();
      std::string held_for = attempt.holder_ttl_ms == -1
                                 ? "with no expiry"
                                 : attempt.holder_ttl_ms >= 0
                                       ? "for " + std::to_string(attempt.holder_ttl_ms) + " ms more"
                                       : "";
      return Status::NotAcquired("lock '" + name + "' is held by another owner " + held_for +
                                 " (gave up after " + std::to_string(attempts) + " attempt" +
                                 (attempts == 1 ? "" : "s") + " in " + std::to_string(waited) +
                                 " ms)");
    }
    if (!watching) {
      // Subscribe before the next attempt, so a release between the two cannot be missed.
      backend_->Watch(name, &signal);
      watching = true;
      seen = signal.notifications();
      signal.WaitReady(std::min(wait_until, now + Millis(1000)));
      continue;
    }
    // Sleep until the holder releases (pub/sub), its lease runs out, the jittered fallback
    // retry, or the end of the wait, whichever comes first.
    TimePoint wake = now + Millis(RandomBetween(options.retry_min_ms, backoff));
    backoff = std::min(options.retry_max_ms, backoff * 2);
    if (attempt.holder_ttl_ms >= 0) wake = std::min(wake, now + Millis(attempt.holder_ttl_ms + 1));
    wake = std::min(wake, wait_until);
    signal.WaitNotified(&seen, wake);
  }
}

Status Client::NotHeldStatus(const LockState& lock) const {
  switch (lock.Phase()) {
    case LockPhase::kClosed:
      return Status::NotHeld("lock '" + lock.name + "' was released when its client was closed");
    case LockPhase::kReleased:
      return Status::NotHeld("lock '" + lock.name + "' was already released");
    default: {
      std::string reason = lock.LostReason();
      return Status::NotHeld("lock '" + lock.name + "' was lost" +
                             (reason.empty() ? std::string() : ": " + reason));
    }
  }
}

void Client::Forget(const std::shared_ptr<LockState>& lock) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    held_.erase(lock.get());
  }
  if (heartbeats_ != nullptr) heartbeats_->Untrack(lock);
}

Status Client::Release(const std::shared_ptr<LockState>& lock) {
  LockPhase phase = lock->Phase();
  if (phase == LockPhase::kClosed || phase == LockPhase::kReleased) return NotHeldStatus(*lock);
  if (phase == LockPhase::kLost) {
    Forget(lock);
    // Lost for a transient reason, the key may still be ours: clean up, best effort.
    (void)backend_->Release(*lock);
    return NotHeldStatus(*lock);
  }
  Status s = backend_->Release(*lock);
  if (s.ok() || s.code() == Code::kNotHeld) {
    if (s.code() == Code::kNotHeld) lock->SetLostReason("the server no longer had this owner's lock");
    if (!lock->Transition(s.ok() ? LockPhase::kReleased : LockPhase::kLost)) {
      Forget(lock);
      return NotHeldStatus(*lock);
    }
    Forget(lock);
    if (!s.ok()) return NotHeldStatus(*lock);
    return s;
  }
  // The server could not be asked: the lock stays ours until its lease runs out, and the
  // caller's handle is freed, so stop renewing it.
  lock->SetLostReason("release failed: " + s.message());
  lock->Transition(LockPhase::kReleased);
  Forget(lock);
  return s;
}

Status Client::Extend(const std::shared_ptr<LockState>& lock, uint64_t lease_ms) {
  Status s = CheckLease(lease_ms);
  if (!s.ok()) return s;
  if (lease_ms != 0 && lease_ms < 10) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " is too short (at least 10 ms, or 0 for no expiry)");
  }
  if (lock->heartbeat_explicit && lease_ms != 0 && lock->heartbeat_ms.load() >= lease_ms) {
    return Status::InvalidArgument("lease_ms " + std::to_string(lease_ms) +
                                   " must be longer than the lock's heartbeat_ms " +
                                   std::to_string(lock->heartbeat_ms.load()));
  }
  if (lock->Phase() != LockPhase::kHeld) return NotHeldStatus(*lock);
  TimePoint sent = Now();
  s = backend_->Extend(*lock, lease_ms);
  if (s.code() == Code::kNotHeld) {
    lock->SetLostReason("the server no longer had this owner's lock");
    lock->Transition(LockPhase::kLost);
    Forget(lock);
    return NotHeldStatus(*lock);
  }
  if (!s.ok()) return s;
  lock->lease_ms.store(lease_ms);
  if (!lock->heartbeat_explicit) {
    lock->heartbeat_ms.store(lease_ms == 0 ? 0 : std::max<uint64_t>(lease_ms / 3, 1));
  }
  lock->SetDeadline(sent, lease_ms);
  heartbeats_->Track(lock);
  return Status::Ok();
}

}  // namespace dlock
