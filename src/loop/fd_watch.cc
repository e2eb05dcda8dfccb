#include "loop/fd_watch.h"

#include <event2/event.h>

namespace dlock {

FdWatch::FdWatch(EventLoop* loop, int fd, Callback fn, void* arg)
    : loop_(loop), fd_(fd), fn_(fn), arg_(arg) {}

FdWatch::~FdWatch() {
  if (ev_ != nullptr) event_free(ev_);
}

void FdWatch::Want(bool read, bool write) {
  if (ev_ != nullptr) event_del(ev_);
  if (!read && !write) return;
  const short kinds = EV_PERSIST | (read ? EV_READ : 0) | (write ? EV_WRITE : 0);
  if (ev_ != nullptr) {
    event_assign(ev_, loop_->base(), fd_, kinds, &FdWatch::OnEvent, this);
  } else {
    ev_ = event_new(loop_->base(), fd_, kinds, &FdWatch::OnEvent, this);
  }
  if (ev_ != nullptr) event_add(ev_, nullptr);
}

void FdWatch::OnEvent(int, short kinds, void* arg) {
  auto* self = static_cast<FdWatch*>(arg);
  Callback fn = self->fn_;  // self may be gone once fn returns
  fn(self->arg_, (kinds & EV_READ) != 0, (kinds & EV_WRITE) != 0);
}

}  // namespace dlock
