#include "loop/libevent_reactor.h"

#include <event2/event.h>
#include <event2/thread.h>

namespace dlock {
namespace {

timeval ToTimeval(std::chrono::microseconds delay) {
  if (delay.count() < 0) delay = std::chrono::microseconds(0);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(delay.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(delay.count() % 1000000);
  return tv;
}

// libevent needs its locking callbacks before any base exists that several threads touch.
bool EnableLibeventThreads() {
  static const int threads_ok = evthread_use_pthreads();
  return threads_ok == 0;
}

// One libevent event and the plain callback it runs; the three handle kinds differ only in
// what they add.
struct Callback {
  Reactor::Fn fn;
  void* arg;
  static void Run(evutil_socket_t, short, void* self) {
    auto* c = static_cast<Callback*>(self);
    c->fn(c->arg);
  }
};

class LibeventTimer : public Reactor::TimerHandle {
 public:
  LibeventTimer(event_base* base, Reactor::Fn fn, void* arg) : callback_{fn, arg} {
    ev_ = evtimer_new(base, &Callback::Run, &callback_);
  }
  ~LibeventTimer() override {
    if (ev_ != nullptr) event_free(ev_);
  }
  bool made() const { return ev_ != nullptr; }
  void ArmAfter(std::chrono::microseconds delay) override {
    const timeval tv = ToTimeval(delay);
    evtimer_add(ev_, &tv);
  }
  void Disarm() override { evtimer_del(ev_); }
  bool armed() const override { return evtimer_pending(ev_, nullptr) != 0; }

 private:
  Callback callback_;
  event* ev_ = nullptr;
};

class LibeventFd : public Reactor::FdHandle {
 public:
  LibeventFd(event_base* base, int fd, Reactor::FdFn fn, void* arg)
      : base_(base), fd_(fd), fn_(fn), arg_(arg) {}
  ~LibeventFd() override {
    if (ev_ != nullptr) event_free(ev_);
  }
  void Want(bool read, bool write) override {
    if (ev_ != nullptr) event_del(ev_);
    if (!read && !write) return;
    const short kinds = EV_PERSIST | (read ? EV_READ : 0) | (write ? EV_WRITE : 0);
    if (ev_ != nullptr) {
      event_assign(ev_, base_, fd_, kinds, &LibeventFd::OnEvent, this);
    } else {
      ev_ = event_new(base_, fd_, kinds, &LibeventFd::OnEvent, this);
    }
    if (ev_ != nullptr) event_add(ev_, nullptr);
  }

 private:
  static void OnEvent(evutil_socket_t, short kinds, void* self) {
    auto* watch = static_cast<LibeventFd*>(self);
    watch->fn_(watch->arg_, (kinds & EV_READ) != 0, (kinds & EV_WRITE) != 0);  // may free watch
  }
  event_base* base_;
  int fd_;
  Reactor::FdFn fn_;
  void* arg_;
  event* ev_ = nullptr;
};

class LibeventTurnEnd : public Reactor::TurnEndHandle {
 public:
  LibeventTurnEnd(event_base* base, Reactor::Fn fn, void* arg) : callback_{fn, arg} {
    ev_ = event_new(base, -1, 0, &Callback::Run, &callback_);
  }
  ~LibeventTurnEnd() override {
    if (ev_ != nullptr) event_free(ev_);
  }
  bool made() const { return ev_ != nullptr; }
  // event_active: no system call; the event runs after the callbacks already due this turn.
  void Schedule() override {
    if (event_pending(ev_, EV_WRITE, nullptr) == 0) event_active(ev_, EV_WRITE, 0);
  }

 private:
  Callback callback_;
  event* ev_ = nullptr;
};

}  // namespace

Status LibeventReactor::Make(event_base* base, Fn wake, void* arg,
                             std::unique_ptr<LibeventReactor>* out) {
  if (!EnableLibeventThreads()) return Status::Internal("evthread_use_pthreads failed");
  std::unique_ptr<LibeventReactor> reactor(new LibeventReactor());
  if (base == nullptr) {
    base = event_base_new();
    if (base == nullptr) return Status::Internal("event_base_new failed");
    reactor->owns_base_ = true;
  }
  reactor->base_ = base;
  reactor->wake_fn_ = wake;
  reactor->wake_arg_ = arg;
  // Activated (never added) from any thread: event_active is thread-safe once evthread is on,
  // and one activation runs wake once however many came before it ran.
  reactor->wake_ = event_new(base, -1, 0, &LibeventReactor::OnWake, reactor.get());
  if (reactor->wake_ == nullptr) return Status::Internal("event_new failed");
  *out = std::move(reactor);
  return Status::Ok();
}

LibeventReactor::~LibeventReactor() {
  Shutdown();
  if (base_ != nullptr && owns_base_) event_base_free(base_);
}

std::unique_ptr<Reactor::TimerHandle> LibeventReactor::NewTimer(Fn fn, void* arg) {
  auto timer = std::make_unique<LibeventTimer>(base_, fn, arg);
  if (!timer->made()) return nullptr;
  return timer;
}

std::unique_ptr<Reactor::FdHandle> LibeventReactor::NewFd(int fd, FdFn fn, void* arg) {
  return std::make_unique<LibeventFd>(base_, fd, fn, arg);
}

std::unique_ptr<Reactor::TurnEndHandle> LibeventReactor::NewTurnEnd(Fn fn, void* arg) {
  auto turn_end = std::make_unique<LibeventTurnEnd>(base_, fn, arg);
  if (!turn_end->made()) return nullptr;
  return turn_end;
}

void LibeventReactor::OnWake(int, short, void* self) {
  auto* reactor = static_cast<LibeventReactor*>(self);
  reactor->wake_fn_(reactor->wake_arg_);
}

void LibeventReactor::Wake() {
  if (wake_ != nullptr) event_active(wake_, EV_READ, 0);
}

void LibeventReactor::Shutdown() {
  if (wake_ != nullptr) event_free(wake_);
  wake_ = nullptr;
}

void LibeventReactor::Run() { event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY); }

void LibeventReactor::Break() { event_base_loopbreak(base_); }

}  // namespace dlock
