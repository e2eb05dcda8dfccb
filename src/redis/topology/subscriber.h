// One pub/sub connection per server for all of a client's waiters (docs/guarantees.md, 5).
// Waiters watch a lock's release channel; the release script publishes there; every watcher of
// that channel is woken. If the connection drops, all waiters are woken (they retry and fall
// back to polling) and the channels are subscribed again on a new connection, 200 ms later.
// The connect and the handshake (AUTH, the first SUBSCRIBE) are bounded by connect_timeout_ms
// + timeout_ms, every later command by timeout_ms; a refused AUTH, bytes that are not RESP and
// replies of the wrong shape all count as a lost connection.
//
// The I/O is a StreamConnection (TCP, unix socket or TLS over loop/stream.h, hiredis
// formatting and parsing): hiredis 0.14's async layer knows neither SSUBSCRIBE nor smessage,
// which Redis Cluster needs.
//
// Sharded mode (Redis 7: SSUBSCRIBE/SUNSUBSCRIBE/smessage) serves a cluster node. A channel the
// node refuses (an error such as MOVED, because its slot lives elsewhere) or drops on its own
// (an sunsubscribe push after a slot migration or a failover) is "misrouted": its waiters are
// told OnWatchReady(false) + OnReleased() (they retry, then wait on timing), it is tried again
// on this node only after kRefusedRetry, and on_misrouted(channel) runs on the loop thread,
// outside the lock, so that the owner can refresh its slot map and Watch elsewhere. Any error
// to an SSUBSCRIBE counts (MOVED, CLUSTERDOWN, NOPERM...): the error alone cannot tell a stale
// slot map from the rest. on_misrouted may call Watch and Unwatch; it must not destroy the
// Subscriber. In plain mode an error to a SUBSCRIBE (NOAUTH, NOPERM) refuses the channel the
// same way, without on_misrouted.
#ifndef DLOCK_REDIS_TOPOLOGY_SUBSCRIBER_H_
#define DLOCK_REDIS_TOPOLOGY_SUBSCRIBER_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/watchers.h"
#include "loop/event_loop.h"
#include "redis/redis_url.h"
#include "redis/wire/stream_connection.h"

namespace dlock::redis {

// SUBSCRIBE/UNSUBSCRIBE/message vs SSUBSCRIBE/SUNSUBSCRIBE/smessage.
enum class PubSubMode { kPlain, kSharded };

class Subscriber : private StreamConnection::Handler {
 public:
  Subscriber(EventLoop* loop, const RedisConfig& config, PubSubMode mode = PubSubMode::kPlain,
             std::function<void(const std::string& channel)> on_misrouted = nullptr);
  // Loop thread, or any thread once the loop has stopped. Safe after ShutdownOnLoop.
  ~Subscriber() override;
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Any thread. watcher hears of every release of channel until Unwatch. Watchers are called
  // under this object's lock: they only schedule work.
  void Watch(const std::string& channel, ReleaseWatcher* watcher);
  // Any thread. After it returns, watcher is never touched again.
  void Unwatch(const std::string& channel, ReleaseWatcher* watcher);
  // Loop thread: closes the connection for good; waiters fall back to polling.
  void ShutdownOnLoop();

 private:
  // A channel stays subscribed for a while after its last waiter leaves (kLinger), so that a
  // lock taken over and over costs no SUBSCRIBE round trip. An UNSUBSCRIBE is never racing a
  // SUBSCRIBE of the same channel: a Watch during kUnsubscribing resubscribes once the
  // UNSUBSCRIBE is answered.
  enum class State {
    kPending,        // to be subscribed once connected; listed in to_send_
    kSubscribing,    // (S)SUBSCRIBE sent on this connection, not confirmed yet
    kLive,
    kUnsubscribing,  // (S)UNSUBSCRIBE sent, not answered yet
    kRefused,        // the server refused or dropped it: tried again at retry_at
  };
  struct Channel {
    Watchers waiters;
    State state = State::kPending;
    TimePoint retry_at;    // kRefused
  };
  // A command sent and not answered yet: replies come in this order, and an error reply does
  // not name the channel it refuses.
  enum class Command { kAuth, kSubscribe, kUnsubscribe };
  struct Sent {
    Command command;
    std::string channel;
    TimePoint deadline;  // answered by then, or the connection is dropped
  };

  static constexpr Millis kLinger{2000};
  static constexpr Millis kReconnectDelay{200};
  static constexpr Millis kRefusedRetry{2000};

  void OnStreamConnected() override;
  void OnStreamReply(redisReply* reply) override;
  void OnStreamLost(const Status& why) override;
  // False when the reply makes no sense here: the connection is dropped.
  bool HandleReply(const redisReply& reply, std::vector<std::string>* misrouted);
  void Refuse(const std::string& channel, std::vector<std::string>* misrouted);
  // Our (S)UNSUBSCRIBE is answered: the channel goes, or is subscribed again for new waiters.
  void Unsubscribed(const std::string& channel);
  bool StartConnect();
  bool Send(Command command, const std::vector<std::string>& argv, const std::string& channel);
  void ArmDeadline();
  void OnDeadline();
  void CloseConnection();
  void ConnectionLost();
  void SubscribePending();
  void Sweep();

  EventLoop* loop_;
  const RedisConfig config_;
  const PubSubMode mode_;
  const std::function<void(const std::string&)> on_misrouted_;

  // Loop thread only.
  bool shut_down_ = false;
  // open() while connected or connecting; connected() once the socket (and TLS) is up, the
  // AUTH may still be out.
  StreamConnection stream_;
  TimePoint connect_started_;
  std::deque<Sent> sent_;
  Timer reconnect_timer_;
  Timer sweep_timer_;
  Timer deadline_timer_;

  std::mutex mu_;
  std::unordered_map<std::string, Channel> channels_;
  std::vector<std::string> to_send_;  // channels made kPending (stale names are skipped)
  bool kick_posted_ = false;          // a SubscribePending is posted and has not run yet
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_TOPOLOGY_SUBSCRIBER_H_
