// Small RAII helpers over the C ABI for the integration tests.
#ifndef DLOCK_TESTS_TEST_UTIL_H_
#define DLOCK_TESTS_TEST_UTIL_H_

#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "redis/wire/keys.h"

namespace dlock_test {

// Which sanitizer this test binary runs under. scripts/test runs the tests in three builds
// (normal, ASan+UBSan, TSan; docs/testing.md, "Build matrix") within a 20-minute budget: the few
// heaviest cases run lighter under the sanitizers, never weaker in the normal build.
#if defined(__has_feature)  // clang
#define DLOCK_TEST_HAS_FEATURE(x) __has_feature(x)
#else  // gcc says __SANITIZE_*__ instead
#define DLOCK_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || DLOCK_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || DLOCK_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
inline constexpr bool kUnderSanitizer = kUnderThreadSanitizer || kUnderAddressSanitizer;

// Time in the tests (docs/testing.md): a bound the library states is asserted with
// generous slack, never a speed; the order of events between threads and processes is made by
// waiting for what shows it (a waiter in line, a file, a line of output), never by a sleep.
//
// dlock.h's bounds with the default timeouts: a call that does not wait (a one-try acquire,
// release, extend, inspect) takes at most connect_timeout_ms + timeout_ms = 2 s + 3 s; an
// acquire that waits W ms, W more.
inline constexpr int64_t kCallBoundMs = 2000 + 3000;
// The slack added to a stated bound, for sanitizers on busy, shared cores.
inline constexpr int64_t kSlackMs = 3000;

// The Redis key that holds lock NAME under the default prefix.
inline std::string Key(const std::string& name) {
  return dlock::redis::LockKeys::Holder("dlock:", name);
}

class Client {
 public:
  explicit Client(const std::string& url) {
    dlock_status s = dlock_client_open(url.c_str(), &c_);
    EXPECT_EQ(s, DLOCK_OK) << dlock_last_error();
  }
  ~Client() { dlock_client_close(c_); }
  Client(const Client&) = delete;
  dlock_client* get() const { return c_; }
  dlock_client* release() {
    dlock_client* c = c_;
    c_ = nullptr;
    return c;
  }

 private:
  dlock_client* c_ = nullptr;
};

class Options {
 public:
  Options() : o_(dlock_options_new()) {}
  ~Options() { dlock_options_free(o_); }
  Options(const Options&) = delete;
  Options& lease(uint64_t ms) { EXPECT_EQ(dlock_options_set_lease_ms(o_, ms), DLOCK_OK); return *this; }
  Options& heartbeat(uint64_t ms) { EXPECT_EQ(dlock_options_set_heartbeat_ms(o_, ms), DLOCK_OK); return *this; }
  Options& wait(int64_t ms) { EXPECT_EQ(dlock_options_set_wait_ms(o_, ms), DLOCK_OK); return *this; }
  Options& retry(uint64_t lo, uint64_t hi) { EXPECT_EQ(dlock_options_set_retry_ms(o_, lo, hi), DLOCK_OK); return *this; }
  Options& owner(const char* label) { EXPECT_EQ(dlock_options_set_owner(o_, label), DLOCK_OK); return *this; }
  Options& shared() { EXPECT_EQ(dlock_options_set_kind(o_, DLOCK_SHARED), DLOCK_OK); return *this; }
  Options& value(const std::string& v) {
    EXPECT_EQ(dlock_options_set_value(o_, v.data(), v.size()), DLOCK_OK);
    return *this;
  }
  Options& max_hold(uint64_t ms) { EXPECT_EQ(dlock_options_set_max_hold_ms(o_, ms), DLOCK_OK); return *this; }
  Options& min_hold(uint64_t ms) { EXPECT_EQ(dlock_options_set_min_hold_ms(o_, ms), DLOCK_OK); return *this; }
  Options& lock_delay(uint64_t ms) { EXPECT_EQ(dlock_options_set_lock_delay_ms(o_, ms), DLOCK_OK); return *this; }
  Options& permits(uint32_t n) { EXPECT_EQ(dlock_options_set_permits(o_, n), DLOCK_OK); return *this; }
  Options& take(uint32_t k) { EXPECT_EQ(dlock_options_set_take(o_, k), DLOCK_OK); return *this; }
  Options& on_lost(dlock_lost_fn fn, void* arg) { EXPECT_EQ(dlock_options_set_on_lost(o_, fn, arg), DLOCK_OK); return *this; }
  const dlock_options* get() const { return o_; }
  dlock_options* mutable_get() { return o_; }

 private:
  dlock_options* o_;
};

// Records on_lost calls.
struct LostRecorder {
  std::atomic<int> calls{0};
  std::atomic<uint64_t> token{0};
  std::atomic<bool> on_caller_thread{false};
  std::thread::id caller = std::this_thread::get_id();
  static void Fn(const char* name, uint64_t token, void* arg) {
    auto* self = static_cast<LostRecorder*>(arg);
    self->token = token;
    if (std::this_thread::get_id() == self->caller) self->on_caller_thread = true;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      if (self->first_name.empty()) self->first_name = name;
    }
    self->calls++;
  }
  // The name the first call was given.
  std::string name() const {
    std::lock_guard<std::mutex> lock(mu);
    return first_name;
  }

 private:
  mutable std::mutex mu;
  std::string first_name;
};

// Records dlock_options_set_on_release_requested calls: how many, and the last name and reason.
struct RequestsHeard {
  std::atomic<int> calls{0};
  static void Fn(const char* name, const char* reason, void* arg) {
    auto* self = static_cast<RequestsHeard*>(arg);
    {
      std::lock_guard<std::mutex> lock(self->mu);
      self->name_ = name;
      self->reason_ = reason;
    }
    self->calls++;
  }
  std::string name() {
    std::lock_guard<std::mutex> lock(mu);
    return name_;
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu);
    return reason_;
  }

 private:
  std::mutex mu;
  std::string name_, reason_;
};

// Polls cond every 5 ms for up to `limit`; true once it holds.
template <typename Cond>
bool WaitFor(Cond cond, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_TEST_UTIL_H_
