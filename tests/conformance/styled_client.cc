#include "conformance/styled_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "event_loop_util.h"
#include "poll_loop.h"
#include "queue_util.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using std::chrono::milliseconds;

// Longest a call may take before the test gives up on it: far beyond any bound the tests set.
constexpr milliseconds kCallLimit{60000};

// What a LostRecorder (an on_lost callback) received, checking it ran on the thread the style
// promises.
LossReport ReportOf(const LostRecorder& lost, bool on_test_thread) {
  LossReport report;
  report.count = lost.calls.load();
  if (report.count > 0) {
    EXPECT_EQ(lost.on_caller_thread.load(), on_test_thread) << "on_lost ran on the wrong thread";
    report.says = lost.name();
    report.token = lost.token.load();
  }
  return report;
}

// A release-request callback's record, checking the thread it ran on.
struct RequestRecorder {
  std::atomic<int> calls{0};
  std::atomic<bool> on_caller_thread{false};
  std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::string first_reason;
  static void Fn(const char* /*name*/, const char* reason, void* arg) {
    auto* self = static_cast<RequestRecorder*>(arg);
    if (std::this_thread::get_id() == self->caller) self->on_caller_thread = true;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      if (self->calls.load() == 0) self->first_reason = reason;
    }
    self->calls++;
  }
  RequestReport Report(bool on_test_thread) {
    RequestReport report;
    report.count = calls.load();
    if (report.count > 0) {
      EXPECT_EQ(on_caller_thread.load(), on_test_thread) << "on_release_requested ran on the wrong thread";
      std::lock_guard<std::mutex> lock(mu);
      report.reason = first_reason;
    }
    return report;
  }
};

dlock_client* OpenWithItsOwnThread(const std::string& url) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(url.c_str(), &c), DLOCK_OK) << dlock_last_error();
  return c;
}

class BlockingClient : public StyledClient {
 public:
  explicit BlockingClient(const std::string& url) { client_ = OpenWithItsOwnThread(url); }
  ~BlockingClient() override { Close(); }

  dlock_status Acquire(const char* name, const dlock_options* o, dlock_lock** out) override {
    return Noted(dlock_acquire(client_, name, o, out));
  }
  dlock_status Extend(dlock_lock* l, uint64_t lease_ms) override {
    return Noted(dlock_extend(l, lease_ms));
  }
  dlock_status SetValue(dlock_lock* l, const std::string& v) override {
    return Noted(dlock_lock_set_value(l, v.data(), v.size()));
  }
  dlock_status Release(dlock_lock* l) override { return Noted(dlock_release(l)); }
  void ReportLosses(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_lost(o, &LostRecorder::Fn, &lost_), DLOCK_OK);
  }
  LossReport AwaitLoss(milliseconds limit) override {
    WaitFor([&] { return lost_.calls.load() > 0; }, limit);
    return ReportOf(lost_, false);  // on the client's own thread
  }
  void HearReleaseRequests(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_release_requested(o, &RequestRecorder::Fn, &requests_), DLOCK_OK);
  }
  RequestReport AwaitReleaseRequest(milliseconds limit) override {
    WaitFor([&] { return requests_.calls.load() > 0; }, limit);
    return requests_.Report(false);
  }
  void Pass(milliseconds d) override { std::this_thread::sleep_for(d); }

 private:
  dlock_status Noted(dlock_status s) {
    if (s != DLOCK_OK) last_error_ = dlock_last_error();
    return s;
  }

  LostRecorder lost_;
  RequestRecorder requests_;
};

// A client on the test's own loop: a libevent base (kAsync) or a poll(2) loop driving it
// through the hook table (kHooks).
dlock_status OpenOn(Loop& loop, const std::string& url, dlock_client** out) {
  return dlock_client_open_evbase(url.c_str(), loop.base(), out);
}
dlock_status OpenOn(PollLoop& loop, const std::string& url, dlock_client** out) {
  return loop.Open(url, out);
}
// What a closed client must have left: nothing on the loop, and (hooks) one cleanup call.
void ExpectLetGo(const Loop&) {}
void ExpectLetGo(const PollLoop& loop) {
  EXPECT_EQ(loop.cleanups(), 1) << "cleanup hook calls";
}

template <typename TestLoop>
class AsyncClient : public StyledClient {
 public:
  explicit AsyncClient(const std::string& url) {
    EXPECT_EQ(OpenOn(loop_, url, &client_), DLOCK_OK) << dlock_last_error();
  }
  ~AsyncClient() override { Close(); }

