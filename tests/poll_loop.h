// A minimal event loop on poll(2), driving dlock clients through the hook table
// (dlock_client_open_hooks): what a user's own loop does, and nothing from libevent. One
// PollLoop may drive any number of clients; everything runs on the thread that calls its Run
// functions.
#ifndef DLOCK_TESTS_POLL_LOOP_H_
#define DLOCK_TESTS_POLL_LOOP_H_

#include <poll.h>
#include <dlock/dlock.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace dlock_test {

class PollLoop {
 public:
  using Clock = std::chrono::steady_clock;

  PollLoop() {
    hooks_.watch_fd = &PollLoop::WatchFd;
    hooks_.set_timer = &PollLoop::SetTimer;
    hooks_.cleanup = &PollLoop::Cleanup;
  }

  dlock_status Open(const std::string& url, dlock_client** out) {
    return dlock_client_open_hooks(url.c_str(), &hooks_, this, out);
  }

  // One turn: waits up to `most` for an fd or a timer, and dispatches what is ready.
  void Turn(std::chrono::milliseconds most) {
    auto wait = most;
    const auto now = Clock::now();
    for (const auto& [loop, due] : timers_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - now);
      if (left < wait) wait = left < std::chrono::milliseconds(0) ? std::chrono::milliseconds(0) : left;
    }
    std::vector<pollfd> fds;
    std::vector<dlock_loop*> owners;
    for (const auto& [fd, watch] : watches_) {
      short events = 0;
      if (watch.events & DLOCK_LOOP_READ) events |= POLLIN;
      if (watch.events & DLOCK_LOOP_WRITE) events |= POLLOUT;
      fds.push_back(pollfd{fd, events, 0});
      owners.push_back(watch.loop);
    }
    ++turns_;
    if (poll(fds.data(), fds.size(), static_cast<int>(wait.count())) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        // An earlier dispatch this turn may have stopped or replaced this watch.
        auto it = watches_.find(fds[i].fd);
        if (it == watches_.end() || it->second.loop != owners[i]) continue;
        uint32_t ready = 0;
        // Errors and hang-ups are reported as whatever was asked for: the read or write
        // that follows finds them, as with any level-triggered loop.
        if (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) ready |= it->second.events & DLOCK_LOOP_READ;
        if (fds[i].revents & (POLLOUT | POLLERR | POLLHUP)) ready |= it->second.events & DLOCK_LOOP_WRITE;
        if (ready != 0) dlock_loop_fd_ready(owners[i], fds[i].fd, ready);
      }
    }
    const auto after = Clock::now();
    std::vector<dlock_loop*> due;
    for (auto it = timers_.begin(); it != timers_.end();) {
      if (it->second <= after) {
        due.push_back(it->first);
        it = timers_.erase(it);
      } else {
        ++it;
      }
    }
    for (dlock_loop* loop : due) dlock_loop_timer_fired(loop);
  }

  // Runs turns until done() or the limit; true when done().
  template <typename Done>
  bool RunUntil(Done done, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    bool ok;
    while (!(ok = done()) && Clock::now() < deadline) Turn(std::chrono::milliseconds(10));
    return ok;
  }
  // Runs until every client that was opened has let go of the loop (cleanup called, no fd
  // watched, no timer asked for); true when they all have within limit.
  bool Drain(std::chrono::milliseconds limit) {
    return RunUntil([&] { return empty(); }, limit);
  }
  bool empty() const { return watches_.empty() && timers_.empty(); }
  int cleanups() const { return cleanups_; }
  size_t watched() const { return watches_.size(); }
  long turns() const { return turns_; }

 private:
  struct Watch {
    dlock_loop* loop;
    uint32_t events;
  };

  static void WatchFd(void* ctx, dlock_loop* loop, int fd, uint32_t events, void** fd_data) {
    auto* self = static_cast<PollLoop*>(ctx);
    if (events == 0) {
      self->watches_.erase(fd);
      *fd_data = nullptr;
      return;
    }
    self->watches_[fd] = Watch{loop, events};
  }
  static void SetTimer(void* ctx, dlock_loop* loop, int64_t ms) {
    auto* self = static_cast<PollLoop*>(ctx);
    if (ms < 0) {
      self->timers_.erase(loop);
      return;
    }
    self->timers_[loop] = Clock::now() + std::chrono::milliseconds(ms);
  }
  static void Cleanup(void* ctx) { static_cast<PollLoop*>(ctx)->cleanups_++; }

  dlock_loop_hooks hooks_{};
  std::map<int, Watch> watches_;
  std::map<dlock_loop*, Clock::time_point> timers_;
  int cleanups_ = 0;
  long turns_ = 0;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_POLL_LOOP_H_
