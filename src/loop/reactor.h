// What an event loop implementation gives the rest of src/loop/: timers, readiness of file
// descriptors, calls at the end of a turn, and a wake-up from any thread. Two implement it:
// libevent (the library's own thread, or a caller's event_base) and a caller's loop seen
// through its hook table (dlock_loop_hooks). Everything else in the library uses EventLoop,
// Timer, FdWatch, TurnEnd and DelayedCalls (event_loop.h, fd_watch.h), never this.
// Handles are made and used on the loop thread only, except that a timer may be armed,
// disarmed and asked from any thread (as libevent's can: the heartbeats arm theirs from the
// thread that took a lock); Wake() is the other call from any thread.
#ifndef DLOCK_LOOP_REACTOR_H_
#define DLOCK_LOOP_REACTOR_H_

#include <chrono>
#include <memory>

namespace dlock {

class Reactor {
 public:
  using Fn = void (*)(void* arg);
  // May destroy the handle it was called for.
  using FdFn = void (*)(void* arg, bool readable, bool writable);

  class TimerHandle {
   public:
    virtual ~TimerHandle() = default;  // disarms; loop thread
    virtual void ArmAfter(std::chrono::microseconds delay) = 0;  // re-arming replaces
    virtual void Disarm() = 0;
    virtual bool armed() const = 0;
  };
  class FdHandle {
   public:
    virtual ~FdHandle() = default;  // stops watching; the fd stays open
    virtual void Want(bool read, bool write) = 0;  // neither: stops watching
  };
  class TurnEndHandle {
   public:
    virtual ~TurnEndHandle() = default;
    virtual void Schedule() = 0;  // runs once at the end of this turn, however often scheduled
  };

  virtual ~Reactor() = default;
  // Null only out of memory.
  virtual std::unique_ptr<TimerHandle> NewTimer(Fn fn, void* arg) = 0;
  virtual std::unique_ptr<FdHandle> NewFd(int fd, FdFn fn, void* arg) = 0;
  virtual std::unique_ptr<TurnEndHandle> NewTurnEnd(Fn fn, void* arg) = 0;
  // Any thread: the loop calls the wake function given at creation soon, on its thread.
  // Wakes asked for before that call runs may be merged into it.
  virtual void Wake() = 0;
  // The loop has stopped (EventLoop::Stop): let go of the caller's loop, if it is one. The
  // wake function does not run again; handles left over do nothing.
  virtual void Shutdown() {}
};

}  // namespace dlock

#endif  // DLOCK_LOOP_REACTOR_H_
