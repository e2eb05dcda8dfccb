// A client used in one of the four styles a user calls dlock in, with each call made
// synchronous for the test so that one test body serves all four:
//   kBlocking  dlock_acquire/_extend/_release on a client with its own thread; losses reported
//              by an on_lost callback on that thread;
//   kAsync     dlock_*_async on a client running on the test's own event_base; every callback
//              (done, on_lost) runs on the test's thread, and only while the loop runs;
//   kQueued    dlock_*_queued on a client with its own thread, outcomes and LOST entries popped
//              from a dlock_queue by the test's thread;
//   kHooks     kAsync's calls on a client driven through the hook table
//              (dlock_client_open_hooks) by the test's own poll(2) loop (tests/poll_loop.h).
#ifndef DLOCK_TESTS_CONFORMANCE_STYLED_CLIENT_H_
#define DLOCK_TESTS_CONFORMANCE_STYLED_CLIENT_H_

#include <dlock/dlock.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

namespace dlock_test {

enum class Style { kBlocking, kAsync, kQueued, kHooks };
const char* StyleName(Style style);  // "blocking", "async", "queued", "hooks"
inline void PrintTo(Style style, std::ostream* os) { *os << StyleName(style); }

// The loss reports a client received.
struct LossReport {
  int count = 0;
  std::string says;    // the callback's lock name, or the LOST entry's message
  uint64_t token = 0;  // the callback's fencing token; 0 from a queue (entries carry none)
};

// The release requests a holder heard (dlock_options_set_on_release_requested).
struct RequestReport {
  int count = 0;
  std::string reason;  // the first one's
};

class StyledClient {
 public:
  // Opens a client for url in this style (ADD_FAILURE()s when it cannot).
  static std::unique_ptr<StyledClient> Open(Style style, const std::string& url);
  virtual ~StyledClient() = default;  // closes the client, if Close() did not

  dlock_client* get() const { return client_; }
  // The message of the last call that did not return DLOCK_OK.
  const std::string& last_error() const { return last_error_; }

  // Like dlock_acquire, dlock_extend and dlock_release (which frees l), in this style: the
  // call's own refusal, or the outcome it reported.
  virtual dlock_status Acquire(const char* name, const dlock_options* o, dlock_lock** out) = 0;
  virtual dlock_status Extend(dlock_lock* l, uint64_t lease_ms) = 0;
  virtual dlock_status SetValue(dlock_lock* l, const std::string& value) = 0;
  virtual dlock_status Release(dlock_lock* l) = 0;

  // Makes locks acquired with o report their loss the way this style does.
  virtual void ReportLosses(dlock_options* o) = 0;
  // The reports so far, after waiting up to limit for the first one.
  virtual LossReport AwaitLoss(std::chrono::milliseconds limit) = 0;
  // Makes locks acquired with o hear release requests the way this style does (a callback, or
  // DLOCK_QUEUE_RELEASE_REQUESTED entries).
  virtual void HearReleaseRequests(dlock_options* o) = 0;
  // The requests heard so far, after letting the client work up to limit for the first one.
  virtual RequestReport AwaitReleaseRequest(std::chrono::milliseconds limit) = 0;
  // Lets time pass while the client works (an evbase client works only while its loop runs).
  virtual void Pass(std::chrono::milliseconds d) = 0;
  // dlock_client_close, finished (in this style's way).
  virtual void Close() {
    dlock_client_close(client_);
    client_ = nullptr;
  }

 protected:
  dlock_client* client_ = nullptr;
  std::string last_error_;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_CONFORMANCE_STYLED_CLIENT_H_
