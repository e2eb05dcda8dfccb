// A master found and followed through Redis Sentinel, as one Channel. The sentinels are asked
// for the master (SENTINEL get-master-addr-by-name), in the URL's order, and the answer is
// checked with ROLE (a sentinel may still name a master that was demoted). Calls go to that
// master's NodeChannel. The master is looked up again, in the background, when a sentinel
// announces +switch-master (each sentinel is subscribed to it), when the master cannot be
// reached, and when it answers READONLY (it became a replica). Waiters follow the master.
//
// Once a connection to the master fails, nothing is sent to that address again until a
// sentinel names it anew (NodeChannel::Guard): after a failover the old master may come back
// empty at its address and say it is a master for seconds, and a lock granted there would be
// a second holder. Blocking calls look the master up first; async calls wait for the next
// background lookup.
//
// Bounds: as NodeChannel's for a call; a blocking lookup (at open, after READONLY, or before
// using a master whose connection failed) adds up to 2 x (connect_timeout_ms + timeout_ms) per
// sentinel asked (its answer, then ROLE on the master it names); a call that failed at once
// on a stale connection, or answered READONLY, is tried once more after the lookup, with a
// bound of its own; an async call made while no master is vouched for first waits for the
// next background lookup (at most 250 ms away, then the lookup's own bound).
#ifndef DLOCK_REDIS_TOPOLOGY_SENTINEL_CHANNEL_H_
#define DLOCK_REDIS_TOPOLOGY_SENTINEL_CHANNEL_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loop/event_loop.h"
#include "redis/topology/channel.h"
#include "redis/topology/cluster_map.h"
#include "redis/topology/node_channel.h"
#include "redis/redis_url.h"
#include "redis/topology/subscriber.h"
#include "redis/topology/watch_router.h"

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
  // A master's node, guarded (see NodeChannel::Guard): it is vouched for when a sentinel
  // names it and it says it is a master.
  NodeChannel* MasterNode(const NodeAddress& address);
  NodeChannel* SentinelNode(size_t i);
  void SetMaster(NodeChannel* node);
  // The master, looked up first (blocking) when there is none or it is not vouched for.
  NodeChannel* VouchedMaster(Status* error);
  // Loop thread: parked async calls go to the master once one is vouched for, or fail when
  // the lookup ended without one.
  void DispatchParked(bool lookup_ended);
  // Blocking: asks every sentinel in turn until one names a master that says it is one.
  Status FindMaster();
  // Loop thread: the same without blocking, one at a time, at most every kRelookupGap.
  // announced (a sentinel said the master switched): if a lookup is under way, another
  // follows it, since it may have asked before the switch.
  void FindMasterInBackground(bool announced = false);
  void AskSentinel(size_t i);
  void LookupEnded();
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
  struct ParkedCall {
    ScriptCall call;
    ReplyCallback finish;
  };
  std::vector<ParkedCall> parked_;  // async calls waiting for a master to be vouched for
  size_t async_calls_ = 0;
  bool looking_up_ = false;
  bool lookup_again_ = false;
  bool shut_down_ = false;
  TimePoint last_lookup_{};
  Timer lookup_timer_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_SENTINEL_CHANNEL_H_
