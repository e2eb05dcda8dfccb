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

// text as a Prometheus label value, quotes included: backslash, quote and newline escaped;
// control bytes and bytes that are not UTF-8 become '?' (a label value must be UTF-8).
std::string LabelValue(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool valid = n > 0 && i + n <= text.size() && (n == 1 || c >= 0xc2);
    for (size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (!valid) {
      out += '?';
      ++i;
      continue;
    }
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out + "\"";
}


}  // namespace

// Builds the families and samples (Collect, CollectGroups).
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
    HistogramSamples(h, "");
  }
  // One histogram's samples; labels ("" or `group="x"`) go before le.
  void HistogramSamples(const dlock::Histogram& h, const std::string& labels) {
    const dlock::Histogram::Snapshot s = h.Read();
    const std::string before = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < dlock::Histogram::kBounds.size(); ++i) {
      Sample("_bucket", before + "le=\"" + Number(dlock::Histogram::kBounds[i]) + "\"",
             static_cast<double>(s.cumulative[i]));
    }
    const uint64_t count = s.cumulative.back();
    Sample("_bucket", before + "le=\"+Inf\"", static_cast<double>(count));
    Sample("_sum", labels, s.sum_seconds);
    Sample("_count", labels, static_cast<double>(count));
  }

 private:
  std::vector<MetricFamily>* families_;
  std::vector<MetricSample>* samples_;
  std::string family_;
};

const char* LossCauseCode(LossCause cause) {
  switch (cause) {
    case LossCause::kRefused: return "refused";
    case LossCause::kExpired: return "expired";
    case LossCause::kDeleted: return "deleted";
    case LossCause::kTakenOver: return "taken_over";
    case LossCause::kMaxHold: return "max_hold";
    case LossCause::kBroken: return "broken";
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

Metrics::Group* Metrics::GroupOf(const std::string& name) {
  if (max_groups_ == 0) return nullptr;
  const std::string_view group = std::string_view(name).substr(0, name.find('/'));
  std::lock_guard<std::mutex> lock(groups_mu_);
  for (auto& [key, counters] : groups_) {
    if (key == group) return counters.get();
  }
  if (groups_.size() < max_groups_) {
    groups_.emplace_back(std::string(group), std::make_unique<Group>());
    return groups_.back().second.get();
  }
  if (other_ == nullptr) other_ = std::make_unique<Group>();
  return other_.get();
}

void Metrics::AcquireEnded(int kind, AcquireOutcome outcome, Clock::duration waited, bool handed_over,
                           const std::string& name) {
  Add(acquires_[kind][static_cast<int>(outcome)]);
  const bool waits = outcome == AcquireOutcome::kAcquired || outcome == AcquireOutcome::kNotAcquired;
  if (waits) wait_seconds_.Observe(waited);
  if (handed_over) Add(handovers_);
  if (Group* g = GroupOf(name)) {
    Add(g->acquires[static_cast<int>(outcome)]);
    if (waits) g->wait_seconds.Observe(waited);
  }
}

void Metrics::Released(CallOutcome outcome, Clock::duration held, const std::string& name) {
  Add(releases_[static_cast<int>(outcome)]);
  if (outcome != CallOutcome::kOk) return;
  hold_seconds_.Observe(held);
  if (Group* g = GroupOf(name)) g->hold_seconds.Observe(held);
}

void Metrics::RenewalAnswered(RenewalOutcome outcome, Clock::duration round_trip) {
  Add(renewals_[static_cast<int>(outcome)]);
  if (outcome != RenewalOutcome::kFailed) renewal_seconds_.Observe(round_trip);
}

void Metrics::Lost(LossCause cause, Clock::duration held, const std::string& name) {
  Add(losses_[static_cast<int>(cause)]);
  hold_seconds_.Observe(held);
  if (Group* g = GroupOf(name)) {
    Add(g->losses[static_cast<int>(cause)]);
    g->hold_seconds.Observe(held);
  }
}

void Metrics::Collect(const ClientGauges& gauges, std::vector<MetricFamily>* families,
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
           "Locks lost while held, by cause (deleted: the server no longer had the owner's lock and "
           "nobody held it; taken_over: another owner held it; refused: the server no longer had "
           "the owner's lock, not looked into further; expired: renewals failed until the local "
           "deadline; max_hold: max_hold_ms passed, renewals stopped and the lease ran out; broken: an "
           "operator broke it).");
  for (int o = 0; o < static_cast<int>(LossCause::kCount); ++o) {
    c.Sample("", std::string("cause=\"") + LossCauseCode(static_cast<LossCause>(o)) + "\"",
             static_cast<double>(Load(losses_[o])));
  }
  c.Family("dlock_locks_held", "gauge", "Locks this client holds now.");
  c.Sample("", "", static_cast<double>(gauges.locks_held));
  c.Family("dlock_acquires_waiting", "gauge", "Acquisitions of this client under way now.");
  c.Sample("", "", static_cast<double>(std::max<int64_t>(0, waiting_.load(std::memory_order_relaxed))));
  if (gauges.connections >= 0) {
    c.Family("dlock_connections", "gauge", "Connections to the backend's servers this client has open now.");
    c.Sample("", "", static_cast<double>(gauges.connections));
  }
  c.Histogram("dlock_acquire_wait_seconds",
              "Time from an acquire's start to its end, acquired or not (errors and cancels left out).",
              wait_seconds_);
  c.Histogram("dlock_acquire_attempt_seconds", "Round trip of each acquire attempt.", attempt_seconds_);
  c.Histogram("dlock_hold_seconds", "Time locks were held, from acquired to released or lost.", hold_seconds_);
  c.Histogram("dlock_renewal_seconds", "Round trip of each lease renewal answered by the server.",
              renewal_seconds_);
  if (max_groups_ != 0) CollectGroups(c);
}

void Metrics::CollectGroups(Collector& c) const {
  std::vector<std::pair<std::string, const Group*>> groups;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    for (const auto& [name, counters] : groups_) groups.emplace_back("group=" + LabelValue(name), counters.get());
    if (other_ != nullptr) groups.emplace_back("group=\"other\"", other_.get());
  }
  c.Family("dlock_group_acquires_total", "counter",
           "Acquisitions ended, by group (a lock name up to its first '/') and outcome.");
  for (const auto& [label, g] : groups) {
    for (int o = 0; o < static_cast<int>(AcquireOutcome::kCount); ++o) {
      c.Sample("", label + ",outcome=\"" + kAcquireOutcomes[o] + "\"", static_cast<double>(Load(g->acquires[o])));
    }
  }
  c.Family("dlock_group_losses_total", "counter", "Locks lost while held, by group and cause.");
  for (const auto& [label, g] : groups) {
    for (int o = 0; o < static_cast<int>(LossCause::kCount); ++o) {
      c.Sample("", label + ",cause=\"" + LossCauseCode(static_cast<LossCause>(o)) + "\"",
               static_cast<double>(Load(g->losses[o])));
    }
  }
  c.Family("dlock_group_acquire_wait_seconds", "histogram", "dlock_acquire_wait_seconds, by group.");
  for (const auto& [label, g] : groups) c.HistogramSamples(g->wait_seconds, label);
  c.Family("dlock_group_hold_seconds", "histogram", "dlock_hold_seconds, by group.");
  for (const auto& [label, g] : groups) c.HistogramSamples(g->hold_seconds, label);
}

std::string Metrics::Text(const ClientGauges& gauges) const {
  std::vector<MetricFamily> families;
  std::vector<MetricSample> samples;
  Collect(gauges, &families, &samples);
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
