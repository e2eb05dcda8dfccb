#include "core/completion_queue.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/client.h"
#include "core/lock_state.h"

namespace dlock {

Status CompletionQueue::Create(std::shared_ptr<CompletionQueue>* out) {
  // A pipe rather than an eventfd: runtimes such as libuv (Node) can watch a pipe natively.
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return Status::Internal(std::string("cannot create the completion queue's pipe: ") +
                            std::strerror(errno));
  }
  out->reset(new CompletionQueue(fds[0], fds[1]));
  return Status::Ok();
}

Status CompletionQueue::DupFd(int* out) const {
  // F_DUPFD_CLOEXEC: dup() would drop close-on-exec, and the copy would leak into children.
  const int fd = fcntl(read_fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    return Status::IoError(std::string("cannot duplicate the completion queue's fd: ") +
                           std::strerror(errno));
  }
  *out = fd;
  return Status::Ok();
}

CompletionQueue::~CompletionQueue() {
  close(read_fd_);
  close(write_fd_);
}

void CompletionQueue::Push(Entry entry) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (!shut_) {
      entries_.push_back(std::move(entry));
      if (!signalled_) {
        signalled_ = true;
        const char byte = 1;
        // Cannot block (O_NONBLOCK) and cannot fill: one byte between empty Pops.
        (void)!write(write_fd_, &byte, 1);
      }
      return;
    }
  }
  GiveBack(entry);
}

bool CompletionQueue::Pop(Entry* out) {
  std::lock_guard<std::mutex> guard(mu_);
  if (entries_.empty()) {
    char buf[64];
    while (read(read_fd_, buf, sizeof buf) > 0) {
    }
    signalled_ = false;
    return false;
  }
  *out = std::move(entries_.front());
  entries_.pop_front();
  return true;
}

void CompletionQueue::Shutdown() {
  std::deque<Entry> left;
  {
    std::lock_guard<std::mutex> guard(mu_);
    shut_ = true;
    left.swap(entries_);
  }
  for (Entry& entry : left) GiveBack(entry);
}

void CompletionQueue::GiveBack(Entry& entry) {
  // An acquisition nobody will ever see must not hold the lock until its lease runs out.
  if (entry.lock == nullptr || entry.client == nullptr || entry.client->IsClosed()) return;
  entry.client->ReleaseAsync(std::move(entry.lock), [](const Status&) {});
}

}  // namespace dlock
