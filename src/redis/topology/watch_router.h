// Which node each watched release channel is subscribed on, for channels whose node can change
// (a cluster slot that moved, a master replaced by Sentinel). Watchers follow: Reroute moves
// every channel whose node changed and wakes its waiters (a release may have gone by unheard
// while it moved). Thread-safe; the waiters' calls come under its mutex, as with Subscriber.
#ifndef DLOCK_REDIS_TOPOLOGY_WATCH_ROUTER_H_
#define DLOCK_REDIS_TOPOLOGY_WATCH_ROUTER_H_

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "redis/topology/node_channel.h"

namespace dlock::redis {

class WatchRouter {
 public:
  // Where channel should be watched now; null when no node is known (waiters then poll).
  using NodeFor = std::function<NodeChannel*(const std::string& channel)>;

  explicit WatchRouter(NodeFor node_for) : node_for_(std::move(node_for)) {}

  void Watch(const std::string& channel, ReleaseWatcher* watcher);
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher);
  // After the topology changed: channels whose node differs now move there.
  void Reroute();

 private:
  struct Watched {
    NodeChannel* node = nullptr;
    std::vector<ReleaseWatcher*> watchers;
  };
  NodeFor node_for_;
  std::mutex mu_;
  std::unordered_map<std::string, Watched> watched_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_WATCH_ROUTER_H_
