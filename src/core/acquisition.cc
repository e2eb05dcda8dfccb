#include "core/acquisition.h"

#include <algorithm>
#include <utility>

#include "core/waiting.h"

namespace dlock {

using Kind = Acquisition::Step::Kind;

Acquisition::Acquisition(LockRequest request, const AcquireOptions& options, bool notifies,
                         TimePoint start, Metrics* metrics)
    : request_(std::move(request)),
      options_(options),
      notifies_(notifies),
      in_line_(!request_.waiter_id.empty()),
      start_(start),
      wait_until_(WaitUntil(start, options.wait_ms)),
      backoff_ms_(options.retry_min_ms),
      metrics_(metrics),
      kind_index_(Metrics::KindIndex(request_.kind, request_.permits)) {}

// Dropped unfinished (its driver went away): it no longer waits.
Acquisition::~Acquisition() {
  if (started_ && !finished_ && metrics_ != nullptr) metrics_->WaiterEnded();
}

Acquisition::Step Acquisition::Start() {
  started_ = true;
  if (metrics_ != nullptr) {
    metrics_->WaiterStarted();
    metrics_->Emit([&] { return Event{Event::Type::kAcquiring, request_.name}; });
  }
  Step step = Step::Of(Kind::kAttempt);
  if (in_line_) {
    // A fair waiter watches before it asks, so that the release that hands it the lock, told
    // only once, cannot come between its refusal and its watch.
    watching_ = true;
    step.watch = true;
  }
  return step;
}

const LockRequest& Acquisition::NextAttempt(TimePoint sent) {
  in_flight_ = true;
  released_meanwhile_ = false;
  live_when_sent_ = live_;
  confirming_ = std::exchange(grant_heard_, false);
  if (!confirming_) {  // a confirmation is not a try
    ++attempts_;
    if (metrics_ != nullptr) metrics_->AttemptSent(kind_index_);
  }
  sent_ = sent;
  request_.queue_ms = WriterQueueMs(options_, in_line_, sent, wait_until_);
  return request_;
}

Acquisition::Step Acquisition::Retry() {
  if (finished_) return {};
  if (in_flight_) {  // its answer may predate the release: try once more after it
    released_meanwhile_ = true;
    return {};
  }
  return Step::Of(Kind::kAttempt);
}

Acquisition::Step Acquisition::WatchLive(bool live) {
  const bool was_live = std::exchange(live_, live);
  // Watching now: the next attempt's refusal cannot miss a release.
  return live && !was_live ? Retry() : Step{};
}

// A watch that failed also reports a release (Backend::Watch), so that its waiter tries again.
Acquisition::Step Acquisition::Released() { return Retry(); }

Acquisition::Step Acquisition::TimerFired() { return Retry(); }

// A grant heard on the channel is only a claim: anyone who may publish there, and can read this
// waiter's id from the line, can make one. The next attempt confirms it with the server, which
// finds the lock this waiter's (acquire.lua's "already ours", with a fresh token and what is
// left of the lease) or refuses it, and the waiter waits on in its place. One round trip.
Acquisition::Step Acquisition::HandedOver() {
  if (finished_) return {};  // leaving the line gave back what was handed over
  grant_heard_ = true;
  return in_flight_ ? Step{} : Step::Of(Kind::kAttempt);  // else after the answer
}

Acquisition::Step Acquisition::Cancel(const Status& why) {
  return finished_ ? Step{} : Finish(Kind::kFinished, why);
}

Acquisition::Step Acquisition::Finish(Kind kind, Status status) {
  finished_ = true;
  if (metrics_ != nullptr) {
    const AcquireOutcome outcome = kind == Kind::kAcquired              ? AcquireOutcome::kAcquired
                                   : kind == Kind::kGaveUp             ? AcquireOutcome::kNotAcquired
                                   : status.code() == Code::kCancelled ? AcquireOutcome::kCancelled
                                                                       : AcquireOutcome::kError;
    const Clock::duration waited = Now() - start_;
    metrics_->AcquireEnded(kind_index_, outcome, waited, kind == Kind::kAcquired && confirming_, request_.name);
    if (started_) metrics_->WaiterEnded();
    metrics_->Emit([&] {
      Event e{kind == Kind::kAcquired ? Event::Type::kAcquired : Event::Type::kNotAcquired, request_.name};
      e.attempts = attempts_;
      e.elapsed_ms = ElapsedMs(waited);
      e.fencing_token = kind == Kind::kAcquired ? won_token_ : 0;
      e.status = kind == Kind::kAcquired ? 0
                 : kind == Kind::kGaveUp ? static_cast<int>(Code::kNotAcquired)
                                         : static_cast<int>(status.code());
      e.detail = kind == Kind::kFinished ? status.message() : std::string();
      return e;
    });
  }
  Step step = Step::Of(kind);
  step.unwatch = std::exchange(watching_, false);
  step.status = std::move(status);
  // A waiter that leaves without the lock gives up its place, which hands on (or frees) a grant
  // heard but not confirmed.
  step.leave_line = in_line_ && kind != Kind::kAcquired;
  return step;
}

Acquisition::Step Acquisition::Answered(const Status& s, const AcquireAttempt& answer,
                                        TimePoint now) {
  in_flight_ = false;
  if (finished_) return {};  // cancelled meanwhile: its driver gives back what it may have won
  if (!s.ok()) return Finish(Kind::kFinished, s);
  if (metrics_ != nullptr) metrics_->AttemptAnswered(now - sent_);
  if (answer.acquired) {
    won_token_ = answer.fencing_token;
    return Finish(Kind::kAcquired);
  }
  // Refused, then a grant was heard: confirm it. Past the wait, leaving the line hands it on.
  if (grant_heard_ && now < wait_until_) return Step::Of(Kind::kAttempt);
  grant_heard_ = false;
  if (released_meanwhile_ && now < wait_until_) return Step::Of(Kind::kAttempt);
  return AfterRefusal(now, answer.holder_ttl_ms);
}

Acquisition::Step Acquisition::AfterRefusal(TimePoint now, int64_t holder_ttl_ms) {
  if (options_.wait_ms == 0 || now >= wait_until_) return Finish(Kind::kGaveUp);
  TimePoint until = wait_until_;
  const uint64_t queue_ms = request_.queue_ms;
  // Within half of the refused attempt's writer announcement, to renew it.
  if (queue_ms > 0) until = std::min(until, now + Millis(std::max<uint64_t>(queue_ms / 2, 1)));
  // A fair waiter's place in line says how long its lease may be counted from its last
  // attempt (a release hands the lock over with what is left of it): it renews its place
  // within a third of the lease, so that a hand-over finds at least two thirds left.
  if (queue_ms > 0 && options_.fair && options_.lease_ms > 0) {
    until = std::min(until, now + Millis(std::max<uint64_t>(options_.lease_ms / 3, 1)));
  }
  if (notifies_ && !watching_) {
    watching_ = true;
    return Step::WaitUntil(std::min(until, now + kWatchLiveWait), /*watch=*/true);
  }
  until = std::min(NextWake(now, holder_ttl_ms, options_, &backoff_ms_), until);
  // In line but not yet listening when the attempt left: a hand-over may have been missed.
  // Try again once listening (WatchLive), or soon.
  if (in_line_ && !live_when_sent_) until = std::min(until, now + kWatchLiveWait);
  return Step::WaitUntil(until);
}

}  // namespace dlock
