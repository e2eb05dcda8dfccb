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

void CompletionQueue::Signal() {
  if (!signalled_) {
    signalled_ = true;
    const char byte = 1;
    // Cannot block (O_NONBLOCK) and cannot fill: one byte between empty Pops.
    (void)!write(write_fd_, &byte, 1);
  }
}

void CompletionQueue::Push(Entry entry) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (!shut_) {
      entries_.push_back(std::move(entry));
      Signal();
      return;
    }
  }
  GiveBack(entry);
}

bool CompletionQueue::PushEvent(uint64_t tag, const Event& e) noexcept {
  try {
    // Copied before the lock is taken; dropped (after it is let go) when it cannot be queued.
    Entry entry;
    entry.kind = Kind::kEvent;
    entry.tag = tag;
    entry.event = std::make_unique<EventCopy>(e);
    std::lock_guard<std::mutex> guard(mu_);
    if (shut_ || events_ >= kMaxEvents) return false;
    entries_.push_back(std::move(entry));
    ++events_;
    Signal();
    return true;
  } catch (...) {  // out of memory: an event is for logs, and the hook's caller must go on
    return false;
  }
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
  if (out->kind == Kind::kEvent) --events_;
  return true;
}

void CompletionQueue::Shutdown() {
  std::deque<Entry> left;
  {
    std::lock_guard<std::mutex> guard(mu_);
    shut_ = true;
    left.swap(entries_);
    events_ = 0;
  }
  for (Entry& entry : left) GiveBack(entry);
}

void CompletionQueue::GiveBack(Entry& entry) {
  // An acquisition nobody will ever see must not hold the lock until its lease runs out.
  if (entry.lock == nullptr || entry.client == nullptr || entry.client->IsClosed()) return;
  entry.lock->given_back.store(true);
  entry.client->ReleaseAsync(std::move(entry.lock), [](const Status&) {});
}

}  // namespace dlock
