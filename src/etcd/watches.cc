#include "etcd/watches.h"

#include <algorithm>

#include "etcd/gateway.h"

namespace dlock::etcd {
namespace {

constexpr Millis kKeepIdle{5000};
constexpr Millis kSweepEvery{1000};
constexpr Millis kFirstPause{100};
constexpr Millis kMaxPause{1000};

}  // namespace

Watches::Watches(const EtcdConfig* config, EventLoop* loop, http::AsyncClient* http)
    : config_(config), loop_(loop), http_(http), sweep_(loop, [this] { Sweep(); }) {}

Watches::~Watches() = default;

void Watches::Watch(const std::string& key, ReleaseWatcher* watcher) { Add('d' + key, watcher, nullptr); }

void Watches::Unwatch(const std::string& key, ReleaseWatcher* watcher) { Remove('d' + key, watcher); }

void Watches::WatchPrefix(const std::string& prefix, ReleaseWatcher* watcher, DeletesHandler on_deletes) {
  Add('r' + prefix, watcher, nullptr, std::move(on_deletes));
}

void Watches::UnwatchPrefix(const std::string& prefix, ReleaseWatcher* watcher) { Remove('r' + prefix, watcher); }

void Watches::WatchPuts(const std::string& key, ReleaseWatcher* watcher, PutHandler on_put) {
  Add('p' + key, watcher, on_put);
}

void Watches::UnwatchPuts(const std::string& key, ReleaseWatcher* watcher) { Remove('p' + key, watcher); }

void Watches::Add(const std::string& id, ReleaseWatcher* watcher, PutHandler on_put, DeletesHandler on_deletes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  Entry& e = entries_[id];
  e.on_put = on_put;
  if (on_deletes) e.on_deletes = std::move(on_deletes);
  e.watchers.Add(watcher, e.live);
  if (!e.live) e.joined_while_down = true;
  if (e.stream == 0 && !e.starting) {
    e.starting = true;
    loop_->Post([this, id] { Start(id); });
  }
}

void Watches::Remove(const std::string& id, ReleaseWatcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.watchers.Remove(watcher);
}

void Watches::Start(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (shut_down_ || it == entries_.end() || it->second.stream != 0) return;
  Entry& e = it->second;
  e.starting = false;
  e.partial.clear();
  const std::string key = id.substr(1);
  std::string body;
  if (e.on_put == nullptr) {
    body = WatchDeletesBody(key, id[0] == 'r' ? PrefixEnd(key) : key + '\x01');
  } else {
    // From now, unless the stream that failed delivered up to seen_revision to the same watchers.
    if (e.joined_while_down) e.seen_revision = 0;
    e.joined_while_down = false;
    e.resuming = e.seen_revision > 0;
    body = WatchPutsBody(key, e.resuming ? e.seen_revision + 1 : 0);
  }
  const size_t endpoint = next_endpoint_ % config_->endpoints.size();
  http::Request request = config_->Post(endpoint, "/v3/watch", std::move(body));
  lock.unlock();  // the stream's callbacks take mu_; none runs inside Stream
  http::AsyncClient::StreamId stream = http_->Stream(
      request, Millis(0), [this, id](long, std::string_view chunk) { OnChunk(id, chunk); },
      [this, id](const Status& error, http::Response) { Ended(id, error); });
  lock.lock();
  it = entries_.find(id);
  if (it == entries_.end() || stream == 0) return;  // a failed start ends through Ended
  it->second.stream = stream;
  ++streams_;
  if (!sweep_.pending()) sweep_.StartAfter(kSweepEvery);
}

void Watches::OnChunk(const std::string& id, std::string_view chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.partial.append(chunk);
  std::vector<WatchMessage> messages;
  // An error line, or a watch the server cancelled (compaction): start again.
  bool broken = !TakeWatchLines(&e.partial, &messages).ok();
  bool released = false, became_live = false, keys_known = true;
  std::vector<std::string> deleted;
  for (const WatchMessage& m : messages) {
    if (m.canceled) broken = true;
    // Compacted past what a resumed watch asked for: the next start is from now.
    if (m.canceled && m.compact_revision > 0) e.seen_revision = 0;
    if (m.created && !e.live) {
      became_live = e.live = true;
      // A watch from now covers what comes after the revision it was created at; a resumed one
      // has yet to deliver what came since seen_revision.
      if (!e.resuming) e.seen_revision = std::max(e.seen_revision, m.revision);
    }
    if (m.deletes > 0) released = true;
    keys_known = keys_known && static_cast<size_t>(m.deletes) == m.deleted.size();
    deleted.insert(deleted.end(), m.deleted.begin(), m.deleted.end());
    if (e.on_put != nullptr && !m.canceled) {
      for (const KeyValue& put : m.puts) {
        e.seen_revision = std::max(e.seen_revision, put.mod_revision);
        e.on_put(e.watchers, put);
      }
      // A progress notification: every event up to its revision was delivered.
      if (m.events == 0 && !m.created) e.seen_revision = std::max(e.seen_revision, m.revision);
    }
  }
  if (became_live) e.pause = Millis(0);
  if (became_live) e.watchers.TellLive();
  if (released && e.on_deletes && keys_known) {
    e.on_deletes(e.watchers, deleted);
  } else if (released) {
    e.watchers.TellReleased();
  }
  if (broken) {
    http::AsyncClient::StreamId id = e.stream;
    // Cancel runs Ended, which takes mu_: after this call returns.
    loop_->Post([this, id] { http_->Cancel(id); });
  }
}

void Watches::Ended(const std::string& id, const Status& error) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.stream != 0) --streams_;
  e.stream = 0;
  const bool was_live = e.live;
  e.live = false;
  // Whatever ended it, a release may have gone unseen: the waiters try again now.
  e.watchers.TellLost(was_live);
  (void)error;  // a stream cancelled as broken is made again as one that failed
  if (shut_down_ || e.watchers.empty()) {
    entries_.erase(it);
    return;
  }
  ++next_endpoint_;  // this one failed us
  e.pause = std::min(kMaxPause, e.pause.count() == 0 ? kFirstPause : e.pause * 2);
  e.starting = true;
  if (e.retry == nullptr) e.retry = std::make_unique<Timer>(loop_, [this, id] { Start(id); });
  e.retry->StartAfter(e.pause);
}

void Watches::Sweep() {
  std::vector<http::AsyncClient::StreamId> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = Now();
    for (auto& [id, e] : entries_) {
      if (e.stream != 0 && e.watchers.IdleFor(now, kKeepIdle)) idle.push_back(e.stream);
    }
  }
  for (auto id : idle) http_->Cancel(id);  // Ended erases them
  if (streams_ > 0) sweep_.StartAfter(kSweepEvery);
}

void Watches::Shutdown() {
  std::vector<http::AsyncClient::StreamId> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (auto& [id, e] : entries_) {
      if (e.stream != 0) all.push_back(e.stream);
      if (e.retry != nullptr) e.retry->Free();
    }
  }
  for (auto id : all) http_->Cancel(id);
  sweep_.Free();
}

}  // namespace dlock::etcd

