// Helpers for tests of completion queues (dlock_queue): a consumer that polls the queue's fd
// with a deadline and pops until the queue is empty, as the header tells users to.
#ifndef DLOCK_TESTS_QUEUE_UTIL_H_
#define DLOCK_TESTS_QUEUE_UTIL_H_

#include <dlock/dlock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace dlock_test {

using namespace std::chrono_literals;

// Owns a dlock_queue; reset() frees it early (to test what freeing does).
class Queue {
 public:
  Queue() { EXPECT_EQ(dlock_queue_new(&q_), DLOCK_OK) << dlock_last_error(); }
  ~Queue() { dlock_queue_free(q_); }
  Queue(const Queue&) = delete;
  dlock_queue* get() const { return q_; }
  int fd() const { return dlock_queue_fd(q_); }
  void reset() {
    dlock_queue_free(q_);
    q_ = nullptr;
  }

 private:
  dlock_queue* q_ = nullptr;
};

// One popped entry, with this thread's dlock_last_error() right after the pop.
struct Entry {
  int kind = DLOCK_QUEUE_EMPTY;
  uint64_t tag = 0;
  dlock_status status = DLOCK_EINTERNAL;
  dlock_lock* lock = nullptr;
  std::string error;
};

inline std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{kind " << e.kind << ", tag " << e.tag << ", " << dlock_status_str(e.status)
            << ", lock " << (e.lock != nullptr ? "yes" : "no") << ", \"" << e.error << "\"}";
}

// True when fd is readable within timeout (0: right now).
inline bool Readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n == 1 && (p.revents & POLLIN) != 0;
}

// Pops until DLOCK_QUEUE_EMPTY (which re-arms the fd), appending what it took to *out.
inline void PopAll(dlock_queue* q, std::vector<Entry>* out) {
  for (;;) {
    Entry e;
    e.kind = dlock_queue_pop(q, &e.tag, &e.status, &e.lock);
    if (e.kind == DLOCK_QUEUE_EMPTY) return;
    if (e.kind != DLOCK_QUEUE_DONE && e.kind != DLOCK_QUEUE_LOST &&
        e.kind != DLOCK_QUEUE_RELEASE_REQUESTED) {
      ADD_FAILURE() << "dlock_queue_pop returned " << e.kind;
      return;
    }
    e.error = dlock_last_error();
    out->push_back(std::move(e));
  }
}

// What a consumer does: waits on the fd, pops all, again, until n entries came or `limit`
// passed. Returns what it got (fewer than n on timeout; the caller asserts the count).
inline std::vector<Entry> Collect(dlock_queue* q, size_t n, std::chrono::milliseconds limit = 5000ms) {
  std::vector<Entry> got;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (got.size() < n) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left <= 0ms) break;
    if (Readable(dlock_queue_fd(q), left)) PopAll(q, &got);
  }
  return got;
}

// Collects exactly one entry (an empty Entry on timeout, which fails the caller's checks).
inline Entry CollectOne(dlock_queue* q, std::chrono::milliseconds limit = 5000ms) {
  std::vector<Entry> got = Collect(q, 1, limit);
  EXPECT_EQ(got.size(), 1u) << "expected exactly one entry";
  return got.empty() ? Entry{} : got.front();
}

// Entries by tag; fails the test when a tag came twice.
inline std::map<uint64_t, Entry> ByTag(const std::vector<Entry>& entries) {
  std::map<uint64_t, Entry> by_tag;
  for (const Entry& e : entries) {
    EXPECT_TRUE(by_tag.emplace(e.tag, e).second) << "tag " << e.tag << " came twice: " << e;
  }
  return by_tag;
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_QUEUE_UTIL_H_
