// The acquisition state machine alone (src/core/acquisition.h): events in, steps out, no server
// and no clock of its own (times are given). The conformance suite runs it end to end in every
// style; these pin the rules a reader of acquisition.cc should be able to rely on.
#include "core/acquisition.h"

#include <gtest/gtest.h>

namespace dlock {
namespace {

using Kind = Acquisition::Step::Kind;

AcquireOptions WaitingOptions(int64_t wait_ms) {
  AcquireOptions options;
  options.wait_ms = wait_ms;
  options.lease_ms = 9000;
  options.retry_min_ms = 50;
  options.retry_max_ms = 1000;
  return options;
}

LockRequest Request(bool in_line) {
  LockRequest request;
  request.name = "job";
  request.owner_value = "token";
  if (in_line) request.waiter_id = "waiter";
  return request;
}

AcquireAttempt Refused(int64_t holder_ttl_ms = -2) {
  AcquireAttempt answer;
  answer.holder_ttl_ms = holder_ttl_ms;
  return answer;
}

AcquireAttempt Won() {
  AcquireAttempt answer;
  answer.acquired = true;
  answer.fencing_token = 7;
  return answer;
}

TEST(AcquisitionTest, OneTryGivesUpAfterOneRefusal) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(0);
  Acquisition a(Request(false), a_options, /*notifies=*/true, t0);
  Acquisition::Step step = a.Start();
  EXPECT_EQ(step.kind, Kind::kAttempt);
  EXPECT_FALSE(step.watch);
  EXPECT_EQ(a.NextAttempt(t0).queue_ms, 0u) << "a single try announces no waiting writer";
  step = a.Answered(Status::Ok(), Refused(), t0);
  EXPECT_EQ(step.kind, Kind::kGaveUp);
  EXPECT_FALSE(step.unwatch);
  EXPECT_FALSE(step.leave_line);
  EXPECT_EQ(a.attempts(), 1u);
  EXPECT_TRUE(a.finished());
}

TEST(AcquisitionTest, AWaiterWatchesOnceThenSleepsNoLongerThanTheHoldersLease) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Acquisition a(Request(false), a_options, /*notifies=*/true, t0);
  ASSERT_EQ(a.Start().kind, Kind::kAttempt);
  a.NextAttempt(t0);
  Acquisition::Step step = a.Answered(Status::Ok(), Refused(5000), t0);
  EXPECT_EQ(step.kind, Kind::kWait);
  EXPECT_TRUE(step.watch) << "the first refusal watches the releases";
  EXPECT_LE(step.until, t0 + Acquisition::kWatchLiveWait);
  step = a.WatchLive(true);
  EXPECT_EQ(step.kind, Kind::kAttempt) << "live: the next attempt cannot miss a release";
  a.NextAttempt(t0);
  step = a.Answered(Status::Ok(), Refused(30), t0);
  EXPECT_EQ(step.kind, Kind::kWait);
  EXPECT_FALSE(step.watch) << "watched once";
  EXPECT_LE(step.until, t0 + Millis(31)) << "not past the holder's lease";
  EXPECT_EQ(a.TimerFired().kind, Kind::kAttempt);
  EXPECT_EQ(a.attempts(), 2u);
}

TEST(AcquisitionTest, AReleaseHeardDuringAnAttemptIsNotLost) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Acquisition a(Request(false), a_options, /*notifies=*/true, t0);
  a.Start();
  a.NextAttempt(t0);
  EXPECT_EQ(a.Released().kind, Kind::kNone) << "one attempt at a time";
  EXPECT_EQ(a.Answered(Status::Ok(), Refused(), t0).kind, Kind::kAttempt)
      << "the refusal may predate the release: try again at once";
}

TEST(AcquisitionTest, AFairWaiterWatchesFirstAndConfirmsAHandOverWithoutCountingATry) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Acquisition a(Request(true), a_options, /*notifies=*/true, t0);
  Acquisition::Step step = a.Start();
  EXPECT_EQ(step.kind, Kind::kAttempt);
  EXPECT_TRUE(step.watch) << "in line: listen before asking";
  EXPECT_GT(a.NextAttempt(t0).queue_ms, 0u) << "a waiting writer announces itself";
  EXPECT_EQ(a.HandedOver().kind, Kind::kNone) << "heard during the attempt: confirm after it";
  EXPECT_EQ(a.Answered(Status::Ok(), Refused(), t0).kind, Kind::kAttempt);
  a.NextAttempt(t0);
  EXPECT_EQ(a.attempts(), 1u) << "the confirmation is not a try";
  step = a.Answered(Status::Ok(), Won(), t0);
  EXPECT_EQ(step.kind, Kind::kAcquired);
  EXPECT_TRUE(step.unwatch);
  EXPECT_FALSE(step.leave_line) << "the server took it out of the line";
}

