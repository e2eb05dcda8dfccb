// An event_base for async tests, and the process's thread count (/proc/self/task).
#ifndef DLOCK_TESTS_EVENT_LOOP_UTIL_H_
#define DLOCK_TESTS_EVENT_LOOP_UTIL_H_

#include <dirent.h>
#include <event2/event.h>
#include <event2/thread.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace dlock_test {

using namespace std::chrono_literals;

inline int ThreadCount() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// An event_base for one test, with helpers to run code later on it.
class Loop {
 public:
  Loop() {
    evthread_use_pthreads();
    base_ = event_base_new();
  }
  ~Loop() { event_base_free(base_); }  // tasks_ (and any timer that never fired) go with it
  event_base* base() const { return base_; }
  // Runs fn on the loop after delay.
  void After(std::chrono::milliseconds delay, std::function<void()> fn) {
    tasks_.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
    timeval tv{static_cast<time_t>(delay.count() / 1000), static_cast<suseconds_t>(delay.count() % 1000 * 1000)};
    event_base_once(base_, -1, EV_TIMEOUT, [](int, short, void* arg) {
      (*static_cast<std::function<void()>*>(arg))();
    }, tasks_.back().get(), &tv);
  }
  // Runs the loop until Exit() or the time limit; false when the limit hit.
  bool Run(std::chrono::milliseconds limit = 10000ms) {
    bool timed_out = false;
    After(limit, [&] {
      timed_out = true;
      event_base_loopbreak(base_);
    });
    event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY);
    return !timed_out;
  }
  void Exit() { event_base_loopbreak(base_); }

 private:
  event_base* base_;
  std::vector<std::unique_ptr<std::function<void()>>> tasks_;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_EVENT_LOOP_UTIL_H_
