#include "redis/topology/watch_router.h"

#include <algorithm>

namespace dlock::redis {

void WatchRouter::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  NodeChannel* node = node_for_(channel);
  std::lock_guard<std::mutex> lock(mu_);
  Watched& w = watched_[channel];
  if (w.watchers.empty()) w.node = node;
  w.watchers.push_back(watcher);
  if (w.node != nullptr) w.node->Watch(channel, watcher);
}

void WatchRouter::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(channel);
  if (it == watched_.end()) return;
  Watched& w = it->second;
  auto pos = std::find(w.watchers.begin(), w.watchers.end(), watcher);
  if (pos == w.watchers.end()) return;
  w.watchers.erase(pos);
  if (w.node != nullptr) w.node->Unwatch(channel, watcher);
  if (w.watchers.empty()) watched_.erase(it);
}

void WatchRouter::Reroute() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [channel, w] : watched_) {
    NodeChannel* now = node_for_(channel);
    if (now == w.node || now == nullptr) continue;
    for (ReleaseWatcher* watcher : w.watchers) {
      if (w.node != nullptr) w.node->Unwatch(channel, watcher);
      now->Watch(channel, watcher);
      watcher->OnReleased();  // look again: a release may have gone by unheard
    }
    w.node = now;
  }
}

}  // namespace dlock::redis
