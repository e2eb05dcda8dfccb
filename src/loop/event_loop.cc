#include "loop/event_loop.h"

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <future>

#include "loop/host_reactor.h"
#include "loop/libevent_reactor.h"

namespace dlock {

struct EventLoop::Once {
  EventLoop* loop;
  std::unique_ptr<Reactor::TimerHandle> timer;
  std::function<void()> fn;
};

Status EventLoop::Wrap(event_base* base, std::unique_ptr<EventLoop>* out) {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  std::unique_ptr<LibeventReactor> reactor;
  Status s = LibeventReactor::Make(base, &EventLoop::OnWake, loop.get(), &reactor);
  if (!s.ok()) return s;
  loop->reactor_ = std::move(reactor);
  loop->thread_id_.store(std::this_thread::get_id());
  *out = std::move(loop);
  return Status::Ok();
}

Status EventLoop::Drive(std::unique_ptr<HostLoop> host, std::unique_ptr<EventLoop>* out) {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  std::shared_ptr<HostReactor> reactor;
  Status s = HostReactor::Make(std::move(host), &EventLoop::OnWake, loop.get(), &reactor);
  if (!s.ok()) return s;
  loop->reactor_ = std::move(reactor);
  loop->thread_id_.store(std::this_thread::get_id());
  *out = std::move(loop);
  return Status::Ok();
}

Status EventLoop::Start(std::unique_ptr<EventLoop>* out) {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  std::unique_ptr<LibeventReactor> reactor;
  Status s = LibeventReactor::Make(nullptr, &EventLoop::OnWake, loop.get(), &reactor);
  if (!s.ok()) return s;
  loop->own_base_ = reactor.get();
  loop->reactor_ = std::move(reactor);
  loop->owns_thread_ = true;
  EventLoop* self = loop.get();
  std::promise<void> started;
  auto started_future = started.get_future();
  loop->thread_ = std::thread([self, &started] {
    // libevent writes plain sockets with writev(), which raises SIGPIPE when the server has
    // closed the connection (a restart): on the library's own thread, block it, so that the
    // write fails with EPIPE and the connection is reported lost, instead of the signal's
    // default killing the caller's process. (Callers' threads, and their loops, are theirs:
    // there the writes dlock makes itself use MSG_NOSIGNAL.)
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    self->thread_id_.store(std::this_thread::get_id());
    started.set_value();
    self->own_base_->Run();
  });
  started_future.wait();
  *out = std::move(loop);
  return Status::Ok();
}

EventLoop::~EventLoop() {
  Stop();
  reactor_.reset();  // a host reactor inside one of its own calls lives until that call ends
}

void EventLoop::OnWake(void* self) { static_cast<EventLoop*>(self)->RunTasks(); }

void EventLoop::RunTasks() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task();
}

bool EventLoop::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  const bool first = tasks_.empty();
  tasks_.push_back(std::move(fn));
  // One wake-up drains the whole queue. Made under the lock: Stop() shuts the reactor down
  // once stopped_ is set, never while a wake-up is being made.
  if (first) reactor_->Wake();
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
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back([this] { own_base_->Break(); });
      first = tasks_.size() == 1;
    }
    if (first) reactor_->Wake();
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
  for (Once* once : onces_) delete once;  // unrun; their timers go before the loop does
  onces_.clear();
  reactor_->Shutdown();
}

void EventLoop::RunOnceAfter(Millis delay, std::function<void()> fn) {
  auto* once = new Once{this, nullptr, std::move(fn)};
  once->timer = reactor_->NewTimer([](void* arg) {
    auto* o = static_cast<Once*>(arg);
    o->loop->onces_.erase(o);
    std::unique_ptr<Once> owned(o);
    std::function<void()> run = std::move(o->fn);
    owned.reset();
    run();
  }, once);
  if (once->timer == nullptr) {  // out of memory: on the next turn instead
    Post(std::move(once->fn));
    delete once;
    return;
  }
  onces_.insert(once);
  once->timer->ArmAfter(delay);
}

Timer::Timer(EventLoop* loop, std::function<void()> fn)
    : handle_(loop->reactor()->NewTimer(&Timer::OnFire, this)), fn_(std::move(fn)) {}

Timer::~Timer() = default;

void Timer::OnFire(void* self) { static_cast<Timer*>(self)->fn_(); }

void Timer::StartAfter(Millis delay) {
  if (handle_ != nullptr) handle_->ArmAfter(delay);
}

void Timer::StartAt(TimePoint when) {
  if (handle_ == nullptr) return;
  handle_->ArmAfter(std::chrono::duration_cast<std::chrono::microseconds>(when - Now()));
}

void Timer::Cancel() {
  if (handle_ != nullptr) handle_->Disarm();
}

bool Timer::pending() const { return handle_ != nullptr && handle_->armed(); }

void Timer::Free() { handle_.reset(); }

TurnEnd::TurnEnd(EventLoop* loop, std::function<void()> fn)
    : loop_(loop), handle_(loop->reactor()->NewTurnEnd(&TurnEnd::OnFire, this)), fn_(std::move(fn)) {}

TurnEnd::~TurnEnd() = default;

void TurnEnd::OnFire(void* self) { static_cast<TurnEnd*>(self)->fn_(); }

void TurnEnd::Schedule() {
  if (handle_ == nullptr) handle_ = loop_->reactor()->NewTurnEnd(&TurnEnd::OnFire, this);
  if (handle_ != nullptr) {
    handle_->Schedule();
    return;
  }
  // Still out of memory: on the next turn instead, unless this is gone by then.
  if (alive_ == nullptr) alive_ = std::make_shared<bool>(true);
  loop_->Post([alive = std::weak_ptr<bool>(alive_), this] {
    if (!alive.expired()) fn_();
  });
}

DelayedCalls::~DelayedCalls() {
  for (Call* call : calls_) delete call;
}

void DelayedCalls::After(Millis delay, std::function<void()> fn) {
  auto* call = new Call{this, nullptr, std::move(fn)};
  call->timer = loop_->reactor()->NewTimer(&DelayedCalls::OnFire, call);
  if (call->timer == nullptr) {  // out of memory: run it on the next turn instead
    loop_->Post(std::move(call->fn));
    delete call;
    return;
  }
  calls_.insert(call);
  call->timer->ArmAfter(delay);
}

void DelayedCalls::OnFire(void* arg) {
  auto* call = static_cast<Call*>(arg);
  call->owner->calls_.erase(call);
  std::function<void()> fn = std::move(call->fn);
  delete call;
  fn();
}

void DelayedCalls::RunAllNow() {
  std::unordered_set<Call*> calls;
  calls.swap(calls_);
  for (Call* call : calls) {
    std::function<void()> fn = std::move(call->fn);
    delete call;
    fn();
  }
}

}  // namespace dlock
