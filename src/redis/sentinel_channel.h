// A master found and followed through Redis Sentinel, as one Channel. The sentinels are asked
// for the master (SENTINEL get-master-addr-by-name), in the URL's order, and the answer is
// checked with ROLE (a sentinel may still name a master that was demoted). Calls go to that
// master's NodeChannel. The master is looked up again, in the background, when a sentinel
// announces +switch-master (each sentinel is subscribed to it), when the master cannot be
// reached, and when it answers READONLY (it became a replica). Waiters follow the master.
//
// Bounds: as NodeChannel's for a call; a blocking lookup (at open, or after READONLY) adds up
// to 2 x (connect_timeout_ms + timeout_ms) per sentinel asked (its answer, then ROLE on the
// master it names), and a READONLY call is tried once more.
#ifndef DLOCK_REDIS_SENTINEL_CHANNEL_H_
#define DLOCK_REDIS_SENTINEL_CHANNEL_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loop/event_loop.h"
#include "redis/channel.h"
#include "redis/cluster_map.h"
#include "redis/node_channel.h"
#include "redis/redis_url.h"
#include "redis/subscriber.h"
#include "redis/watch_router.h"

namespace dlock::redis {

class SentinelChannel : public Channel {
 public:
  SentinelChannel(EventLoop* loop, RedisSentinelConfig config);
  ~SentinelChannel() override;

  const std::string& server() const override { return server_; }
  // Finds the master, then PINGs it.
  Status Ping() override;
  Status Eval(const ScriptCall& call, ReplyPtr* reply) override;
  void EvalAll(const std::vector<ScriptCall>& calls) override;
  void EvalAsync(const ScriptCall& call, ReplyCallback done) override;
  void Watch(const std::string& channel, ReleaseWatcher* watcher) override;
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher) override;
  size_t PendingAsync() const override { return async_calls_; }
  void ShutdownOnLoop() override;

 private:
  class SwitchWatcher;

  NodeChannel* Master();
  NodeChannel* NodeAt(const std::string& name, const RedisConfig& config);
  NodeChannel* SentinelNode(size_t i);
  void SetMaster(const NodeAddress& address);
  // Blocking: asks every sentinel in turn until one names a master that says it is one.
  Status FindMaster();
  // Loop thread: the same without blocking, one at a time, at most every kRelookupGap.
  void FindMasterInBackground();
  void AskSentinel(size_t i);
  Status Named(const Status& s) const;

  EventLoop* loop_;
  RedisSentinelConfig config_;
  std::string server_;

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<NodeChannel>> nodes_;  // sentinels and masters, by name
  NodeChannel* master_ = nullptr;
  std::mutex find_mu_;  // one blocking lookup at a time

  WatchRouter watches_;
  std::unique_ptr<SwitchWatcher> switch_watcher_;
  std::vector<std::unique_ptr<Subscriber>> switch_subscribers_;  // +switch-master, per sentinel

  // Loop thread only.
  size_t async_calls_ = 0;
  bool looking_up_ = false;
  bool shut_down_ = false;
  TimePoint last_lookup_{};
  Timer lookup_timer_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_SENTINEL_CHANNEL_H_
