#include "core/async_acquire.h"

#include <algorithm>
#include <utility>

#include "core/client.h"
#include "core/token.h"
#include "core/waiting.h"

namespace dlock {

AsyncAcquire::AsyncAcquire(Client* client, LockRequest request, AcquireOptions options,
                           CancelKey key, AcquireDone done)
    : client_(client),
      request_(std::move(request)),
      options_(std::move(options)),
      key_(key),
      done_(std::move(done)),
      start_(Now()),
      policy_(options_, client->backend()->NotifiesReleases(), start_),
      timer_(client->loop(), [this] { Attempt(); }) {}

AsyncAcquire::~AsyncAcquire() = default;

void AsyncAcquire::Start() {
  if (!request_.waiter_id.empty()) {
    // A fair waiter listens before it asks (as in Client::Acquire).
    policy_.MarkSubscribed();
    watching_ = true;
    client_->backend()->Watch(request_.name, this);
  }
  Attempt();
}

void AsyncAcquire::Attempt() {
  if (finished_) return;
  if (in_flight_) {  // the answer may predate the release: try once more after it
    released_meanwhile_ = true;
    return;
  }
  timer_.Cancel();
  in_flight_ = true;
  released_meanwhile_ = false;
  if (!std::exchange(grant_heard_, false)) ++attempts_;  // a confirmation is not a try
  TimePoint sent = Now();
  request_.queue_ms = WriterQueueMs(options_, sent, policy_.wait_until());
  client_->backend()->TryAcquireAsync(
      request_,
      [self = shared_from_this(), sent](const Status& s, const AcquireAttempt& attempt) {
        self->OnAttempt(s, attempt, sent);
      });
}

void AsyncAcquire::OnAttempt(const Status& s, const AcquireAttempt& attempt, TimePoint sent) {
  in_flight_ = false;
  if (finished_) {  // cancelled while the attempt was out: give back what it may have won
    if (s.ok() && attempt.acquired) {
      auto orphan = std::make_shared<LockState>(request_.name, request_.owner_value,
                                                attempt.fencing_token, attempts_, options_, sent,
                                                attempt.backend_data);
      client_->backend()->ReleaseAsync(orphan, [](const Status&) {});
    }
    return;
  }
  if (!s.ok()) {
    Finish(s, nullptr);
    return;
  }
  if (attempt.acquired) {
    Adopt(attempt, sent);
    return;
  }
  const TimePoint now = Now();
  if (grant_heard_ && now < policy_.wait_until()) {
    // Refused, then a grant was heard: confirm it (HandedOver).
    Attempt();
    return;
  }
  grant_heard_ = false;  // past the wait: leaving the line hands it on (or frees it)
  if (released_meanwhile_ && now < policy_.wait_until()) {
    Attempt();
    return;
  }
  WaitStep step = policy_.AfterRefusal(now, attempt.holder_ttl_ms, request_.queue_ms);
  switch (step.kind) {
    case WaitStep::Kind::kGiveUp:
      Finish(client_->NotAcquiredStatus(request_.name, attempt, attempts_, start_),
             nullptr);
      return;
    case WaitStep::Kind::kSubscribe:
      // The attempt follows when the subscription is live (OnWatchReady) or at step.until.
      watching_ = true;
      client_->backend()->Watch(request_.name, this);
      break;
    case WaitStep::Kind::kSleep:
      break;
  }
  timer_.StartAt(step.until);
}

void AsyncAcquire::OnWatchReady(bool live) {
  client_->loop()->Post([self = shared_from_this(), live] {
    bool was_live = self->live_;
    self->live_ = live;
    if (live && !was_live) self->Attempt();  // subscribed: now the retry cannot miss a release
  });
}

void AsyncAcquire::OnReleased() {
  client_->loop()->Post([self = shared_from_this()] { self->Attempt(); });
}

void AsyncAcquire::OnHandedOver(uint64_t) {
  client_->loop()->Post([self = shared_from_this()] { self->HandedOver(); });
}

// A grant heard on the channel is only a claim: anyone who may publish there, and can read this
// waiter's id from the line, can make one. The next attempt confirms it with the server, which
// finds the lock this waiter's (acquire.lua's "already ours", with a fresh token and what is
// left of the lease) or refuses it, and the waiter waits on. One round trip; not a try.
void AsyncAcquire::HandedOver() {
  if (finished_) return;  // Finish left the line, which gives back what was handed over
  grant_heard_ = true;
  if (!in_flight_) Attempt();  // else the answer in flight is followed by the confirmation
}

void AsyncAcquire::Adopt(const AcquireAttempt& attempt, TimePoint sent) {
  std::shared_ptr<LockState> lock;
  Status adopted = client_->Adopt(request_, attempt, attempts_, options_, sent, &lock);
  Finish(adopted, lock);
}

void AsyncAcquire::Cancel(const Status& why) {
  if (finished_) return;
  Finish(why, nullptr);
}

void AsyncAcquire::Finish(const Status& s, std::shared_ptr<LockState> lock) {
  finished_ = true;
  timer_.Cancel();
  if (watching_) client_->backend()->Unwatch(request_.name, this);
  watching_ = false;
  if (lock == nullptr && !request_.waiter_id.empty()) client_->backend()->LeaveLine(request_);
  auto self = shared_from_this();  // the client's registry may hold the last reference
  client_->ForgetPending(this);
  AcquireDone done = std::move(done_);
  client_->RunCallback([&] { done(s, std::move(lock)); });
}

}  // namespace dlock