  dlock_status Acquire(const char* name, const dlock_options* o, dlock_lock** out) override {
    Call& call = calls_.emplace_back();
    return Finish(call, dlock_acquire_async(client_, name, o, &AcquireDone, &call), out);
  }
  dlock_status Extend(dlock_lock* l, uint64_t lease_ms) override {
    Call& call = calls_.emplace_back();
    return Finish(call, dlock_extend_async(l, lease_ms, &Done, &call), nullptr);
  }
  dlock_status SetValue(dlock_lock* l, const std::string& v) override {
    Call& call = calls_.emplace_back();
    return Finish(call, dlock_lock_set_value_async(l, v.data(), v.size(), &Done, &call), nullptr);
  }
  dlock_status Release(dlock_lock* l) override {
    Call& call = calls_.emplace_back();
    return Finish(call, dlock_release_async(l, &Done, &call), nullptr);
  }
  void ReportLosses(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_lost(o, &LostRecorder::Fn, &lost_), DLOCK_OK);
  }
  LossReport AwaitLoss(milliseconds limit) override {
    loop_.RunUntil([&] { return lost_.calls.load() > 0; }, limit);
    return ReportOf(lost_, true);  // on the loop, which runs on the test's thread
  }
  void HearReleaseRequests(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_release_requested(o, &RequestRecorder::Fn, &requests_), DLOCK_OK);
  }
  RequestReport AwaitReleaseRequest(milliseconds limit) override {
    loop_.RunUntil([&] { return requests_.calls.load() > 0; }, limit);
    return requests_.Report(true);
  }
  void Pass(milliseconds d) override {
    loop_.RunUntil([] { return false; }, d);
  }
  void Close() override {
    if (client_ == nullptr) return;
    dlock_client_close(client_);
    client_ = nullptr;
    EXPECT_TRUE(loop_.Drain(kCallLimit)) << "the closed client left events on the loop";
    ExpectLetGo(loop_);
  }

 private:
  // One _async call and what its done callback reported. Kept until the client goes, so that
  // a callback coming late (after the test gave up on it) still finds it.
  struct Call {
    bool refused = false;
    bool done = false;
    dlock_status status = DLOCK_EINTERNAL;
    dlock_lock* lock = nullptr;
    std::string error;
  };

  static void Record(Call* call, dlock_status s, dlock_lock* l) {
    EXPECT_FALSE(call->refused) << "done ran for a call that was refused";
    call->done = true;
    call->status = s;
    call->lock = l;
    if (s != DLOCK_OK) call->error = dlock_last_error();
  }
  static void AcquireDone(dlock_status s, dlock_lock* l, void* arg) {
    Record(static_cast<Call*>(arg), s, l);
  }
  static void Done(dlock_status s, void* arg) { Record(static_cast<Call*>(arg), s, nullptr); }

  dlock_status Finish(Call& call, dlock_status started, dlock_lock** out) {
    if (started != DLOCK_OK) {
      call.refused = true;
      last_error_ = dlock_last_error();
      return started;
    }
    EXPECT_FALSE(call.done) << "done ran before the call returned";
    if (!loop_.RunUntil([&] { return call.done; }, kCallLimit)) {
      ADD_FAILURE() << "no outcome within " << kCallLimit.count() << " ms";
      return DLOCK_EINTERNAL;
    }
    if (out != nullptr) *out = call.lock;
    if (call.status != DLOCK_OK) last_error_ = call.error;
    return call.status;
  }

  TestLoop loop_;
  std::list<Call> calls_;
  LostRecorder lost_;
  RequestRecorder requests_;
};

class QueuedClient : public StyledClient {
 public:
  explicit QueuedClient(const std::string& url) { client_ = OpenWithItsOwnThread(url); }
  ~QueuedClient() override { Close(); }

