// One acquisition's waiting (docs/guarantees.md, 5), written once for the blocking, async and
// queued styles. A state machine: it takes events (an attempt answered, a release heard, a
// hand-over heard, the watch gone live, the timer, a cancel) and says what to do next (send an
// attempt, wait until a time, adopt the hold, give up). The styles only drive it: the blocking
// Client::Acquire on the caller's thread, AsyncAcquire on the loop. It does no I/O and takes no
// lock, so its driver feeds it from one thread at a time.
//
// The policy: after a refused attempt, give up, watch the lock's releases (once, before the next
// attempt, so that a release in between cannot be missed), or sleep until the jittered,
// exponentially growing fallback retry or just after the holder's lease may run out, whichever
// comes first. A release heard cuts any sleep short. A fair waiter (one with a place in the
// server's line) watches before its first attempt, and a hand-over it hears is confirmed by its
// next attempt, which is not counted as a try.
#ifndef DLOCK_CORE_ACQUISITION_H_
#define DLOCK_CORE_ACQUISITION_H_

#include <cstdint>

#include "core/backend.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "core/options.h"
#include "core/status.h"

namespace dlock {

class Acquisition {
 public:
  // Waits for a watch to go live at most this long before trying again without it.
  static constexpr Millis kWatchLiveWait{1000};

  struct Step {
    enum class Kind {
      kNone,      // nothing new: keep waiting (until the last kWait's time)
      kAttempt,   // send NextAttempt()'s request, and report its answer to Answered()
      kWait,      // no attempt before `until`, unless an event asks for one
      kAcquired,  // the answer just reported won the lock: adopt it
      kGaveUp,    // the wait ran out: the answer just reported is the refusal to report
      kFinished,  // ended without a hold: `status` says why (an error, a cancel)
    };
    Kind kind = Kind::kNone;
    bool watch = false;       // first: watch the name's releases (Backend::Watch)
    bool unwatch = false;     // first: stop watching them (Backend::Unwatch)
    bool leave_line = false;  // then: give up the place in line (Backend::LeaveLine)
    TimePoint until{};        // kWait
    Status status;            // kFinished

    static Step Of(Kind kind) {
      Step step;
      step.kind = kind;
      return step;
    }
    static Step WaitUntil(TimePoint until, bool watch = false) {
      Step step = Of(Kind::kWait);
      step.until = until;
      step.watch = watch;
      return step;
    }
  };

  // request: made by Client::MakeRequest (a waiter id when it waits in line). options: kept by
  // reference, so they must outlive this. notifies: the backend tells watchers of releases.
  // metrics: the client's, which outlive this; counts attempts, their round trips and how
  // the acquisition ended (may be null).
  Acquisition(LockRequest request, const AcquireOptions& options, bool notifies, TimePoint start,
              Metrics* metrics = nullptr);
  Acquisition(LockRequest, const AcquireOptions&&, bool, TimePoint, Metrics* = nullptr) = delete;  // would dangle
  ~Acquisition();
  Acquisition(const Acquisition&) = delete;
  Acquisition& operator=(const Acquisition&) = delete;

  Step Start();
  // The request of the attempt a kAttempt step asks for, sent at `sent`.
  const LockRequest& NextAttempt(TimePoint sent);
  Step Answered(const Status& s, const AcquireAttempt& answer, TimePoint now);
  Step WatchLive(bool live);
  Step Released();
  Step HandedOver();
  Step TimerFired();
  Step Cancel(const Status& why);

  bool finished() const { return finished_; }
  bool in_flight() const { return in_flight_; }
  uint32_t attempts() const { return attempts_; }
  TimePoint start() const { return start_; }
  TimePoint wait_until() const { return wait_until_; }
  const LockRequest& request() const { return request_; }

 private:
  Step Retry();
  Step Finish(Step::Kind kind, Status status = Status::Ok());
  Step AfterRefusal(TimePoint now, int64_t holder_ttl_ms);

  LockRequest request_;  // queue_ms set per attempt
  const AcquireOptions& options_;  // the driver's, which outlives this
  const bool notifies_;
  const bool in_line_;
  const TimePoint start_;
  const TimePoint wait_until_;
  uint64_t backoff_ms_;
  uint32_t attempts_ = 0;
  bool watching_ = false;
  bool live_ = false;
  bool live_when_sent_ = false;
  bool in_flight_ = false;
  bool released_meanwhile_ = false;  // a release heard while an attempt was out
  bool grant_heard_ = false;         // a hand-over heard: the next attempt confirms it
  bool confirming_ = false;          // the attempt out confirms a hand-over
  bool started_ = false;
  bool finished_ = false;
  Metrics* const metrics_;
  const int kind_index_;
  TimePoint sent_{};  // the attempt out
  uint64_t won_token_ = 0;  // the winning answer's, for the acquired event
};

}  // namespace dlock

#endif  // DLOCK_CORE_ACQUISITION_H_
