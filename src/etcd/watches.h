// Release notifications for waiters: per lock name with waiters, one etcd watch of the
// deletions (a DELETE event: released, expired or revoked) of the name's key K and of every key
// under K + NUL (the shared holds, permits and writer announcements of lock_protocol.h: the
// range [K, K + "\x01")), streamed over one HTTP request on the client's loop. The watch starts at the revision after the one etcd is at when it is
// created (no catch-up from an old revision); the waiter's next attempt comes after the watch
// is live (ReleaseWatcher::OnWatchReady), so no release between the two is missed.
// A stream that ends (the endpoint died, the watch was cancelled by a compaction) wakes its
// waiters (they try again, and fall back on the holder's TTL) and is made again on the next
// endpoint, after a pause that grows to 1 s. A stream without waiters is kept 5 s for the next
// waiter, then closed.
// Holders that listen for release requests (lock_protocol.h, "Release requests") are watchers
// of the other flavor: one watch of the PUT events of one key (the name's request key), each
// put handed to a PutHandler. It too starts from now; one whose stream failed resumes after the
// last revision it saw (a put meanwhile still arrives), unless a watcher joined while it was
// down (which must hear no put older than itself: then from now), or etcd compacted that far.
#ifndef DLOCK_ETCD_WATCHES_H_
#define DLOCK_ETCD_WATCHES_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/watchers.h"
#include "etcd/etcd_config.h"
#include "etcd/gateway.h"
#include "http/async_client.h"
#include "loop/event_loop.h"

namespace dlock::etcd {

class Watches {
 public:
  Watches(const EtcdConfig* config, EventLoop* loop, http::AsyncClient* http);
  ~Watches();
  // Any thread (ReleaseWatcher's rules: called back under our lock, on the loop thread or
  // inside Watch).
  void Watch(const std::string& key, ReleaseWatcher* watcher);
  void Unwatch(const std::string& key, ReleaseWatcher* watcher);
  // The same for the deletions of every key that starts with prefix (etcd's lock recipe:
  // lock_protocol.h, "layout=mutex").
  // on_deletes is told the keys deleted, and tells the watchers it concerns (called as
  // PutHandler is).
  using DeletesHandler = std::function<void(const Watchers& watchers, const std::vector<std::string>& deleted)>;
  void WatchPrefix(const std::string& prefix, ReleaseWatcher* watcher, DeletesHandler on_deletes);
  void UnwatchPrefix(const std::string& prefix, ReleaseWatcher* watcher);
  // The other flavor: the puts of key, each told to the watchers through on_put (called on the
  // loop thread under our lock, as the ReleaseWatcher calls are). A key is watched in one
  // flavor by everyone (the backend's keys of each flavor never meet).
  using PutHandler = void (*)(const Watchers& watchers, const KeyValue& put);
  void WatchPuts(const std::string& key, ReleaseWatcher* watcher, PutHandler on_put);
  void UnwatchPuts(const std::string& key, ReleaseWatcher* watcher);
  // Loop thread: ends every stream; nothing starts again.
  void Shutdown();

 private:
  struct Entry {
    Watchers watchers;
    PutHandler on_put = nullptr;  // null: a watch of deletions in [key, key + "\x01")
    DeletesHandler on_deletes;    // a watch of deletions under a prefix: who hears of them
    http::AsyncClient::StreamId stream = 0;  // 0: none
    bool live = false;
    bool starting = false;  // a start is posted or its pause is running
    std::string partial;    // the stream's last line, not yet whole
    Millis pause{0};        // before the next start after a failure
    std::unique_ptr<Timer> retry;  // runs that start
    // A watch of puts: the last revision its stream is known to have delivered (0: none, the
    // next start is from now), and whether a watcher joined while it was not live.
    int64_t seen_revision = 0;
    bool joined_while_down = false;
    bool resuming = false;  // the stream in flight started after seen_revision
  };
  void Add(const std::string& id, ReleaseWatcher* watcher, PutHandler on_put, DeletesHandler on_deletes = nullptr);
  void Remove(const std::string& id, ReleaseWatcher* watcher);
  // Entries are by id: the flavor ('d' deletes, 'r' deletes under a prefix, 'p' puts), then
  // the key.
  void Start(const std::string& id);                   // loop thread
  void OnChunk(const std::string& id, std::string_view chunk);
  void Ended(const std::string& id, const Status& error);
  void Sweep();

  const EtcdConfig* config_;
  EventLoop* loop_;
  http::AsyncClient* http_;
  Timer sweep_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  size_t next_endpoint_ = 0;  // loop thread
  size_t streams_ = 0;        // loop thread: open streams (the sweep runs while there are some)
  bool shut_down_ = false;
};

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_WATCHES_H_
