#include "loop/host_reactor.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace dlock {

class HostReactor::Timer : public TimerHandle {
 public:
  Timer(HostReactor* reactor, Fn fn, void* arg) : reactor_(reactor), fn_(fn), arg_(arg) {}
  ~Timer() override { Disarm(); }
  // Any thread (heartbeats arm theirs from the thread that took a lock, as libevent allows).
  // The host hears of it on the loop thread only: at once there, else through a wake-up when
  // this timer is now the first due.
  void ArmAfter(std::chrono::microseconds delay) override {
    if (delay.count() < 0) delay = std::chrono::microseconds(0);
    {
      std::lock_guard<std::mutex> lock(reactor_->timers_mu_);
      if (reactor_->host_ == nullptr) return;  // shut down
      Unlink();
      position_ = reactor_->timers_.emplace(
          std::make_pair(Now() + delay, ++reactor_->timer_sequence_), this);
      armed_ = true;
      if (!reactor_->InLoopThread()) {
        // Under the lock: Shutdown closes the wake-up fd under it too.
        if (reactor_->timers_.begin() == position_) reactor_->Wake();
        return;
      }
    }
    if (reactor_->depth_ == 0) reactor_->UpdateHostTimer();  // else the turn's end does
  }
  void Disarm() override {
    {
      std::lock_guard<std::mutex> lock(reactor_->timers_mu_);
      if (!armed_) return;
      Unlink();
    }
    // A host timer left early only costs a turn: the loop's thread catches up when it can.
    if (reactor_->InLoopThread() && reactor_->depth_ == 0) reactor_->UpdateHostTimer();
  }
  bool armed() const override {
    std::lock_guard<std::mutex> lock(reactor_->timers_mu_);
    return armed_;
  }

 private:
  friend class HostReactor;
  void Unlink() {  // timers_mu_ held
    if (armed_) reactor_->timers_.erase(position_);
    armed_ = false;
  }
  HostReactor* reactor_;
  Fn fn_;
  void* arg_;
  bool armed_ = false;  // and position_: under reactor_->timers_mu_
  decltype(HostReactor::timers_)::iterator position_;
};

class HostReactor::Fd : public FdHandle {
 public:
  Fd(HostReactor* reactor, int fd, FdFn fn, void* arg)
      : reactor_(reactor), fd_(fd), fn_(fn), arg_(arg) {
    reactor_->fds_[fd] = this;
  }
  ~Fd() override {
    if (reactor_ == nullptr) return;
    Want(false, false);
    auto it = reactor_->fds_.find(fd_);
    if (it != reactor_->fds_.end() && it->second == this) reactor_->fds_.erase(it);
  }
  void Want(bool read, bool write) override {
    if (reactor_ == nullptr || (read == read_ && write == write_)) return;
    read_ = read;
    write_ = write;
    reactor_->host_->WatchFd(reactor_, fd_, read, write, &slot_);
    if (!read && !write) slot_ = nullptr;  // the host gave up what it kept for the fd
  }

 private:
  friend class HostReactor;
  HostReactor* reactor_;
  int fd_;
  FdFn fn_;
  void* arg_;
  bool read_ = false;
  bool write_ = false;
  void* slot_ = nullptr;
};

class HostReactor::TurnEnd : public TurnEndHandle {
 public:
  TurnEnd(HostReactor* reactor, Fn fn, void* arg) : reactor_(reactor), fn_(fn), arg_(arg) {}
  ~TurnEnd() override {
    if (scheduled_ && reactor_ != nullptr) {
      auto& line = reactor_->turn_ends_;
      line.erase(std::find(line.begin(), line.end(), this));
    }
  }
  void Schedule() override {
    if (scheduled_ || reactor_ == nullptr) return;
    scheduled_ = true;
    reactor_->turn_ends_.push_back(this);
    // Scheduled outside any call from the host (the caller's own code on the loop thread):
    // the host's next turn runs it.
    if (reactor_->depth_ == 0) reactor_->AskTurn();
  }

 private:
  friend class HostReactor;
  HostReactor* reactor_;
  Fn fn_;
  void* arg_;
  bool scheduled_ = false;
};

class HostReactor::Turn {
 public:
  explicit Turn(HostReactor* reactor) : reactor_(reactor) { ++reactor_->depth_; }
  ~Turn() {
    if (reactor_->depth_ == 1) reactor_->EndTurn();
    if (--reactor_->depth_ == 0) reactor_->UpdateHostTimer();
  }

 private:
  HostReactor* reactor_;
};

Status HostReactor::Make(std::unique_ptr<HostLoop> host, Fn wake, void* arg,
                         std::shared_ptr<HostReactor>* out) {
  std::shared_ptr<HostReactor> reactor(new HostReactor());
  reactor->host_ = std::move(host);
  reactor->wake_fn_ = wake;
  reactor->wake_arg_ = arg;
  reactor->thread_ = std::this_thread::get_id();
  reactor->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (reactor->wake_fd_ < 0) {
    return Status::Internal(std::string("cannot make the loop's wake-up eventfd: ") +
                            std::strerror(errno));
  }
  reactor->wake_watch_ = reactor->NewFd(reactor->wake_fd_, &HostReactor::OnWakeFd, reactor.get());
  reactor->wake_watch_->Want(true, false);
  *out = std::move(reactor);
  return Status::Ok();
}

HostReactor::~HostReactor() { Shutdown(); }

