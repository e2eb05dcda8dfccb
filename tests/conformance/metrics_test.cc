// Metrics and loss causes on every backend (dlock_client_metrics_text, dlock_client_metrics,
// dlock_lock_lost_cause): each counter moves by exactly what a scripted scenario did (an
// uncontended cycle, a wait that runs out, a contended wait of a known length, a loss made by
// deleting the key, renewals failing while the server is paused), the histograms count each
// event once with its time, and the text form says what the samples say.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "conformance/conformance.h"
#include "support/child_process.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Samples = std::map<std::string, double>;  // "name{labels}" -> value

std::string Key(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

Samples Read(dlock_client* c) {
  Samples out;
  dlock_metrics* m = nullptr;
  EXPECT_EQ(dlock_client_metrics(c, &m), DLOCK_OK) << dlock_last_error();
  for (size_t k = 0; k < dlock_metrics_count(m); ++k) {
    out[Key(dlock_metrics_name(m, k), dlock_metrics_labels(m, k))] = dlock_metrics_value(m, k);
  }
  dlock_metrics_free(m);
  return out;
}

// The text form, parsed back: every sample line "key value".
Samples ReadText(dlock_client* c) {
  size_t needed = 0;
  EXPECT_EQ(dlock_client_metrics_text(c, nullptr, 0, &needed), DLOCK_OK) << dlock_last_error();
  std::string buf(needed + 64, '\0');  // room for what may be counted meanwhile
  EXPECT_EQ(dlock_client_metrics_text(c, buf.data(), buf.size(), &needed), DLOCK_OK) << dlock_last_error();
  buf.resize(needed);
  Samples out;
  std::istringstream lines(buf);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return out;
}

// What moved between two reads, left out: histogram buckets and sums (their _count says how
// many events; the times are checked on their own).
Samples Moved(const Samples& before, const Samples& after) {
  Samples moved;
  for (const auto& [key, value] : after) {
    if (key.find("_bucket{") != std::string::npos || key.find("_sum") != std::string::npos) continue;
    // Connections open as pools and reconnects need, not per call (connections_test.cc).
    if (key == "dlock_connections") continue;
    auto it = before.find(key);
    const double was = it == before.end() ? 0 : it->second;
    if (value != was) moved[key] = value - was;
  }
  return moved;
}

std::string Show(const Samples& s) {
  std::string out;
  for (const auto& [key, value] : s) out += key + " " + std::to_string(value) + "\n";
  return out;
}

double Get(const Samples& s, const std::string& key) {
  auto it = s.find(key);
  EXPECT_NE(it, s.end()) << "no sample " << key;
  return it == s.end() ? -1 : it->second;
}

class Metrics : public StyleTest {};

TEST_P(Metrics, EachCounterMovesByWhatTheCallsDid) {
  auto c = Open();
  const std::string name = Name("metrics");
  const Samples fresh = Read(c->get());
  EXPECT_EQ(Get(fresh, "dlock_acquires_total{kind=\"exclusive\",outcome=\"acquired\"}"), 0);
  // Both reads, but for the connections gauge: a fresh client may still be opening its
  // connections (Sentinel: the master found, the subscriber) between them.
  Samples fresh_text = ReadText(c->get()), fresh_samples = fresh;
  fresh_text.erase("dlock_connections");
  fresh_samples.erase("dlock_connections");
  EXPECT_EQ(fresh_samples, fresh_text) << "the text says something else than the samples";

  // An uncontended cycle: one attempt, one acquisition, one release, one hold.
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), nullptr, &l), DLOCK_OK) << c->last_error();
  EXPECT_EQ(dlock_lock_lost_cause(l), nullptr);
  const Samples holding = Read(c->get());
  EXPECT_EQ(Moved(fresh, holding),
            (Samples{{"dlock_acquire_attempts_total{kind=\"exclusive\"}", 1},
                     {"dlock_acquires_total{kind=\"exclusive\",outcome=\"acquired\"}", 1},
                     {"dlock_locks_held", 1},
                     {"dlock_acquire_wait_seconds_count", 1},
                     {"dlock_acquire_attempt_seconds_count", 1}}))
      << Show(holding);
  ASSERT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  const Samples released = Read(c->get());
  EXPECT_EQ(Moved(holding, released), (Samples{{"dlock_releases_total{outcome=\"ok\"}", 1},
                                               {"dlock_locks_held", -1},
                                               {"dlock_hold_seconds_count", 1}}))
      << Show(released);

  // A wait that runs out: not_acquired, and its wait counted with its length.
  {
    HeldElsewhere other(url(), name);
    Options o;
    o.wait(200).retry(20, 50);
    const auto start = Clock::now();
    ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_NOT_ACQUIRED);
    const double took = MsSince(start) / 1000.0;
    const Samples refused = Read(c->get());
    const Samples moved = Moved(released, refused);
    EXPECT_EQ(moved.count("dlock_acquires_total{kind=\"exclusive\",outcome=\"not_acquired\"}"), 1u) << Show(moved);
    EXPECT_EQ(moved.at("dlock_acquire_wait_seconds_count"), 1) << Show(moved);
    EXPECT_GE(moved.at("dlock_acquire_attempts_total{kind=\"exclusive\"}"), 2) << Show(moved);
    EXPECT_EQ(moved.count("dlock_locks_held"), 0u) << Show(moved);
    const double waited = Get(refused, "dlock_acquire_wait_seconds_sum") - Get(released, "dlock_acquire_wait_seconds_sum");
    EXPECT_GE(waited, 0.2);
    EXPECT_LE(waited, took + 0.001);
  }
}

