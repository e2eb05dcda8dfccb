#include "core/observer.h"

#include "core/client.h"

namespace dlock {

Observer::Observer(Client* client, std::string name, Report report)
    : client_(client), name_(std::move(name)), report_(std::move(report)) {}

void Observer::Start() {
  if (stopped_ || cancelled_) return;
  poll_ = std::make_unique<Timer>(client_->loop(), [self = shared_from_this()] { self->Read(); });
  if (client_->backend()->NotifiesReleases()) {
    client_->backend()->Watch(name_, this);
    watching_ = true;
  }
  Read();
}

void Observer::Cancel() {
  {
    std::lock_guard<std::recursive_mutex> wait_for_report(report_mu_);
    if (cancelled_.exchange(true)) return;
  }
  client_->ForgetObserver(this);
  client_->loop()->Post([self = shared_from_this()] { self->Stop(); });
}

void Observer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (watching_) client_->backend()->Unwatch(name_, this);
  watching_ = false;
  poll_.reset();
}

void Observer::OnWatchReady(bool live) {
  if (live) ReadSoon();  // a change may have gone by while the watch was not live
}

void Observer::OnReleased() { ReadSoon(); }

void Observer::ReadSoon() {
  client_->loop()->Post([self = shared_from_this()] { self->Read(); });
}

void Observer::Read() {
  if (stopped_ || cancelled_) return;
  if (reading_) {
    read_again_ = true;  // once the read in flight is answered: it may have left before the change
    return;
  }
  reading_ = true;
  poll_->Cancel();
  client_->backend()->InspectAsync(name_, [self = shared_from_this()](const Status& s, LockInfo info) {
    self->Answered(s, info);
  });
}

void Observer::Answered(const Status& status, const LockInfo& info) {
  reading_ = false;
  if (stopped_ || cancelled_) return;
  // A failed read reports nothing: the next one, a poll later, says what holds then.
  if (status.ok()) {
    const bool leads = info.holders.size() == 1 && info.kind == LockKind::kExclusive && info.permits == 0;
    const HolderInfo* leader = leads ? &info.holders[0] : nullptr;
    if (News(leader)) {
      std::lock_guard<std::recursive_mutex> reporting(report_mu_);
      if (!cancelled_) client_->RunCallback([&] { report_(leader); });
    }
  }
  if (stopped_ || cancelled_) return;  // cancelled by the report
  if (read_again_) {
    read_again_ = false;
    Read();
    return;
  }
  poll_->StartAfter(kObservePoll);
}

bool Observer::News(const HolderInfo* leader) {
  if (leader == nullptr) {
    if (reported_ && !leading_) return false;
    reported_ = true;
    leading_ = false;
    return true;
  }
  const uint64_t term = leader->fencing_token;
  if (reported_) {
    if (term < term_) return false;                // an older leader: a stale read
    if (term == term_ && term != 0 && !leading_) return false;  // its end was reported already
    // The same leader saying the same: where the backend shows no term (0: etcd's layout=
    // mutex), its hold id tells one leader from the next.
    if (leading_ && term == term_ && leader->value == value_ && leader->owner == owner_ &&
        (term != 0 || leader->hold_id == hold_id_)) {
      return false;
    }
  }
  reported_ = true;
  leading_ = true;
  term_ = term;
  owner_ = leader->owner;
  value_ = leader->value;
  hold_id_ = leader->hold_id;
  return true;
}

}  // namespace dlock