void HostReactor::Shutdown() {
  wake_fn_ = nullptr;
  if (host_ == nullptr) return;
  wake_watch_.reset();
  {
    std::lock_guard<std::mutex> lock(timers_mu_);  // a timer armed elsewhere may be waking us
    if (wake_fd_ >= 0) close(wake_fd_);
    wake_fd_ = -1;
  }
  // The client's parts have let go of their handles by now; any left stop watching and
  // forget this reactor.
  for (auto& [fd, watch] : fds_) {
    if (watch->read_ || watch->write_) host_->WatchFd(this, fd, false, false, &watch->slot_);
    watch->reactor_ = nullptr;
  }
  fds_.clear();
  {
    std::lock_guard<std::mutex> lock(timers_mu_);
    for (auto& entry : timers_) entry.second->armed_ = false;
    timers_.clear();
  }
  for (TurnEnd* turn_end : turn_ends_) {
    turn_end->scheduled_ = false;
    turn_end->reactor_ = nullptr;
  }
  turn_ends_.clear();
  wake_pending_ = false;
  turn_asked_ = false;
  if (host_timer_set_) host_->SetTimer(this, -1);
  host_timer_set_ = false;
  std::unique_ptr<HostLoop> host;
  {
    std::lock_guard<std::mutex> lock(timers_mu_);  // no timer is armed from now on
    host = std::move(host_);
  }
  host->Cleanup();
}

std::unique_ptr<Reactor::TimerHandle> HostReactor::NewTimer(Fn fn, void* arg) {
  return std::make_unique<Timer>(this, fn, arg);
}

std::unique_ptr<Reactor::FdHandle> HostReactor::NewFd(int fd, FdFn fn, void* arg) {
  return std::make_unique<Fd>(this, fd, fn, arg);
}

std::unique_ptr<Reactor::TurnEndHandle> HostReactor::NewTurnEnd(Fn fn, void* arg) {
  return std::make_unique<TurnEnd>(this, fn, arg);
}

void HostReactor::Wake() {
  // Shut down: callers see to it that this cannot race with the close (Post checks the loop's
  // stopped_ under its lock, timers hold timers_mu_).
  if (wake_fd_ < 0) return;
  // Inside a call from the host, on its thread: at that call's end, no system call. (Outside
  // one, the eventfd even on the loop's thread: Post calls this under its lock, where no hook
  // of the host's should run. The hot path, a write's flush, is a turn end: AskTurn.)
  if (InLoopThread() && depth_ > 0) {
    wake_pending_ = true;
    return;
  }
  if (wake_fd_armed_.exchange(true)) return;  // a wake-up is on its way already
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = write(wake_fd_, &one, sizeof one);
  } while (n < 0 && errno == EINTR);
}

void HostReactor::OnWakeFd(void* self, bool, bool) {
  auto* reactor = static_cast<HostReactor*>(self);
  uint64_t count;
  while (read(reactor->wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  // Drained before it is re-armed: a Wake() that saw it armed has queued its work already,
  // and the turn's end runs that work after this.
  reactor->wake_fd_armed_.store(false);
  reactor->wake_pending_ = true;
}

void HostReactor::FdReady(int fd, bool readable, bool writable) {
  std::shared_ptr<HostReactor> keep = shared_from_this();
  if (host_ == nullptr) return;
  Turn turn(this);
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;  // stopped before the host's report reached us
  Fd* watch = it->second;
  readable = readable && watch->read_;
  writable = writable && watch->write_;
  if (readable || writable) watch->fn_(watch->arg_, readable, writable);  // may free watch
}

void HostReactor::TimerFired() {
  std::shared_ptr<HostReactor> keep = shared_from_this();
  if (host_ == nullptr) return;
  Turn turn(this);
  host_timer_set_ = false;
  turn_asked_ = false;
  // What is due now; a timer armed by one of these callbacks waits for the next turn.
  const TimePoint now = Now();
  std::unique_lock<std::mutex> lock(timers_mu_);
  const uint64_t last = timer_sequence_;
  while (!timers_.empty()) {
    auto first = timers_.begin();
    if (first->first.first > now || first->first.second > last) break;
    Timer* timer = first->second;
    timer->Unlink();
    lock.unlock();
    timer->fn_(timer->arg_);  // may free timer, or others (each unlinks itself)
    lock.lock();
  }
}

void HostReactor::AskTurn() {
  if (host_ == nullptr || turn_asked_) return;
  turn_asked_ = true;
  host_timer_set_ = true;
  host_timer_due_ = TimePoint::min();  // no timer's: the next UpdateHostTimer replaces it
  host_->SetTimer(this, 0);
}

void HostReactor::EndTurn() {
  // This turn's end does what a turn asked for would: UpdateHostTimer, next, replaces it.
  turn_asked_ = false;
  while (!turn_ends_.empty() || wake_pending_) {
    while (!turn_ends_.empty()) {
      TurnEnd* turn_end = turn_ends_.front();
      turn_ends_.erase(turn_ends_.begin());
      turn_end->scheduled_ = false;
      turn_end->fn_(turn_end->arg_);
    }
    if (wake_pending_) {
      wake_pending_ = false;
      if (wake_fn_ != nullptr) wake_fn_(wake_arg_);
    }
  }
}

void HostReactor::UpdateHostTimer() {
  if (host_ == nullptr || turn_asked_) return;  // a turn comes first, and updates it after
  TimePoint due;
  {
    std::lock_guard<std::mutex> lock(timers_mu_);
    if (!timers_.empty()) due = timers_.begin()->first.first;
  }
  if (due == TimePoint()) {
    if (host_timer_set_) host_->SetTimer(this, -1);
    host_timer_set_ = false;
    return;
  }
  if (host_timer_set_ && due == host_timer_due_) return;
  // Rounded up: a host timer that fires before anything is due only costs a turn.
  const auto wait = due - Now();
  int64_t ms = wait.count() <= 0 ? 0 : std::chrono::ceil<Millis>(wait).count();
  host_timer_set_ = true;
  host_timer_due_ = due;
  host_->SetTimer(this, ms);
}

}  // namespace dlock