// A waiter that the holder's release serves: counted as waiting while it waits, then acquired,
// its wait at least as long as the holder made it wait.
TEST_P(Metrics, AContendedWaitIsCountedWithItsLength) {
  auto c = Open();
  const std::string name = Name("metrics-wait");
  HeldElsewhere other(url(), name);
  const Samples before = Read(c->get());
  std::thread holder([&] {
    ASSERT_TRUE(WaitFor([&] { return Get(Read(c->get()), "dlock_acquires_waiting") == 1; }, 20s))
        << "the waiter was never counted as waiting";
    std::this_thread::sleep_for(300ms);
    other.Release();
  });
  Options o;
  o.wait(-1).retry(20000, 30000);  // served by the release, where the backend notifies
  if ((dlock_client_capabilities(c->get()) & DLOCK_CAP_NOTIFIES) == 0) o.retry(20, 50);
  dlock_lock* l = nullptr;
  const auto start = Clock::now();
  const dlock_status s = c->Acquire(name.c_str(), o.get(), &l);
  const double took = MsSince(start) / 1000.0;
  holder.join();
  ASSERT_EQ(s, DLOCK_OK) << c->last_error();
  const Samples after = Read(c->get());
  const Samples moved = Moved(before, after);
  EXPECT_EQ(moved.at("dlock_acquires_total{kind=\"exclusive\",outcome=\"acquired\"}"), 1) << Show(moved);
  EXPECT_EQ(moved.count("dlock_acquires_waiting"), 0u) << Show(moved);
  EXPECT_EQ(Get(after, "dlock_acquires_waiting"), 0);
  const double waited = Get(after, "dlock_acquire_wait_seconds_sum") - Get(before, "dlock_acquire_wait_seconds_sum");
  EXPECT_GE(waited, 0.3);
  EXPECT_LE(waited, took + 0.001);
  // Where the backend hands the lock over (fair waiting), the hand-over says so.
  if (moved.count("dlock_handovers_total") != 0) {
    EXPECT_EQ(moved.at("dlock_handovers_total"), 1) << Show(moved);
  }
  EXPECT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
}

