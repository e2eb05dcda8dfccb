// An observer of a name's leader (dlock_observe): reports who leads, then every change of leader
// or of the leader's value, including "nobody". It reads the name with Backend::InspectAsync
// when it starts, whenever the backend tells of a release or hand-over (at once, where the
// backend notifies), and every poll interval otherwise, which bounds how late a change the
// backend does not announce (an acquisition, an expiry, a new value) is reported.
//
// Never an older state after a newer one: a read showing a term below the highest reported, or
// the term whose end was reported, is stale (a slow read, a Redlock master behind) and dropped.
// States that come and go between two reads are not seen: changes may merge.
#ifndef DLOCK_CORE_OBSERVER_H_
#define DLOCK_CORE_OBSERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"
#include "loop/event_loop.h"

namespace dlock {

class Client;

// How often an observer reads when nothing told it of a change.
constexpr Millis kObservePoll{500};

class Observer : public ReleaseWatcher, public std::enable_shared_from_this<Observer> {
 public:
  // leader: the one exclusive holder, or nullptr when nobody leads. Runs on the loop thread.
  using Report = std::function<void(const HolderInfo* leader)>;
  Observer(Client* client, std::string name, Report report);

  // Loop thread: the first read, and the watch.
  void Start();
  // Any thread, the report's own included: once it returns no report runs (one running on
  // another thread is waited for). The watch and the timer go on the loop thread.
  void Cancel();
  // Loop thread: lets go of the backend and the loop (Cancel's second half; client close).
  void Stop();

  // ReleaseWatcher: called on the loop thread under the backend's locks, so they only post.
  void OnWatchReady(bool live) override;
  void OnReleased() override;
  bool hears_every_change() const override { return true; }

 private:
  void ReadSoon();
  void Read();
  void Answered(const Status& status, const LockInfo& info);
  // Whether a read showing `leader` (nullptr: none) is news to report, and remembers it if so.
  bool News(const HolderInfo* leader);

  Client* const client_;
  const std::string name_;
  const Report report_;
  std::recursive_mutex report_mu_;  // held while report_ runs
  std::atomic<bool> cancelled_{false};

  // Loop thread.
  std::unique_ptr<Timer> poll_;
  bool watching_ = false;
  bool stopped_ = false;
  bool reading_ = false;
  bool read_again_ = false;
  // What was reported last.
  bool reported_ = false;
  bool leading_ = false;
  uint64_t term_ = 0;  // the highest term reported
  std::string owner_, value_, hold_id_;
};

}  // namespace dlock

#endif  // DLOCK_CORE_OBSERVER_H_
