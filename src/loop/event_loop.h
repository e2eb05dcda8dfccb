// An event loop and, for the library's own, the thread that runs it. Everything that touches a
// connection, a timer or a heartbeat runs on the loop thread; other threads hand work over
// with Post(). Three kinds: a libevent base on a thread the library owns (Start), the caller's
// libevent base (Wrap), and the caller's own loop through its hooks (Drive). Which one is
// underneath (loop/reactor.h) is this folder's business only.
#ifndef DLOCK_LOOP_EVENT_LOOP_H_
#define DLOCK_LOOP_EVENT_LOOP_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/clock.h"
#include "core/status.h"
#include "loop/reactor.h"

struct event_base;

namespace dlock {

class HostLoop;
class HostReactor;
class LibeventReactor;

class EventLoop {
 public:
  // Creates an event_base and starts a thread running it.
  static Status Start(std::unique_ptr<EventLoop>* out);
  // Uses the caller's base, run by the caller on the calling thread; creates no thread.
  static Status Wrap(event_base* base, std::unique_ptr<EventLoop>* out);
  // Uses the caller's loop through host, driven by the caller on the calling thread; creates
  // no thread. The host calls back the HostReactor its hooks are given.
  static Status Drive(std::unique_ptr<HostLoop> host, std::unique_ptr<EventLoop>* out);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  Reactor* reactor() const { return reactor_.get(); }
  bool owns_thread() const { return owns_thread_; }
  bool InLoopThread() const { return std::this_thread::get_id() == thread_id_.load(); }

  // Runs fn on the loop thread soon. Thread-safe. False (fn dropped) once Stop() has run.
  bool Post(std::function<void()> fn);
  // Runs fn on the loop thread and waits for it; inline when called on the loop thread.
  void RunSync(const std::function<void()>& fn);
  // Runs fn on the loop thread once, after delay. Loop thread only. For teardown steps that
  // outlive every object that could own a Timer; fn runs only while the loop runs (and is
  // dropped, unrun, with the loop).
  void RunOnceAfter(Millis delay, std::function<void()> fn);
  // Stops the loop, joins its thread, then runs what was still queued on the calling thread
  // (so that no posted completion is lost). Idempotent.
  void Stop();

 private:
  struct Once;
  EventLoop() = default;
  static void OnWake(void* self);
  void RunTasks();

  std::shared_ptr<Reactor> reactor_;
  LibeventReactor* own_base_ = nullptr;  // the reactor, when it runs on thread_
  bool owns_thread_ = false;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::unordered_set<Once*> onces_;  // RunOnceAfter calls not run yet (loop thread)
};

// A one-shot timer on a loop; re-armable. Use on the loop thread only.
class Timer {
 public:
  Timer(EventLoop* loop, std::function<void()> fn);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void StartAfter(Millis delay);
  void StartAt(TimePoint when);
  void Cancel();
  bool pending() const;
  // Lets go of the loop now: a client closed on a caller's loop must hold nothing on it (lock
  // handles may keep the client alive after the loop is gone). Later calls do nothing.
  void Free();

 private:
  static void OnFire(void* self);
  std::unique_ptr<Reactor::TimerHandle> handle_;
  std::function<void()> fn_;
};

// A call run at the end of the current loop turn, after the callbacks already due (no system
// call): for gathering what one turn writes into one send. Schedule()
// again before it has run: it still runs once. Loop thread only. Destroying it drops it.
class TurnEnd {
 public:
  TurnEnd(EventLoop* loop, std::function<void()> fn);
  ~TurnEnd();
  TurnEnd(const TurnEnd&) = delete;
  TurnEnd& operator=(const TurnEnd&) = delete;
  void Schedule();

 private:
  static void OnFire(void* self);
  EventLoop* loop_;
  std::unique_ptr<Reactor::TurnEndHandle> handle_;
  std::function<void()> fn_;
  std::shared_ptr<bool> alive_;  // only out of memory: tells a posted fallback we are gone
};

// One-shot calls after a delay (retries), which can all be run at once early: a shutdown must
// not leave a retry waiting. Loop thread only. Destroying it drops what is pending, unrun.
class DelayedCalls {
 public:
  explicit DelayedCalls(EventLoop* loop) : loop_(loop) {}
  ~DelayedCalls();
  DelayedCalls(const DelayedCalls&) = delete;
  DelayedCalls& operator=(const DelayedCalls&) = delete;
  void After(Millis delay, std::function<void()> fn);
  void RunAllNow();  // in no particular order
  size_t size() const { return calls_.size(); }

 private:
  struct Call {
    DelayedCalls* owner;
    std::unique_ptr<Reactor::TimerHandle> timer;
    std::function<void()> fn;
  };
  static void OnFire(void* arg);

  EventLoop* loop_;
  std::unordered_set<Call*> calls_;
};

}  // namespace dlock

#endif  // DLOCK_LOOP_EVENT_LOOP_H_
