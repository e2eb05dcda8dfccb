// The Reactor on a libevent event_base: the library's own (run by EventLoop's thread) or a
// caller's (dlock_client_open_evbase). The only code, with libevent_reactor.cc, that calls
// libevent.
#ifndef DLOCK_LOOP_LIBEVENT_REACTOR_H_
#define DLOCK_LOOP_LIBEVENT_REACTOR_H_

#include <memory>

#include "core/status.h"
#include "loop/reactor.h"

struct event_base;
struct event;

namespace dlock {

class LibeventReactor : public Reactor {
 public:
  // base null: a new base, owned (freed with the reactor). wake(arg) runs after Wake().
  static Status Make(event_base* base, Fn wake, void* arg, std::unique_ptr<LibeventReactor>* out);
  ~LibeventReactor() override;

  std::unique_ptr<TimerHandle> NewTimer(Fn fn, void* arg) override;
  std::unique_ptr<FdHandle> NewFd(int fd, FdFn fn, void* arg) override;
  std::unique_ptr<TurnEndHandle> NewTurnEnd(Fn fn, void* arg) override;
  void Wake() override;
  // Frees the wake-up event: nothing of ours stays on a caller's base once the client is
  // closed (lock handles may keep the client alive after the base is freed).
  void Shutdown() override;

  // The owned base: runs until Break() (called on the loop thread).
  void Run();
  void Break();

 private:
  LibeventReactor() = default;
  static void OnWake(int, short, void* self);
  Fn wake_fn_ = nullptr;
  void* wake_arg_ = nullptr;
  event_base* base_ = nullptr;
  bool owns_base_ = false;
  event* wake_ = nullptr;
};

}  // namespace dlock

#endif  // DLOCK_LOOP_LIBEVENT_REACTOR_H_
