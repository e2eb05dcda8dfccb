// A libevent event_base and the thread the library owns to run it. Everything that touches a
// hiredis async context, a timer or a heartbeat runs on this thread; other threads hand work
// over with Post().
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

struct event_base;
struct event;

namespace dlock {

class EventLoop {
 public:
  // Creates an event_base and starts a thread running it.
  static Status Start(std::unique_ptr<EventLoop>* out);
  // Uses the caller's base, run by the caller on the calling thread; creates no thread.
  static Status Wrap(event_base* base, std::unique_ptr<EventLoop>* out);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  event_base* base() const { return base_; }
  bool owns_thread() const { return owns_base_; }
  bool InLoopThread() const { return std::this_thread::get_id() == thread_id_.load(); }

  // Runs fn on the loop thread soon. Thread-safe. False (fn dropped) once Stop() has run.
  bool Post(std::function<void()> fn);
  // Runs fn on the loop thread and waits for it; inline when called on the loop thread.
  void RunSync(const std::function<void()>& fn);
  // Runs fn on the loop thread once, after delay. Loop thread only. For teardown steps that
  // outlive every object that could own a Timer; fn runs only while the loop runs.
  void RunOnceAfter(Millis delay, std::function<void()> fn);
  // Stops the loop, joins its thread, then runs what was still queued on the calling thread
  // (so that no posted completion is lost). Idempotent.
  void Stop();

 private:
  EventLoop() = default;
  static void OnWake(int, short, void* arg);
  void RunTasks();

  Status Init();

  event_base* base_ = nullptr;
  bool owns_base_ = false;
  event* wake_ = nullptr;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  bool stopped_ = false;
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
  // Frees the libevent event now: a client closed on a caller's base must hold nothing on it
  // (lock handles may keep the client alive after the base is gone). Later calls do nothing.
  void Free();

 private:
  static void OnFire(int, short, void* arg);
  event* ev_ = nullptr;
  std::function<void()> fn_;
};

// A call run at the end of the current loop turn, after the callbacks already due (libevent:
// event_active, no system call): for gathering what one turn writes into one send. Schedule()
// again before it has run: it still runs once. Loop thread only. Destroying it drops it.
class TurnEnd {
 public:
  TurnEnd(EventLoop* loop, std::function<void()> fn);
  ~TurnEnd();
  TurnEnd(const TurnEnd&) = delete;
  TurnEnd& operator=(const TurnEnd&) = delete;
  void Schedule();

 private:
  static void OnFire(int, short, void* arg);
  EventLoop* loop_;
  event* ev_ = nullptr;
  std::function<void()> fn_;
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
    event* ev;
    std::function<void()> fn;
  };
  static void OnFire(int, short, void* arg);

  EventLoop* loop_;
  std::unordered_set<Call*> calls_;
};

}  // namespace dlock

#endif  // DLOCK_LOOP_EVENT_LOOP_H_