// A lock whose key was deleted is lost, deleted: the heartbeat's renewal is refused, a look at
// the name finds nobody, the loss is counted by its cause, dlock_lock_lost_cause says it, and
// the release is not_held.
TEST_P(Metrics, ALossIsCountedAndToldWithItsCause) {
  auto c = Open();
  const std::string name = Name("metrics-loss");
  Options o;
  o.lease(3000).heartbeat(300);
  c->ReportLosses(o.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
  const Samples before = Read(c->get());
  ASSERT_TRUE(server().DeleteLock(name));
  ASSERT_EQ(c->AwaitLoss(10s).count, 1) << "the deletion was never noticed";
  const char* cause = dlock_lock_lost_cause(l);
  ASSERT_NE(cause, nullptr);
  EXPECT_EQ(std::string(cause).rfind("deleted: ", 0), 0u) << cause;
  const Samples after = Read(c->get());
  const Samples moved = Moved(before, after);
  EXPECT_EQ(moved.at("dlock_losses_total{cause=\"deleted\"}"), 1) << Show(moved);
  EXPECT_GE(moved.at("dlock_renewals_total{outcome=\"refused\"}"), 1) << Show(moved);
  EXPECT_EQ(moved.at("dlock_locks_held"), -1) << Show(moved);
  EXPECT_EQ(moved.at("dlock_hold_seconds_count"), 1) << Show(moved);
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
  EXPECT_EQ(Moved(after, Read(c->get())).at("dlock_releases_total{outcome=\"not_held\"}"), 1);
}

// A lock deleted and then taken by another owner is lost, taken_over: its holder's own extend
// or release finds out, and its NOT_HELD message says so too.
TEST_P(Metrics, ALockTakenOverIsLostTakenOver) {
  auto c = Open();
  Client other(url());
  for (const bool by_release : {false, true}) {
    SCOPED_TRACE(by_release ? "found by the release" : "found by an extend");
    const std::string name = Name(by_release ? "takeover-release" : "takeover-extend");
    Options o;
    o.lease(20000).heartbeat(0);  // nothing renews it: the call below is what finds out
    dlock_lock* l = nullptr;
    ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
    const Samples before = Read(c->get());
    ASSERT_TRUE(server().DeleteLock(name));
    Hold taker(other.get(), name, Options().get());
    ASSERT_EQ(taker.status(), DLOCK_OK) << taker.error();
    EXPECT_EQ(dlock_lock_is_valid(l), 1);
    EXPECT_EQ(by_release ? c->Release(l) : c->Extend(l, 20000), DLOCK_NOT_HELD);
    EXPECT_NE(c->last_error().find("taken_over: "), std::string::npos) << c->last_error();
    EXPECT_NE(c->last_error().find("(fencing token " + (Shown(taker.token()) != 0 ? std::to_string(taker.token()) : "unknown")),
              std::string::npos)
        << "the message does not name the new holder's token: " << c->last_error();
    const Samples moved = Moved(before, Read(c->get()));
    EXPECT_EQ(moved.at("dlock_losses_total{cause=\"taken_over\"}"), 1) << Show(moved);
    if (!by_release) {
      EXPECT_EQ(dlock_lock_is_valid(l), 0);
      EXPECT_EQ(dlock_lock_remaining_ms(l), 0);
      const char* cause = dlock_lock_lost_cause(l);
      ASSERT_NE(cause, nullptr);
      EXPECT_EQ(std::string(cause).rfind("taken_over: ", 0), 0u) << cause;
      EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
    }
  }
}

// The same found by a heartbeat: on_lost is told taken_over.
TEST_P(Metrics, ATakeoverFoundByAHeartbeatIsReportedTakenOver) {
  auto c = Open();
  Client other(url());
  const std::string name = Name("takeover-heartbeat");
  Options o;
  o.lease(20000).heartbeat(500);
  c->ReportLosses(o.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
  ASSERT_TRUE(server().DeleteLock(name));
  Hold taker(other.get(), name, Options().get());
  ASSERT_EQ(taker.status(), DLOCK_OK) << taker.error();
  ASSERT_EQ(c->AwaitLoss(10s).count, 1) << "the takeover was never noticed";
  const char* cause = dlock_lock_lost_cause(l);
  ASSERT_NE(cause, nullptr);
  EXPECT_EQ(std::string(cause).rfind("taken_over: ", 0), 0u) << cause;
  EXPECT_NE(std::string(cause).find("(fencing token " +
                                    (Shown(taker.token()) != 0 ? std::to_string(taker.token()) : "unknown")),
            std::string::npos)
      << cause;
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
}

// What an event hook was told, in order.
class Events {
 public:
  struct Seen {
    std::string type, name, detail;
    uint32_t attempts;
    int64_t elapsed_ms;
    uint64_t token;
    dlock_status status;
  };
  static void Fn(const dlock_event* e, void* arg) {
    auto* self = static_cast<Events*>(arg);
    Seen seen{dlock_event_type_name(dlock_event_type_of(e)), dlock_event_lock_name(e), dlock_event_detail(e),
              dlock_event_attempts(e), dlock_event_elapsed_ms(e), dlock_event_fencing_token(e),
              dlock_event_status(e)};
    std::lock_guard<std::mutex> lock(self->mu_);
    self->seen_.push_back(seen);
  }
  // The events so far, of lock `name`, and forgets them.
  std::vector<Seen> Take(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Seen> out;
    for (const Seen& s : seen_) {
      if (s.name == name) out.push_back(s);
    }
    seen_.clear();
    return out;
  }
  static std::string Types(const std::vector<Seen>& all) {
    std::string out;
    for (const Seen& s : all) out += (out.empty() ? "" : " ") + s.type;
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<Seen> seen_;
};

// The event hook is told each step with what a log line or a trace span needs.
TEST_P(Metrics, TheEventHookIsToldEachStep) {
  auto c = Open();
  Events events;
  ASSERT_EQ(dlock_client_set_event_hook(c->get(), Events::Fn, &events), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_client_set_event_hook(c->get(), Events::Fn, &events), DLOCK_EINVAL) << "a second hook";
  const std::string name = Name("events");
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), nullptr, &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  ASSERT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  std::vector<Events::Seen> seen = events.Take(name);
  ASSERT_EQ(Events::Types(seen), "acquiring acquired released");
  EXPECT_EQ(seen[1].attempts, 1u);
  EXPECT_EQ(seen[1].token, token);
  EXPECT_EQ(seen[1].status, DLOCK_OK);
  EXPECT_EQ(seen[2].token, token);
  EXPECT_EQ(seen[2].status, DLOCK_OK);
  EXPECT_GE(seen[2].elapsed_ms, 0);

  {
    HeldElsewhere other(url(), name);
    Options o;
    o.wait(100).retry(20, 40);
    ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_NOT_ACQUIRED);
    seen = events.Take(name);
    ASSERT_EQ(Events::Types(seen), "acquiring not_acquired");
    EXPECT_EQ(seen[1].status, DLOCK_NOT_ACQUIRED);
    EXPECT_GE(seen[1].attempts, 2u);
    EXPECT_GE(seen[1].elapsed_ms, 100);
  }

  Options o;
  o.lease(3000).heartbeat(300);
  c->ReportLosses(o.mutable_get());
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
  ASSERT_TRUE(server().DeleteLock(name));
  ASSERT_EQ(c->AwaitLoss(10s).count, 1) << "the deletion was never noticed";
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
  seen = events.Take(name);
  ASSERT_EQ(Events::Types(seen), "acquiring acquired lost released");
  EXPECT_EQ(seen[2].detail.rfind("deleted: ", 0), 0u) << seen[2].detail;
  EXPECT_EQ(seen[2].token, seen[1].token);
  EXPECT_EQ(seen[3].status, DLOCK_NOT_HELD);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Metrics,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

// url with one more query parameter.
std::string WithParam(const std::string& url, const std::string& param) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + param;
}

class BackendMetrics : public BackendTest {};

// While the server holds its answers back, renewals time out (failed) until the local deadline
// passes: the lock is lost, expired, and the cause names the last error.
TEST_P(BackendMetrics, RenewalsFailingUntilTheDeadlineAreCountedAndTheLossIsExpired) {
  Client c(WithParam(url(), "timeout_ms=250"));
  Events events;
  ASSERT_EQ(dlock_client_set_event_hook(c.get(), Events::Fn, &events), DLOCK_OK) << dlock_last_error();
  const std::string name = Name("metrics-paused");
  Options o;
  o.lease(2000).heartbeat(400);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const Samples before = Read(c.get());
  ASSERT_TRUE(server().HoldAnswers());
  const bool lost = WaitFor([&] { return dlock_lock_is_valid(l) == 0 && dlock_lock_lost_cause(l) != nullptr &&
                                         Get(Read(c.get()), "dlock_losses_total{cause=\"expired\"}") == 1; },
                            15s);
  server().ReleaseAnswers();
  ASSERT_TRUE(lost) << "the lock was not lost while the server held its answers";
  const std::string cause = dlock_lock_lost_cause(l);
  EXPECT_EQ(cause.rfind("expired: ", 0), 0u) << cause;
  const Samples moved = Moved(before, Read(c.get()));
  EXPECT_GE(moved.at("dlock_renewals_total{outcome=\"failed\"}"), 1) << Show(moved);
  EXPECT_GE(moved.at("dlock_renewals_sent_total"), moved.at("dlock_renewals_total{outcome=\"failed\"}")) << Show(moved);
  EXPECT_EQ(moved.count("dlock_losses_total{cause=\"refused\"}"), 0u) << Show(moved);
  (void)dlock_release(l);
  // The hook heard each failed renewal, with its error, then the loss.
  const std::vector<Events::Seen> seen = events.Take(name);
  const std::string types = Events::Types(seen);
  EXPECT_EQ(types.rfind("acquiring acquired renewal_failed", 0), 0u) << types;
  EXPECT_NE(types.find("renewal_failed lost"), std::string::npos) << types;
  for (const Events::Seen& e : seen) {
    if (e.type == "renewal_failed") {
      EXPECT_FALSE(e.detail.empty());
    }
    if (e.type == "lost") {
      EXPECT_EQ(e.detail.rfind("expired: ", 0), 0u) << e.detail;
    }
  }
}

// The text passes Prometheus' own check (promtool check metrics: the format, and its lint:
// HELP on every family, _total on counters, base units), after every kind of event.
// With metrics_groups=3, the groups of lock names (up to the first '/') seen first get series of
// their own (a quote in one escaped), the rest share group="other".
TEST_P(BackendMetrics, TheTextPassesPromtoolsCheck) {
  Client c(WithParam(url(), "metrics_groups=3"));
  std::string name = Name("metrics-promtool");
  std::replace(name.begin(), name.end(), '/', '-');  // one group: the whole name
  {
    Hold held(c.get(), name, nullptr);
    ASSERT_TRUE(held.held()) << held.error();
    EXPECT_EQ(TryToTake(c.get(), name, 50).status, DLOCK_NOT_ACQUIRED);
  }
  const std::string billing = "billing-" + name, quoted = "a \"quoted\" group";
  for (const std::string& n : {billing + "/a", billing + "/b", quoted + "/c", std::string("misc-") + name}) {
    Hold held(c.get(), n, nullptr);
    ASSERT_TRUE(held.held()) << held.error();
  }
  const Samples groups = Read(c.get());
  EXPECT_EQ(Get(groups, "dlock_group_acquires_total{group=\"" + name + "\",outcome=\"acquired\"}"), 1);
  EXPECT_EQ(Get(groups, "dlock_group_acquires_total{group=\"" + name + "\",outcome=\"not_acquired\"}"), 1);
  EXPECT_EQ(Get(groups, "dlock_group_acquires_total{group=\"" + billing + "\",outcome=\"acquired\"}"), 2);
  EXPECT_EQ(Get(groups, "dlock_group_acquires_total{group=\"other\",outcome=\"acquired\"}"), 1) << Show(groups);
  EXPECT_EQ(Get(groups, "dlock_group_hold_seconds_count{group=\"" + billing + "\"}"), 2);
  EXPECT_EQ(Get(groups, "dlock_group_acquires_total{group=\"a \\\"quoted\\\" group\",outcome=\"acquired\"}"), 1)
      << Show(groups);
  size_t needed = 0;
  ASSERT_EQ(dlock_client_metrics_text(c.get(), nullptr, 0, &needed), DLOCK_OK) << dlock_last_error();
  std::string text(needed + 256, '\0');
  ASSERT_EQ(dlock_client_metrics_text(c.get(), text.data(), text.size(), &needed), DLOCK_OK) << dlock_last_error();
  text.resize(needed);
  // Too small a buffer: refused, with nothing half-written.
  char small[16] = "unchanged";
  EXPECT_EQ(dlock_client_metrics_text(c.get(), small, sizeof small, &needed), DLOCK_EINVAL);
  EXPECT_STREQ(small, "");
  EXPECT_NE(std::string(dlock_last_error()).find("bytes"), std::string::npos) << dlock_last_error();

  std::string why;
  const std::string dir = MakeTempDir("promtool", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string in = dir + "/metrics.txt", out = dir + "/promtool.out";
  {
    std::ofstream f(in);
    f << text;
  }
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << "promtool check metrics: " << ReadTail(out, 4096) << "\non:\n" << text;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Conformance, BackendMetrics, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
