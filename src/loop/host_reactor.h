// The Reactor on a caller's own event loop (libuv, asyncio, glib, an epoll loop...), which it
// reaches through a hook table (dlock_client_open_hooks; capi/ turns the C hooks into a
// HostLoop). The shape of libcurl's multi_socket interface: the host watches the fds it is
// told to and keeps one timer per client; it calls FdReady and TimerFired on its thread, and
// everything dlock does runs inside those calls. Timers, turn ends and the wake-up are kept
// here: the host sees one timer and one fd per socket, plus an eventfd that wakes the loop
// when another thread hands it work.
#ifndef DLOCK_LOOP_HOST_REACTOR_H_
#define DLOCK_LOOP_HOST_REACTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "loop/reactor.h"

namespace dlock {

class HostReactor;

// The caller's loop. Called on the loop thread only, from inside the library's calls.
class HostLoop {
 public:
  virtual ~HostLoop() = default;
  // Watch fd for readability and/or writability from now on; neither: stop (the fd may be
  // closed right after). *slot is the host's to keep per fd: null on the first call for an fd,
  // as the host left it on later ones.
  virtual void WatchFd(HostReactor* reactor, int fd, bool read, bool write, void** slot) = 0;
  // Call TimerFired after ms milliseconds (0: on the next turn), replacing any earlier
  // request; -1: no timer.
  virtual void SetTimer(HostReactor* reactor, int64_t ms) = 0;
  // The last call: the reactor is gone once it returns.
  virtual void Cleanup() = 0;
};

class HostReactor : public Reactor, public std::enable_shared_from_this<HostReactor> {
 public:
  // Called on the loop's thread (the thread that calls FdReady and TimerFired from then on).
  // wake(arg) runs after Wake().
  static Status Make(std::unique_ptr<HostLoop> host, Fn wake, void* arg,
                     std::shared_ptr<HostReactor>* out);
  ~HostReactor() override;  // Shutdown()

  std::unique_ptr<TimerHandle> NewTimer(Fn fn, void* arg) override;
  std::unique_ptr<FdHandle> NewFd(int fd, FdFn fn, void* arg) override;
  std::unique_ptr<TurnEndHandle> NewTurnEnd(Fn fn, void* arg) override;
  void Wake() override;
  // Stops every watch and the timer, then host->Cleanup(); no host call after it.
  void Shutdown() override;

  // The host's calls, on the loop thread. Either may end with the reactor destroyed (a client
  // closed from a callback): they keep it alive until they return.
  void FdReady(int fd, bool readable, bool writable);
  void TimerFired();

 private:
  class Timer;
  class Fd;
  class TurnEnd;
  // Marks one call from the host; its end runs the turn ends and wakes due, then tells the
  // host when the next timer is due.
  class Turn;

  HostReactor() = default;
  void EndTurn();
  // Loop thread, outside any call from the host: asks the host for a turn (its timer at 0 ms)
  // whose end runs the turn ends. No system call and no wake-up, unlike the eventfd; with
  // libuv 1.45+ the turn is the same loop iteration's timer phase.
  void AskTurn();
  bool InLoopThread() const { return std::this_thread::get_id() == thread_; }
  void UpdateHostTimer();  // loop thread
  static void OnWakeFd(void* self, bool readable, bool writable);

  std::unique_ptr<HostLoop> host_;  // null after Shutdown
  Fn wake_fn_ = nullptr;
  void* wake_arg_ = nullptr;
  std::thread::id thread_;
  int depth_ = 0;             // calls from the host under way (loop thread only)
  bool wake_pending_ = false; // a Wake() made inside one of them (loop thread only)
  bool turn_asked_ = false;   // AskTurn() set the host's timer to 0 ms (loop thread only)
  int wake_fd_ = -1;          // eventfd: Wake() from other threads
  std::atomic<bool> wake_fd_armed_{false};
  std::unique_ptr<FdHandle> wake_watch_;
  std::unordered_map<int, Fd*> fds_;
  mutable std::mutex timers_mu_;  // timers may be armed from any thread (and host_ read there)
  std::multimap<std::pair<TimePoint, uint64_t>, Timer*> timers_;
  uint64_t timer_sequence_ = 0;
  bool host_timer_set_ = false;
  TimePoint host_timer_due_{};
  std::vector<TurnEnd*> turn_ends_;
};

}  // namespace dlock

#endif  // DLOCK_LOOP_HOST_REACTOR_H_
