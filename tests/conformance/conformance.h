// The conformance suite's fixtures and the checks a user makes: who holds a lock (dlock_inspect),
// whether another client can take it. Tests are parameterized over every backend (BackendTest)
// or over every backend in every calling style (StyleTest).
#ifndef DLOCK_TESTS_CONFORMANCE_CONFORMANCE_H_
#define DLOCK_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "conformance/backend.h"
#include "conformance/styled_client.h"
#include "test_util.h"

namespace dlock_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The suite's server for this backend, started on first use and stopped when the test program
// ends. Tests that kill or restart a server start their own with backend.start().
BackendServer& SharedServer(const BackendFactory& backend);

// A lock name no other test uses ("<test name>/<what>"), so that tests may share a server.
std::string UniqueName(const std::string& what);

inline int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// One holder as dlock_inspect shows it.
struct Holder {
  std::string owner;
  int64_t remaining_ms = 0;
  uint64_t token = 0;
  std::string value;  // stored with the hold ("" = none)
  uint32_t take = 1;  // the permits it took (dlock_info_take)
};

// Who holds a lock, read through c with dlock_inspect.
struct Snapshot {
  dlock_status status = DLOCK_EINTERNAL;
  dlock_kind kind = DLOCK_EXCLUSIVE;
  uint32_t permits = 0;
  std::vector<Holder> holders;
  bool free() const { return status == DLOCK_OK && holders.empty(); }
};
Snapshot Inspect(dlock_client* c, const std::string& name);
std::ostream& operator<<(std::ostream& os, const Snapshot& s);

// What is left of the one holder's lease in a snapshot, in ms, as a lower bound: nobody may
// take the lock sooner after the snapshot was asked for. etcd shows its leases in whole
// seconds, rounded up (a whole number of seconds counts one less); -1 when the snapshot does
// not show one holder with a lease (ADD_FAILURE()s).
inline int64_t LeaseLeft(const Snapshot& s) {
  if (s.holders.size() != 1 || s.holders[0].remaining_ms < 0) {
    ADD_FAILURE() << "not one holder with a lease: " << s;
    return -1;
  }
  const int64_t shown = s.holders[0].remaining_ms;
  return shown % 1000 == 0 ? shown - 1000 : shown;
}

// How soon a lock whose holder died (no release, no renewal) with lease_ms is taken over, at
// most, from the death: its lease (etcd keeps the key up to about 2 s beyond it), then the
// waiter's next retry (200 ms at most in these tests) and attempt, with slack.
constexpr int64_t kTakeoverBoundMs(int64_t lease_ms) { return lease_ms + 2000 + 200 + kSlackMs; }

// What another client sees when it tries to take the lock (waiting up to wait_ms): the status,
// and the token it got (the lock is then released again at once) or the message it got.
struct Attempt {
  dlock_status status = DLOCK_EINTERNAL;
  uint64_t token = 0;
  std::string error;
};
Attempt TryToTake(dlock_client* c, const std::string& name, int64_t wait_ms = 0);

// A hold taken with dlock_acquire, released (if still held) when it goes out of scope.
class Hold {
 public:
  Hold() = default;
  Hold(dlock_client* c, const std::string& name, const dlock_options* o) {
    status_ = dlock_acquire(c, name.c_str(), o, &lock_);
    if (status_ != DLOCK_OK) error_ = dlock_last_error();
  }
  ~Hold() { Release(); }
  Hold(Hold&& other) noexcept
      : status_(other.status_), lock_(std::exchange(other.lock_, nullptr)), error_(other.error_) {}
  Hold& operator=(Hold&& other) noexcept {
    Release();
    status_ = other.status_;
    lock_ = std::exchange(other.lock_, nullptr);
    error_ = other.error_;
    return *this;
  }
  Hold(const Hold&) = delete;
  dlock_status status() const { return status_; }
  const std::string& error() const { return error_; }
  bool held() const { return lock_ != nullptr; }
  uint64_t token() const { return lock_ ? dlock_lock_fencing_token(lock_) : 0; }
  dlock_lock* get() const { return lock_; }
  dlock_status Release() {
    if (!lock_) return DLOCK_NOT_HELD;
    dlock_status s = dlock_release(std::exchange(lock_, nullptr));
    if (s != DLOCK_OK) error_ = dlock_last_error();
    return s;
  }

 private:
  dlock_status status_ = DLOCK_EINTERNAL;
  dlock_lock* lock_ = nullptr;
  std::string error_;
};

// A lock another client holds (lease 10 s) while a test contends for it.
class HeldElsewhere {
 public:
  HeldElsewhere(const std::string& url, const std::string& name);  // ADD_FAILURE()s if it cannot
  ~HeldElsewhere() { Release(); }
  HeldElsewhere(const HeldElsewhere&) = delete;
  bool held() const { return lock_ != nullptr; }
  uint64_t token() const { return token_; }
  // Releases it (from any thread); nothing once released.
  void Release();
  // True when dlock_inspect shows it still held, by this holder: the contenders did not disturb it.
  bool Undisturbed() const;

 private:
  Client client_;
  std::string name_;
  dlock_lock* lock_ = nullptr;
  uint64_t token_ = 0;
};

class BackendTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  const BackendFactory& backend() const { return GetParam(); }
  BackendServer& server() const { return SharedServer(GetParam()); }
  std::string url() const { return server().url(); }
  std::string Name(const std::string& what) const { return UniqueName(what); }
  // What dlock_inspect shows of a hold's token: 0 where the backend cannot show it.
  uint64_t Shown(uint64_t token) const { return backend().inspect_shows_tokens ? token : 0; }
};

class StyleTest : public ::testing::TestWithParam<std::tuple<BackendFactory, Style>> {
 protected:
  const BackendFactory& backend() const { return std::get<0>(GetParam()); }
  Style style() const { return std::get<1>(GetParam()); }
  BackendServer& server() const { return SharedServer(backend()); }
  std::string url() const { return server().url(); }
  std::string Name(const std::string& what) const { return UniqueName(what); }
  // What dlock_inspect shows of a hold's token: 0 where the backend cannot show it.
  uint64_t Shown(uint64_t token) const { return backend().inspect_shows_tokens ? token : 0; }
  // A client of the style under test.
  std::unique_ptr<StyledClient> Open() const { return StyledClient::Open(style(), url()); }
};

inline auto AllStyles() {
  return ::testing::Values(Style::kBlocking, Style::kAsync, Style::kQueued, Style::kHooks);
}

std::string BackendTestName(const ::testing::TestParamInfo<BackendFactory>& info);
std::string StyleTestName(const ::testing::TestParamInfo<std::tuple<BackendFactory, Style>>& info);

}  // namespace dlock_test

#endif  // DLOCK_TESTS_CONFORMANCE_CONFORMANCE_H_
