// A client's metrics (dlock_client_metrics_text): counters, histograms and gauges of what its
// acquisitions, releases, extends, renewals and losses did, cheap enough to stay on always:
// each event is one relaxed atomic add (two or three for a histogram), no lock, no allocation.
// No lock name is ever a label (names are unbounded); labels are bounded sets: the lock kind,
// an outcome, a loss cause.
#ifndef DLOCK_CORE_METRICS_H_
#define DLOCK_CORE_METRICS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/options.h"

namespace dlock {

// Why a lock was lost: the stable code that starts dlock_lock_lost_cause and labels the loss
// counter. (The jobs issue adds broken.)
enum class LossCause : int {
  kRefused = 0,    // the server refused this owner, and why is not known (a release, a set_value,
                   // or a renewal whose second look failed)
  kExpired = 1,    // renewals failed until the local deadline passed
  kDeleted = 2,    // a renewal or extend was refused, and nobody held the name then
  kTakenOver = 3,  // a renewal or extend was refused, and another owner held the name then
  kMaxHold = 4,    // max_hold_ms passed: renewals stopped and the lease ran out
  kBroken = 5,     // an operator broke it (dlock_break)
  kCount
};
const char* LossCauseCode(LossCause cause);

// Seconds, with buckets from 0.5 ms to 60 s: lock latencies on a LAN up to long waits.
class Histogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1,     2.5,
                                                     5,      10,    30,     60};
  void Observe(Clock::duration elapsed);
  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> cumulative{};  // the last one is +Inf: the count
    double sum_seconds = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};  // per bucket, not cumulative
  std::atomic<uint64_t> sum_ns_{0};
};

// What the event hook (dlock_client_set_event_hook) is told; valid during the call.
struct Event {
  enum class Type : int { kAcquiring = 0, kAcquired, kNotAcquired, kReleased, kRenewalFailed, kLost };
  Event(Type type_in, const std::string& name_in) : type(type_in), name(name_in) {}
  Type type;
  const std::string& name;
  uint32_t attempts = 0;
  int64_t elapsed_ms = 0;  // waited (acquire events), held (released, lost), round trip (renewal)
  uint64_t fencing_token = 0;
  int status = 0;          // a dlock_status
  std::string detail;      // the error, or the loss cause ("refused: ...")
};
using EventHook = std::function<void(const Event&)>;

enum class AcquireOutcome : int { kAcquired = 0, kNotAcquired, kError, kCancelled, kCount };
enum class CallOutcome : int { kOk = 0, kNotHeld, kError, kCount };
enum class RenewalOutcome : int { kSucceeded = 0, kFailed, kRefused, kCount };

class Collector;  // metrics.cc

// One sample of the Prometheus text: name (with _total, _bucket, _sum, _count), its labels as
// the text writes them (`kind="shared",outcome="acquired"`; "" for none) and its value.
struct MetricSample {
  std::string family;  // the family it belongs to (HELP and TYPE are the family's)
  std::string name;
  std::string labels;
  double value = 0;
};
struct MetricFamily {
  std::string name, type, help;
};

// The gauges read from the client at each scrape rather than counted here.
struct ClientGauges {
  uint64_t locks_held = 0;
  int64_t connections = -1;  // Backend::OpenConnections; -1 = not counted: the family is left out
};

class Metrics {
 public:
  static constexpr int kKinds = 3;  // exclusive, shared, semaphore

  // Index of a request's kind in the per-kind arrays.
  static int KindIndex(LockKind kind, uint32_t permits);

  void AttemptSent(int kind) { Add(attempts_[kind]); }
  void AttemptAnswered(Clock::duration round_trip) { attempt_seconds_.Observe(round_trip); }
  // An acquisition ended: its outcome, how long it waited (start to end) and whether a fair
  // hand-over gave it the lock.
  void AcquireEnded(int kind, AcquireOutcome outcome, Clock::duration waited, bool handed_over,
                    const std::string& name);
  void Released(CallOutcome outcome, Clock::duration held, const std::string& name);
  void Extended(CallOutcome outcome) { Add(extends_[static_cast<int>(outcome)]); }
  void RenewalSent() { Add(renewals_sent_); }
  void RenewalAnswered(RenewalOutcome outcome, Clock::duration round_trip);
  void Lost(LossCause cause, Clock::duration held, const std::string& name);

  // Per-group families (URL parameter metrics_groups=N): a lock's group is its name up to its
  // first '/' (the whole name without one); the first max_groups groups seen get their own
  // series, later ones share group="other". Call before any lock is taken; 0 = off.
  void EnableGroups(uint32_t max_groups) { max_groups_ = max_groups; }
  static constexpr uint32_t kMaxGroupsLimit = 1000;
  void WaiterStarted() { waiting_.fetch_add(1, std::memory_order_relaxed); }
  void WaiterEnded() { waiting_.fetch_sub(1, std::memory_order_relaxed); }

  // The event hook: set once (false when one is set already); any thread.
  bool SetHook(EventHook hook);
  // Calls the hook, if any, with what make() returns (built only when a hook is set).
  template <typename Make>
  void Emit(Make&& make) const {
    const EventHook* hook = hook_.load(std::memory_order_acquire);
    if (hook != nullptr) (*hook)(make());
  }

  // Every sample, families in a fixed order; gauges: what the client reads now.
  void Collect(const ClientGauges& gauges, std::vector<MetricFamily>* families,
               std::vector<MetricSample>* samples) const;
  // The Prometheus text exposition format (0.0.4) of Collect's samples.
  std::string Text(const ClientGauges& gauges) const;

 private:
  static void Add(std::atomic<uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }
  void CollectGroups(Collector& c) const;

  std::array<std::atomic<uint64_t>, kKinds> attempts_{};
  std::array<std::array<std::atomic<uint64_t>, static_cast<int>(AcquireOutcome::kCount)>, kKinds> acquires_{};
  std::array<std::atomic<uint64_t>, static_cast<int>(CallOutcome::kCount)> releases_{};
  std::array<std::atomic<uint64_t>, static_cast<int>(CallOutcome::kCount)> extends_{};
  std::atomic<uint64_t> renewals_sent_{0};
  std::array<std::atomic<uint64_t>, static_cast<int>(RenewalOutcome::kCount)> renewals_{};
  std::array<std::atomic<uint64_t>, static_cast<int>(LossCause::kCount)> losses_{};
  std::atomic<uint64_t> handovers_{0};
  std::atomic<int64_t> waiting_{0};
  Histogram wait_seconds_, attempt_seconds_, hold_seconds_, renewal_seconds_;

  struct Group {
    std::array<std::atomic<uint64_t>, static_cast<int>(AcquireOutcome::kCount)> acquires{};
    std::array<std::atomic<uint64_t>, static_cast<int>(LossCause::kCount)> losses{};
    Histogram wait_seconds, hold_seconds;
  };
  // name's group's counters; nullptr when groups are off.
  Group* GroupOf(const std::string& name);
  uint32_t max_groups_ = 0;
  mutable std::mutex groups_mu_;
  std::vector<std::pair<std::string, std::unique_ptr<Group>>> groups_;  // in order seen; under groups_mu_
  std::unique_ptr<Group> other_;  // under groups_mu_
  std::mutex hook_mu_;
  std::unique_ptr<EventHook> hook_owner_;  // under hook_mu_; never replaced once set
  std::atomic<const EventHook*> hook_{nullptr};
};

inline int64_t ElapsedMs(Clock::duration d) { return std::chrono::duration_cast<Millis>(d).count(); }

}  // namespace dlock

#endif  // DLOCK_CORE_METRICS_H_
