// An event_base for async tests, and the process's thread count (/proc/self/task).
#ifndef DLOCK_TESTS_EVENT_LOOP_UTIL_H_
#define DLOCK_TESTS_EVENT_LOOP_UTIL_H_

#include <dirent.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <dlock/dlock.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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
  // Runs the loop until done() or the time limit, and leaves nothing of its own on the base
  // (unlike Run); true when done().
  template <typename Done>
  bool RunUntil(Done done, std::chrono::milliseconds limit) {
    // A ticking timer ends each turn of the loop, so that the limit is checked every 10 ms.
    event* tick = event_new(base_, -1, EV_PERSIST, [](evutil_socket_t, short, void*) {}, nullptr);
    timeval every_10ms{0, 10000};
    event_add(tick, &every_10ms);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    bool ok;
    while (!(ok = done()) && std::chrono::steady_clock::now() < deadline) {
      event_base_loop(base_, EVLOOP_ONCE);
    }
    event_free(tick);
    return ok;
  }
  // Runs the loop until no event is left on the base (what a closed client needs to finish),
  // for up to limit; true when the base is empty.
  bool Drain(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    auto left = [&] {
      return event_base_get_num_events(base_, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
    };
    while (left() > 0 && std::chrono::steady_clock::now() < deadline) {
      event_base_loop(base_, EVLOOP_ONCE);
    }
    return left() == 0;
  }

 private:
  event_base* base_;
  std::vector<std::unique_ptr<std::function<void()>>> tasks_;
};

// What one dlock_acquire_async reported.
struct AcquireResult {
  int calls = 0;
  dlock_status s = DLOCK_EINTERNAL;
  dlock_lock* lock = nullptr;
  static void Fn(dlock_status s, dlock_lock* l, void* arg) {
    auto* r = static_cast<AcquireResult*>(arg);
    r->calls++;
    r->s = s;
    r->lock = l;
  }
};

// Starts an acquire of name on loop while the test holds the server's answers back, and runs the
// loop until held() shows the request waiting on the server (BackendServer::RequestHeld), for up
// to limit: the acquire is then in flight, and its answer cannot arrive before the test lets the
// answers go. True when it is; false when the call failed or held() never showed it.
template <typename Held>
bool SendAcquireWhileHeld(Loop& loop, dlock_client* c, const std::string& name, const dlock_options* o,
                          AcquireResult* r, Held held, std::chrono::milliseconds limit = 10000ms) {
  *r = AcquireResult{};
  if (dlock_acquire_async(c, name.c_str(), o, &AcquireResult::Fn, r) != DLOCK_OK) return false;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    event_base_loop(loop.base(), EVLOOP_NONBLOCK);  // the acquire goes out on the loop
    if (r->calls != 0) return false;               // answered (an error): not held
    if (held()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_EVENT_LOOP_UTIL_H_