// Metrics: a confirmed hand-over is counted as one, not as an attempt; the waiting gauge
// counts the acquisition from Start to its end; one wait is observed, with its length.
TEST(AcquisitionTest, ItsMetricsCountAttemptsHandOversAndTheWait) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Metrics m;
  auto count = [&](const std::string& key) {
    std::vector<MetricFamily> families;
    std::vector<MetricSample> samples;
    m.Collect(ClientGauges{}, &families, &samples);
    for (const MetricSample& s : samples) {
      if ((s.labels.empty() ? s.name : s.name + "{" + s.labels + "}") == key) return s.value;
    }
    ADD_FAILURE() << "no sample " << key;
    return -1.0;
  };
  {
    Acquisition a(Request(true), a_options, /*notifies=*/true, t0, &m);
    a.Start();
    EXPECT_EQ(count("dlock_acquires_waiting"), 1);
    a.NextAttempt(t0);
    (void)a.HandedOver();
    (void)a.Answered(Status::Ok(), Refused(), t0 + Millis(1));
    a.NextAttempt(t0 + Millis(1));
    EXPECT_EQ(a.Answered(Status::Ok(), Won(), t0 + Millis(2)).kind, Kind::kAcquired);
  }
  EXPECT_EQ(count("dlock_acquire_attempts_total{kind=\"exclusive\"}"), 1);
  EXPECT_EQ(count("dlock_acquires_total{kind=\"exclusive\",outcome=\"acquired\"}"), 1);
  EXPECT_EQ(count("dlock_handovers_total"), 1);
  EXPECT_EQ(count("dlock_acquires_waiting"), 0);
  EXPECT_EQ(count("dlock_acquire_wait_seconds_count"), 1);
  EXPECT_EQ(count("dlock_acquire_attempt_seconds_count"), 2);
  // Dropped unfinished (its driver gone): no longer waiting; a cancel is its own outcome.
  {
    Acquisition a(Request(false), a_options, /*notifies=*/true, t0, &m);
    a.Start();
  }
  EXPECT_EQ(count("dlock_acquires_waiting"), 0);
  Acquisition b(Request(false), a_options, /*notifies=*/true, t0, &m);
  b.Start();
  (void)b.Cancel(Status::Cancelled("cancelled"));
  EXPECT_EQ(count("dlock_acquires_total{kind=\"exclusive\",outcome=\"cancelled\"}"), 1);
  EXPECT_EQ(count("dlock_acquire_wait_seconds_count"), 1) << "a cancel's wait is not observed";
}

// Histogram buckets are upper bounds, inclusive (Prometheus' le), and cumulative.
TEST(AcquisitionTest, HistogramBucketsAreInclusiveUpperBounds) {
  Histogram h;
  h.Observe(std::chrono::microseconds(1000));  // exactly 1 ms: le="0.001"
  h.Observe(std::chrono::microseconds(1001));
  h.Observe(std::chrono::seconds(100));        // past the last bound: +Inf only
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative[0], 0u);  // le 0.0005
  EXPECT_EQ(s.cumulative[1], 1u);  // le 0.001
  EXPECT_EQ(s.cumulative[2], 2u);  // le 0.0025
  EXPECT_EQ(s.cumulative[Histogram::kBounds.size() - 1], 2u);
  EXPECT_EQ(s.cumulative.back(), 3u);
  EXPECT_NEAR(s.sum_seconds, 100.002001, 1e-9);
}

TEST(AcquisitionTest, AWaitThatRunsOutLeavesTheLineAndStopsWatching) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(100);
  Acquisition a(Request(true), a_options, /*notifies=*/true, t0);
  a.Start();
  a.NextAttempt(t0);
  Acquisition::Step step = a.Answered(Status::Ok(), Refused(), t0 + Millis(100));
  EXPECT_EQ(step.kind, Kind::kGaveUp);
  EXPECT_TRUE(step.unwatch);
  EXPECT_TRUE(step.leave_line) << "leaving hands on a grant heard but not confirmed";
}

TEST(AcquisitionTest, AnErrorOrACancelEndsItOnceAndLaterEventsDoNothing) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Acquisition a(Request(true), a_options, /*notifies=*/true, t0);
  a.Start();
  a.NextAttempt(t0);
  Acquisition::Step step = a.Cancel(Status::Cancelled("cancelled"));
  EXPECT_EQ(step.kind, Kind::kFinished);
  EXPECT_EQ(step.status.code(), Code::kCancelled);
  EXPECT_TRUE(step.unwatch);
  EXPECT_TRUE(step.leave_line);
  EXPECT_EQ(a.Answered(Status::Ok(), Won(), t0).kind, Kind::kNone)
      << "a win after the cancel is the driver's to give back";
  EXPECT_EQ(a.Released().kind, Kind::kNone);
  EXPECT_EQ(a.HandedOver().kind, Kind::kNone);
  EXPECT_EQ(a.Cancel(Status::Cancelled("again")).kind, Kind::kNone);

  const AcquireOptions b_options = WaitingOptions(-1);
  Acquisition b(Request(false), b_options, /*notifies=*/false, t0);
  b.Start();
  b.NextAttempt(t0);
  step = b.Answered(Status::IoError("server gone"), AcquireAttempt(), t0);
  EXPECT_EQ(step.kind, Kind::kFinished);
  EXPECT_EQ(step.status.code(), Code::kIoError);
}

TEST(AcquisitionTest, WithoutNotificationsAWaiterOnlySleeps) {
  const TimePoint t0 = Now();
  const AcquireOptions a_options = WaitingOptions(-1);
  Acquisition a(Request(false), a_options, /*notifies=*/false, t0);
  a.Start();
  a.NextAttempt(t0);
  Acquisition::Step step = a.Answered(Status::Ok(), Refused(), t0);
  EXPECT_EQ(step.kind, Kind::kWait);
  EXPECT_FALSE(step.watch);
  EXPECT_LE(step.until, t0 + Millis(50)) << "the first retry within retry_min";
}

}  // namespace
}  // namespace dlock
