#include "loop/fd_watch.h"

namespace dlock {

FdWatch::FdWatch(EventLoop* loop, int fd, Callback fn, void* arg)
    : handle_(loop->reactor()->NewFd(fd, fn, arg)) {}

FdWatch::~FdWatch() = default;

void FdWatch::Want(bool read, bool write) {
  if (handle_ != nullptr) handle_->Want(read, write);
}

}  // namespace dlock
