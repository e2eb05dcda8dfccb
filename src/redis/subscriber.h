// One pub/sub connection per client for all its waiters (README, Guarantees, 5). Waiters watch a
// lock's release channel; the release script publishes there; every watcher of that channel is
// woken. If the connection drops, all waiters are woken (they retry and fall back to polling)
// and the channels are subscribed again on a new connection.
#ifndef DLOCK_REDIS_SUBSCRIBER_H_
#define DLOCK_REDIS_SUBSCRIBER_H_

#include <hiredis/async.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "loop/event_loop.h"
#include "redis/redis_url.h"

namespace dlock::redis {

class Subscriber {
 public:
  Subscriber(EventLoop* loop, const RedisConfig& config);
  ~Subscriber();

  // Any thread. watcher hears of every release of channel until Unwatch.
  void Watch(const std::string& channel, ReleaseWatcher* watcher);
  // Any thread. After it returns, watcher is never touched again.
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher);
  // Loop thread: closes the connection; waiters fall back to polling.
  void ShutdownOnLoop();

 private:
  // A channel stays subscribed for a while after its last waiter leaves (kLinger), so that a
  // lock taken over and over costs no SUBSCRIBE round trip, and so that an UNSUBSCRIBE is never
  // racing a SUBSCRIBE of the same channel (hiredis 0.14 would drop the newer callback).
  enum class State { kSubscribing, kLive, kUnsubscribing };
  struct Channel {
    std::vector<ReleaseWatcher*> waiters;
    State state = State::kSubscribing;
    TimePoint idle_since;  // when waiters became empty
  };
  static constexpr Millis kLinger{2000};
  static void OnMessage(redisAsyncContext* ac, void* reply, void* privdata);
  static void OnDisconnect(const redisAsyncContext* ac, int status);
  static void OnConnect(const redisAsyncContext* ac, int status);
  bool EnsureConnected();
  void SendSubscribe(const std::string& channel);
  void SubscribePending();
  void Sweep();
  void ConnectionLost();

  EventLoop* loop_;
  RedisConfig config_;
  redisAsyncContext* ctx_ = nullptr;  // loop thread
  bool shut_down_ = false;            // loop thread
  Timer reconnect_timer_;
  Timer sweep_timer_;
  std::mutex mu_;
  std::unordered_map<std::string, Channel> channels_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_SUBSCRIBER_H_
