// How many connections to its servers a client's backend has open now: the dlock_connections
// gauge (Backend::OpenConnections). A backend makes one ConnectionCount per client and hands it
// to everything that opens connections for it; each open connection holds one
// CountedConnection, which adds one when made and takes it away exactly once (closed, failed,
// moved from or destroyed), so the count cannot drift. The cost is one relaxed atomic add at
// connect and one at close, nothing per command.
#ifndef DLOCK_CORE_CONNECTION_COUNT_H_
#define DLOCK_CORE_CONNECTION_COUNT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace dlock {

// Any thread: connections open and close on the loop thread and on callers' threads (blocking
// calls), and scrapes read from any thread. Shared (shared_ptr) because a connection may close
// after its backend is gone (a connection cache torn down last).
class ConnectionCount {
 public:
  int64_t open() const { return open_.load(std::memory_order_relaxed); }
  void Opened() { open_.fetch_add(1, std::memory_order_relaxed); }
  void Closed() { open_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> open_{0};
};

// One open connection's share of a count. Default-constructed (or with a null count: a
// connection nobody counts, e.g. dlock_backend_prepare's) it counts nothing.
class CountedConnection {
 public:
  CountedConnection() = default;
  explicit CountedConnection(std::shared_ptr<ConnectionCount> count) : count_(std::move(count)) {
    if (count_ != nullptr) count_->Opened();
  }
  ~CountedConnection() { Reset(); }
  CountedConnection(CountedConnection&& other) noexcept : count_(std::move(other.count_)) {}
  CountedConnection& operator=(CountedConnection&& other) noexcept {
    if (this != &other) {
      Reset();
      count_ = std::move(other.count_);
    }
    return *this;
  }
  CountedConnection(const CountedConnection&) = delete;
  CountedConnection& operator=(const CountedConnection&) = delete;

  // The connection closed: counted out now (once; later calls do nothing).
  void Reset() {
    if (count_ != nullptr) count_->Closed();
    count_.reset();
  }

 private:
  std::shared_ptr<ConnectionCount> count_;
};

}  // namespace dlock

#endif  // DLOCK_CORE_CONNECTION_COUNT_H_
