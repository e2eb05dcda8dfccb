// The watchers of one watched name (a Redis channel, an etcd key), kept the same way by every
// backend's watch machinery: who listens, what to tell them, and since when nobody does (a
// sweep then drops the watch). Not thread-safe: its owner's lock guards it.
#ifndef DLOCK_CORE_WATCHERS_H_
#define DLOCK_CORE_WATCHERS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"

namespace dlock {

class Watchers {
 public:
  // Adds w, telling it at once when the watch is live already.
  void Add(ReleaseWatcher* w, bool live) {
    list_.push_back(w);
    if (live) w->OnWatchReady(true);
  }
  // Removes w; when it was the last, from now on the watch is idle.
  void Remove(ReleaseWatcher* w) {
    list_.erase(std::remove(list_.begin(), list_.end(), w), list_.end());
    if (list_.empty()) idle_since_ = Now();
  }
  bool empty() const { return list_.empty(); }
  // Nobody has listened for at least `linger`.
  bool IdleFor(TimePoint now, Millis linger) const {
    return list_.empty() && now - idle_since_ >= linger;
  }

  void TellLive() const {
    for (ReleaseWatcher* w : list_) w->OnWatchReady(true);
  }
  void TellReleased() const {
    for (ReleaseWatcher* w : list_) w->OnReleased();
  }
  // The watch failed or ended: no longer live (when it was), and a release may have gone
  // unseen, so every watcher tries again now.
  void TellLost(bool was_live = true) const {
    for (ReleaseWatcher* w : list_) {
      if (was_live) w->OnWatchReady(false);
      w->OnReleased();
    }
  }
  // Each watcher in turn, for a backend that tells them apart itself (etcd's lock recipe wakes
  // only the waiter right behind a deleted key).
  void TellEach(const std::function<void(ReleaseWatcher&)>& tell) const {
    for (ReleaseWatcher* w : list_) tell(*w);
  }
  // A release that handed the lock to one waiter: only that one hears of it.
  // The holder's value changed: observers look again, waiters sleep on.
  void TellChanged() const {
    for (ReleaseWatcher* w : list_) {
      if (w->hears_every_change()) w->OnReleased();
    }
  }
  void TellReleaseRequested(const std::string& id, const std::string& reason) const {
    for (ReleaseWatcher* w : list_) w->OnReleaseRequested(id, reason);
  }
  void TellHandedOver(std::string_view waiter_id, uint64_t fencing_token) const {
    for (ReleaseWatcher* w : list_) {
      if (w->waiter_id() == waiter_id) {
        w->OnHandedOver(fencing_token);
      } else if (w->hears_every_change()) {
        w->OnReleased();  // an observer: the holder changed
      }
    }
  }

 private:
  std::vector<ReleaseWatcher*> list_;
  TimePoint idle_since_{};
};

}  // namespace dlock

#endif  // DLOCK_CORE_WATCHERS_H_
