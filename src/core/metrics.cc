#include "core/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace dlock {

namespace {

constexpr const char* kKindNames[Metrics::kKinds] = {"exclusive", "shared", "semaphore"};
constexpr const char* kAcquireOutcomes[] = {"acquired", "not_acquired", "error", "cancelled"};
constexpr const char* kCallOutcomes[] = {"ok", "not_held", "error"};
constexpr const char* kRenewalOutcomes[] = {"succeeded", "failed", "refused"};

uint64_t Load(const std::atomic<uint64_t>& counter) { return counter.load(std::memory_order_relaxed); }

// The shortest text that reads back as v: integers without a fraction, the rest with the
// fewest %g digits that round-trip (0.0005, not 0.00050000000000000001).
std::string Number(double v) {
  char buf[32];
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 9.0e15 && v > -9.0e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

class Collector {
 public:
  Collector(std::vector<MetricFamily>* families, std::vector<MetricSample>* samples)
      : families_(families), samples_(samples) {}

  void Family(const char* name, const char* type, const char* help) {
    family_ = name;
    families_->push_back({name, type, help});
  }
  void Sample(const std::string& suffix, std::string labels, double value) {
    samples_->push_back({family_, family_ + suffix, std::move(labels), value});
  }
  void Histogram(const char* name, const char* help, const dlock::Histogram& h) {
    Family(name, "histogram", help);
    const dlock::Histogram::Snapshot s = h.Read();
    for (size_t i = 0; i < dlock::Histogram::kBounds.size(); ++i) {
      Sample("_bucket", "le=\"" + Number(dlock::Histogram::kBounds[i]) + "\"", static_cast<double>(s.cumulative[i]));
    }
    const uint64_t count = s.cumulative.back();
    Sample("_bucket", "le=\"+Inf\"", static_cast<double>(count));
    Sample("_sum", "", s.sum_seconds);
    Sample("_count", "", static_cast<double>(count));
  }

 private:
  std::vector<MetricFamily>* families_;
  std::vector<MetricSample>* samples_;
  std::string family_;
};

}  // namespace

const char* LossCauseCode(LossCause cause) {
  switch (cause) {
    case LossCause::kRefused: return "refused";
    case LossCause::kExpired: return "expired";
    case LossCause::kCount: break;
  }
  return "unknown";
}

void Histogram::Observe(Clock::duration elapsed) {
  const int64_t ns = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  const double seconds = static_cast<double>(ns) / 1e9;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());  // le: <=
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

bool Metrics::SetHook(EventHook hook) {
  std::lock_guard<std::mutex> lock(hook_mu_);
  if (hook_owner_ != nullptr) return false;
  hook_owner_ = std::make_unique<EventHook>(std::move(hook));
  hook_.store(hook_owner_.get(), std::memory_order_release);
  return true;
}

int Metrics::KindIndex(LockKind kind, uint32_t permits) {
  if (permits > 0) return 2;
  return kind == LockKind::kShared ? 1 : 0;
}

void Metrics::AcquireEnded(int kind, AcquireOutcome outcome, Clock::duration waited, bool handed_over) {
  Add(acquires_[kind][static_cast<int>(outcome)]);
  if (outcome == AcquireOutcome::kAcquired || outcome == AcquireOutcome::kNotAcquired) {
    wait_seconds_.Observe(waited);
  }
  if (handed_over) Add(handovers_);
}

void Metrics::Released(CallOutcome outcome, Clock::duration held) {
  Add(releases_[static_cast<int>(outcome)]);
  if (outcome == CallOutcome::kOk) hold_seconds_.Observe(held);
}

void Metrics::RenewalAnswered(RenewalOutcome outcome, Clock::duration round_trip) {
  Add(renewals_[static_cast<int>(outcome)]);
  if (outcome != RenewalOutcome::kFailed) renewal_seconds_.Observe(round_trip);
}

void Metrics::Lost(LossCause cause, Clock::duration held) {
  Add(losses_[static_cast<int>(cause)]);
  hold_seconds_.Observe(held);
}

void Metrics::Collect(uint64_t held, std::vector<MetricFamily>* families,
                      std::vector<MetricSample>* samples) const {
  Collector c(families, samples);
  c.Family("dlock_acquire_attempts_total", "counter",
           "Acquire attempts sent to the backend (a confirmed fair hand-over is not one).");
  for (int k = 0; k < kKinds; ++k) {
    c.Sample("", std::string("kind=\"") + kKindNames[k] + "\"", static_cast<double>(Load(attempts_[k])));
  }
  c.Family("dlock_acquires_total", "counter",
           "Acquisitions ended, by lock kind and outcome (acquired, not_acquired: the wait ran "
           "out, error, cancelled).");
  for (int k = 0; k < kKinds; ++k) {
    for (int o = 0; o < static_cast<int>(AcquireOutcome::kCount); ++o) {
      c.Sample("", std::string("kind=\"") + kKindNames[k] + "\",outcome=\"" + kAcquireOutcomes[o] + "\"",
               static_cast<double>(Load(acquires_[k][o])));
    }
  }
  c.Family("dlock_handovers_total", "counter",
           "Acquisitions that a fair hand-over gave the lock (the holder's release passed it on).");
  c.Sample("", "", static_cast<double>(Load(handovers_)));
  c.Family("dlock_releases_total", "counter", "Releases by their caller, by outcome (ok, not_held, error).");
  for (int o = 0; o < static_cast<int>(CallOutcome::kCount); ++o) {
    c.Sample("", std::string("outcome=\"") + kCallOutcomes[o] + "\"", static_cast<double>(Load(releases_[o])));
  }
  c.Family("dlock_extends_total", "counter", "Extends by their caller, by outcome (ok, not_held, error).");
  for (int o = 0; o < static_cast<int>(CallOutcome::kCount); ++o) {
    c.Sample("", std::string("outcome=\"") + kCallOutcomes[o] + "\"", static_cast<double>(Load(extends_[o])));
  }
  c.Family("dlock_renewals_sent_total", "counter", "Lease renewals sent by the heartbeats.");
  c.Sample("", "", static_cast<double>(Load(renewals_sent_)));
  c.Family("dlock_renewals_total", "counter",
           "Lease renewals answered, by outcome (succeeded; failed: an error, retried until the "
           "local deadline; refused: the server no longer had the owner's lock).");
  for (int o = 0; o < static_cast<int>(RenewalOutcome::kCount); ++o) {
    c.Sample("", std::string("outcome=\"") + kRenewalOutcomes[o] + "\"", static_cast<double>(Load(renewals_[o])));
  }
  c.Family("dlock_losses_total", "counter",
           "Locks lost while held, by cause (refused: the server no longer had the owner's lock; "
           "expired: renewals failed until the local deadline).");
  for (int o = 0; o < static_cast<int>(LossCause::kCount); ++o) {
    c.Sample("", std::string("cause=\"") + LossCauseCode(static_cast<LossCause>(o)) + "\"",
             static_cast<double>(Load(losses_[o])));
  }
  c.Family("dlock_locks_held", "gauge", "Locks this client holds now.");
  c.Sample("", "", static_cast<double>(held));
  c.Family("dlock_acquires_waiting", "gauge", "Acquisitions of this client under way now.");
  c.Sample("", "", static_cast<double>(std::max<int64_t>(0, waiting_.load(std::memory_order_relaxed))));
  c.Histogram("dlock_acquire_wait_seconds",
              "Time from an acquire's start to its end, acquired or not (errors and cancels left out).",
              wait_seconds_);
  c.Histogram("dlock_acquire_attempt_seconds", "Round trip of each acquire attempt.", attempt_seconds_);
  c.Histogram("dlock_hold_seconds", "Time locks were held, from acquired to released or lost.", hold_seconds_);
  c.Histogram("dlock_renewal_seconds", "Round trip of each lease renewal answered by the server.",
              renewal_seconds_);
}

std::string Metrics::Text(uint64_t held) const {
  std::vector<MetricFamily> families;
  std::vector<MetricSample> samples;
  Collect(held, &families, &samples);
  std::string out;
  out.reserve(8192);
  size_t next = 0;
  for (const MetricFamily& f : families) {
    out += "# HELP " + f.name + " " + f.help + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    for (; next < samples.size() && samples[next].family == f.name; ++next) {
      const MetricSample& s = samples[next];
      out += s.name;
      if (!s.labels.empty()) out += "{" + s.labels + "}";
      out += " " + Number(s.value) + "\n";
    }
  }
  return out;
}

}  // namespace dlock
