#include "core/async_acquire.h"

#include <utility>

#include "core/client.h"

namespace dlock {

using StepKind = Acquisition::Step::Kind;

AsyncAcquire::AsyncAcquire(Client* client, LockRequest request, AcquireOptions options,
                           CancelKey key, AcquireDone done)
    : client_(client),
      options_(std::move(options)),
      key_(key),
      done_(std::move(done)),
      acquisition_(std::move(request), options_, client->backend()->NotifiesReleases(), Now(),
                   client->metrics()),
      timer_(client->loop(), [this] { Execute(acquisition_.TimerFired()); }) {}

AsyncAcquire::~AsyncAcquire() = default;

void AsyncAcquire::Start() { Execute(acquisition_.Start()); }

void AsyncAcquire::Execute(const Acquisition::Step& step, const AcquireAttempt* answer,
                           TimePoint sent) {
  Backend* backend = client_->backend();
  const LockRequest& request = acquisition_.request();
  if (step.watch) {
    backend->Watch(request.name, this);
    // A name watched already is live at once (told inside Watch, the event posted): an attempt
    // sent now cannot miss a release, and must not be taken for one sent before the watch.
    if (heard_live_.load()) {
      Acquisition::Step live = acquisition_.WatchLive(true);
      if (live.kind == StepKind::kAttempt) return Execute(live);
    }
  }
  if (step.unwatch) backend->Unwatch(request.name, this);
  if (step.leave_line) backend->LeaveLine(request);
  switch (step.kind) {
    case StepKind::kNone:
      return;
    case StepKind::kAttempt:
      timer_.Cancel();
      Send();
      return;
    case StepKind::kWait:
      timer_.StartAt(step.until);
      return;
    case StepKind::kAcquired: {
      std::shared_ptr<LockState> lock;
      Status adopted = client_->Adopt(request, *answer, acquisition_.attempts(), options_, sent,
                                      &lock);
      Finish(adopted, std::move(lock));
      return;
    }
    case StepKind::kGaveUp:
      Finish(client_->NotAcquiredStatus(request.name, *answer, acquisition_.attempts(),
                                        acquisition_.start()),
             nullptr);
      return;
    case StepKind::kFinished:
      Finish(step.status, nullptr);
      return;
  }
}

void AsyncAcquire::Send() {
  const TimePoint sent = Now();
  client_->backend()->TryAcquireAsync(
      acquisition_.NextAttempt(sent),
      [self = shared_from_this(), sent](const Status& s, const AcquireAttempt& attempt) {
        self->OnAttempt(s, attempt, sent);
      });
}

void AsyncAcquire::OnAttempt(const Status& s, const AcquireAttempt& attempt, TimePoint sent) {
  if (acquisition_.finished()) {  // cancelled while the attempt was out: give back what it won
    (void)acquisition_.Answered(s, attempt, Now());
    const LockRequest& in_line = acquisition_.request();
    // The attempt may have put the waiter back in line after it left (etcd's layout=mutex: its
    // key made again): it leaves again.
    if (!in_line.waiter_id.empty() && !(s.ok() && attempt.acquired)) client_->backend()->LeaveLine(in_line);
    if (s.ok() && attempt.acquired) {
      const LockRequest& request = acquisition_.request();
      auto orphan = std::make_shared<LockState>(request.name, request.owner_value,
                                                attempt.fencing_token, acquisition_.attempts(),
                                                options_, sent, attempt.backend_data);
      orphan->given_back.store(true);
      client_->backend()->ReleaseAsync(orphan, [](const Status&) {});
    }
    return;
  }
  Execute(acquisition_.Answered(s, attempt, Now()), &attempt, sent);
}

// The backend calls these under its own locks: they only post the event to the loop.
template <typename Event>
void AsyncAcquire::Post(Event event) {
  client_->loop()->Post([self = shared_from_this(), event] { self->Execute(event(self.get())); });
}

void AsyncAcquire::OnWatchReady(bool live) {
  heard_live_.store(live);
  Post([live](AsyncAcquire* self) { return self->acquisition_.WatchLive(live); });
}

void AsyncAcquire::OnReleased() {
  Post([](AsyncAcquire* self) { return self->acquisition_.Released(); });
}

void AsyncAcquire::OnHandedOver(uint64_t) {
  Post([](AsyncAcquire* self) { return self->acquisition_.HandedOver(); });
}

void AsyncAcquire::Cancel(const Status& why) { Execute(acquisition_.Cancel(why)); }

void AsyncAcquire::Finish(const Status& s, std::shared_ptr<LockState> lock) {
  timer_.Cancel();
  auto self = shared_from_this();  // the client's registry may hold the last reference
  client_->ForgetPending(this);
  client_->Complete([done = std::move(done_), s, lock = std::move(lock)]() mutable {
    done(s, std::move(lock));
  });
}

}  // namespace dlock
