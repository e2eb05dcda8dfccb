// Readiness of one file descriptor on a loop, the shape of hiredis's adapter hooks (addRead,
// delRead, addWrite, delWrite): say what to watch for, hear what is ready. For code that drives
// someone else's sockets (curl's multi handle); the loop's own streams are in loop/stream.h.
// Loop thread only.
#ifndef DLOCK_LOOP_FD_WATCH_H_
#define DLOCK_LOOP_FD_WATCH_H_

#include "loop/event_loop.h"

namespace dlock {

class FdWatch {
 public:
  // A plain function and its argument, not a std::function: the callback may destroy this
  // watch (curl closes the socket from inside its socket_action).
  using Callback = void (*)(void* arg, bool readable, bool writable);

  FdWatch(EventLoop* loop, int fd, Callback fn, void* arg);
  ~FdWatch();  // stops watching; the fd stays open (it is not ours)
  FdWatch(const FdWatch&) = delete;
  FdWatch& operator=(const FdWatch&) = delete;

  // Watches for what is asked, until asked again (neither: stops).
  void Want(bool read, bool write);

 private:
  std::unique_ptr<Reactor::FdHandle> handle_;
};

}  // namespace dlock

#endif  // DLOCK_LOOP_FD_WATCH_H_