  dlock_status Acquire(const char* name, const dlock_options* o, dlock_lock** out) override {
    const uint64_t tag = next_tag_++;
    return Finish(dlock_acquire_queued(client_, name, o, queue_.get(), tag), tag, out);
  }
  dlock_status Extend(dlock_lock* l, uint64_t lease_ms) override {
    const uint64_t tag = next_tag_++;
    return Finish(dlock_extend_queued(l, lease_ms, queue_.get(), tag), tag, nullptr);
  }
  dlock_status SetValue(dlock_lock* l, const std::string& v) override {
    const uint64_t tag = next_tag_++;
    return Finish(dlock_lock_set_value_queued(l, v.data(), v.size(), queue_.get(), tag), tag, nullptr);
  }
  dlock_status Release(dlock_lock* l) override {
    const uint64_t tag = next_tag_++;
    return Finish(dlock_release_queued(l, queue_.get(), tag), tag, nullptr);
  }
  void ReportLosses(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_lost_queued(o, queue_.get(), kLostTag), DLOCK_OK);
  }
  LossReport AwaitLoss(milliseconds limit) override {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (lost_.empty() && std::chrono::steady_clock::now() < deadline) {
      Take(Collect(queue_.get(), 1, std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now())));
    }
    LossReport report;
    report.count = static_cast<int>(lost_.size());
    if (!lost_.empty()) report.says = lost_.front().error;
    return report;
  }
  void HearReleaseRequests(dlock_options* o) override {
    EXPECT_EQ(dlock_options_set_on_release_requested_queued(o, queue_.get(), kRequestTag), DLOCK_OK);
  }
  RequestReport AwaitReleaseRequest(milliseconds limit) override {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (requests_.empty() && std::chrono::steady_clock::now() < deadline) {
      Take(Collect(queue_.get(), 1, std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now())));
    }
    RequestReport report;
    report.count = static_cast<int>(requests_.size());
    if (!requests_.empty()) report.reason = requests_.front().error;  // the entry's message
    return report;
  }
  void Pass(milliseconds d) override {
    Take(Collect(queue_.get(), SIZE_MAX, d));
  }

 private:
  static constexpr uint64_t kLostTag = UINT64_MAX;
  static constexpr uint64_t kRequestTag = UINT64_MAX - 1;

  // Sets LOST entries aside; any DONE entry here is one nobody waits for.
  void Take(const std::vector<Entry>& entries) {
    for (const Entry& e : entries) {
      if (e.kind == DLOCK_QUEUE_LOST) {
        EXPECT_EQ(e.tag, kLostTag) << e;
        EXPECT_EQ(e.status, DLOCK_NOT_HELD) << e;
        lost_.push_back(e);
      } else if (e.kind == DLOCK_QUEUE_RELEASE_REQUESTED) {
        EXPECT_EQ(e.tag, kRequestTag) << e;
        EXPECT_EQ(e.status, DLOCK_OK) << e;
        requests_.push_back(e);
      } else {
        ADD_FAILURE() << "an entry nobody waits for: " << e;
      }
    }
  }

  dlock_status Finish(dlock_status started, uint64_t tag, dlock_lock** out) {
    if (started != DLOCK_OK) {
      last_error_ = dlock_last_error();
      return started;
    }
    const auto deadline = std::chrono::steady_clock::now() + kCallLimit;
    while (std::chrono::steady_clock::now() < deadline) {
      std::optional<Entry> mine;
      std::vector<Entry> others;
      for (Entry& e : Collect(queue_.get(), 1, 100ms)) {
        if (!mine && e.kind == DLOCK_QUEUE_DONE && e.tag == tag) {
          mine = std::move(e);
        } else {
          others.push_back(std::move(e));
        }
      }
      Take(others);
      if (mine) {
        if (out != nullptr) *out = mine->lock;
        if (mine->status != DLOCK_OK) last_error_ = mine->error;
        return mine->status;
      }
    }
    ADD_FAILURE() << "no entry for tag " << tag << " within " << kCallLimit.count() << " ms";
    return DLOCK_EINTERNAL;
  }

  Queue queue_;
  uint64_t next_tag_ = 1;
  std::vector<Entry> lost_;
  std::vector<Entry> requests_;
};

}  // namespace

const char* StyleName(Style style) {
  switch (style) {
    case Style::kBlocking:
      return "blocking";
    case Style::kAsync:
      return "async";
    case Style::kQueued:
      return "queued";
    case Style::kHooks:
      return "hooks";
  }
  return "unknown";
}

std::unique_ptr<StyledClient> StyledClient::Open(Style style, const std::string& url) {
  switch (style) {
    case Style::kBlocking:
      return std::make_unique<BlockingClient>(url);
    case Style::kAsync:
      return std::make_unique<AsyncClient<Loop>>(url);
    case Style::kHooks:
      return std::make_unique<AsyncClient<PollLoop>>(url);
    case Style::kQueued:
      return std::make_unique<QueuedClient>(url);
  }
  return nullptr;
}

}  // namespace dlock_test
