#include "loop/event_loop.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <future>

namespace dlock {

namespace {

timeval ToTimeval(Millis delay) {
  if (delay.count() < 0) delay = Millis(0);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(delay.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((delay.count() % 1000) * 1000);
  return tv;
}

// libevent needs its locking callbacks before any base exists that several threads touch.
bool EnableLibeventThreads() {
  static const int threads_ok = evthread_use_pthreads();
  return threads_ok == 0;
}
}  // namespace

Status EventLoop::Init() {
  wake_ = event_new(base_, -1, 0, &EventLoop::OnWake, this);
  if (wake_ == nullptr) return Status::Internal("event_new failed");
  return Status::Ok();
}

Status EventLoop::Wrap(event_base* base, std::unique_ptr<EventLoop>* out) {
  if (!EnableLibeventThreads()) return Status::Internal("evthread_use_pthreads failed");
  std::unique_ptr<EventLoop> loop(new EventLoop());
  loop->base_ = base;
  loop->thread_id_.store(std::this_thread::get_id());
  Status s = loop->Init();
  if (!s.ok()) return s;
  *out = std::move(loop);
  return Status::Ok();
}

Status EventLoop::Start(std::unique_ptr<EventLoop>* out) {
  if (!EnableLibeventThreads()) return Status::Internal("evthread_use_pthreads failed");
  std::unique_ptr<EventLoop> loop(new EventLoop());
  loop->base_ = event_base_new();
  if (loop->base_ == nullptr) return Status::Internal("event_base_new failed");
  loop->owns_base_ = true;
  Status s = loop->Init();
  if (!s.ok()) return s;
  EventLoop* self = loop.get();
  std::promise<void> started;
  auto started_future = started.get_future();
  loop->thread_ = std::thread([self, &started] {
    // libevent writes plain sockets with writev(), which raises SIGPIPE when the server has
    // closed the connection (a restart): on the library's own thread, block it, so that the
    // write fails with EPIPE and the connection is reported lost, instead of the signal's
    // default killing the caller's process. (Callers' threads, and their event_bases, are
    // theirs: there the writes dlock makes itself use MSG_NOSIGNAL.)
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    self->thread_id_.store(std::this_thread::get_id());
    started.set_value();
    event_base_loop(self->base_, EVLOOP_NO_EXIT_ON_EMPTY);
  });
  started_future.wait();
  *out = std::move(loop);
  return Status::Ok();
}

EventLoop::~EventLoop() {
  Stop();
  if (base_ != nullptr && owns_base_) event_base_free(base_);
}

void EventLoop::OnWake(int, short, void* arg) { static_cast<EventLoop*>(arg)->RunTasks(); }

void EventLoop::RunTasks() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task();
}

bool EventLoop::Post(std::function<void()> fn) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return false;
    first = tasks_.empty();
    tasks_.push_back(std::move(fn));
  }
  // event_active is thread-safe once evthread is on; one activation drains the whole queue.
  if (first) event_active(wake_, EV_READ, 0);
  return true;
}

void EventLoop::RunSync(const std::function<void()>& fn) {
  if (InLoopThread()) {
    fn();
    return;
  }
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
  }
  Post([&] {
    fn();
    std::lock_guard<std::mutex> lock(done_mu);
    done = true;
    done_cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(done_mu);
  done_cv.wait(lock, [&] { return done; });
}

void EventLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back([this] { event_base_loopbreak(base_); });
      if (tasks_.size() == 1) event_active(wake_, EV_READ, 0);
    }
    thread_.join();
  }
  std::deque<std::function<void()>> leftover;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    leftover.swap(tasks_);
  }
  // The loop is gone: what was queued runs here, against shut-down components, so that every
  // completion still reaches its callback (with an error).
  thread_id_.store(std::this_thread::get_id());
  for (auto& task : leftover) task();
  if (wake_ != nullptr) {
    event_free(wake_);  // nothing of ours may stay on a caller's base after close
    wake_ = nullptr;
  }
}

Timer::Timer(EventLoop* loop, std::function<void()> fn) : fn_(std::move(fn)) {
  ev_ = evtimer_new(loop->base(), &Timer::OnFire, this);
}

Timer::~Timer() {
  if (ev_ != nullptr) event_free(ev_);
}

void Timer::OnFire(int, short, void* arg) { static_cast<Timer*>(arg)->fn_(); }

void Timer::StartAfter(Millis delay) {
  if (ev_ == nullptr) return;
  const timeval tv = ToTimeval(delay);
  evtimer_add(ev_, &tv);
}

void Timer::StartAt(TimePoint when) {
  if (ev_ == nullptr) return;
  auto delay = std::chrono::duration_cast<std::chrono::microseconds>(when - Now());
  if (delay.count() < 0) delay = std::chrono::microseconds(0);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(delay.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(delay.count() % 1000000);
  evtimer_add(ev_, &tv);
}

void Timer::Cancel() {
  if (ev_ != nullptr) evtimer_del(ev_);
}

bool Timer::pending() const { return ev_ != nullptr && evtimer_pending(ev_, nullptr) != 0; }

void Timer::Free() {
  if (ev_ != nullptr) event_free(ev_);
  ev_ = nullptr;
}

TurnEnd::TurnEnd(EventLoop* loop, std::function<void()> fn) : loop_(loop), fn_(std::move(fn)) {
  ev_ = event_new(loop->base(), -1, 0, &TurnEnd::OnFire, this);
}

TurnEnd::~TurnEnd() {
  if (ev_ != nullptr) event_free(ev_);
}

void TurnEnd::OnFire(int, short, void* arg) { static_cast<TurnEnd*>(arg)->fn_(); }

void TurnEnd::Schedule() {
  if (ev_ == nullptr) {  // out of memory when made: on the next turn instead
    loop_->Post(fn_);
    return;
  }
  if (event_pending(ev_, EV_WRITE, nullptr) == 0) event_active(ev_, EV_WRITE, 0);
}

void EventLoop::RunOnceAfter(Millis delay, std::function<void()> fn) {
  auto* call = new std::function<void()>(std::move(fn));
  const timeval tv = ToTimeval(delay);
  event_base_once(base_, -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) {
    std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()>*>(arg));
    (*owned)();
  }, call, &tv);
}

DelayedCalls::~DelayedCalls() {
  for (Call* call : calls_) {
    event_free(call->ev);
    delete call;
  }
}

void DelayedCalls::After(Millis delay, std::function<void()> fn) {
  auto* call = new Call{this, nullptr, std::move(fn)};
  call->ev = evtimer_new(loop_->base(), &DelayedCalls::OnFire, call);
  if (call->ev == nullptr) {  // out of memory: run it on the next turn instead
    loop_->Post(std::move(call->fn));
    delete call;
    return;
  }
  calls_.insert(call);
  const timeval tv = ToTimeval(delay);
  evtimer_add(call->ev, &tv);
}

void DelayedCalls::OnFire(int, short, void* arg) {
  auto* call = static_cast<Call*>(arg);
  call->owner->calls_.erase(call);
  std::function<void()> fn = std::move(call->fn);
  event_free(call->ev);
  delete call;
  fn();
}

void DelayedCalls::RunAllNow() {
  std::unordered_set<Call*> calls;
  calls.swap(calls_);
  for (Call* call : calls) {
    event_free(call->ev);
    std::function<void()> fn = std::move(call->fn);
    delete call;
    fn();
  }
}

}  // namespace dlock

