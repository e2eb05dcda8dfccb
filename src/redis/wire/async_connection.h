// A pipelined Redis connection on the client's event loop (loop thread only), over a
// StreamConnection (TCP, unix socket or TLS). Commands issued in one loop iteration leave in
// one write: that is how heartbeats are pipelined. Replies come back in order and each goes
// to its command's callback. When the oldest command waits longer than timeout_ms (connecting
// included), the connection is dropped and every pending command fails with EIO; the next
// command connects again.
#ifndef DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_
#define DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "loop/event_loop.h"
#include "redis/redis_url.h"
#include "redis/wire/scripts.h"
#include "redis/wire/stream_connection.h"

namespace dlock::redis {

class AsyncConnection : private StreamConnection::Handler {
 public:
  // reply is null exactly when error is not ok. The reply is freed after the callback.
  using Callback = std::function<void(redisReply* reply, const Status& error)>;

  AsyncConnection(EventLoop* loop, const RedisConfig& config);
  ~AsyncConnection() override;
  AsyncConnection(const AsyncConnection&) = delete;
  AsyncConnection& operator=(const AsyncConnection&) = delete;

  // Sends argv (connecting first when needed); cb runs exactly once, never inside this call.
  // Returns the command's number on this connection's count (0 when it could not be sent).
  uint64_t Command(const std::vector<std::string>& argv, Callback cb);
  // EVALSHA with one SCRIPT LOAD + retry on NOSCRIPT.
  void Eval(const Script& script, const std::vector<std::string>& keys,
            const std::vector<std::string>& args, Callback cb);
  // Drops the connection; pending commands fail with EIO carrying why.
  void Drop(const std::string& why);
  // Drops the connection for good: later commands fail at once and never reconnect.
  void Shutdown(const std::string& why);
  // Commands sent and not answered yet.
  size_t pending() const { return pending_.size(); }
  // Runs (loop thread) whenever a connection fails: refused, closed by the server, dropped
  // for silence, or a command failed on it. Not for Shutdown. May run several times per loss.
  void set_on_lost(std::function<void()> on_lost) { on_lost_ = std::move(on_lost); }

 private:
  struct Pending {
    Callback cb;  // null for the connection's own setup commands
    TimePoint sent;
  };
  void OnStreamConnected() override {}
  void OnStreamReply(redisReply* reply) override;
  void OnStreamLost(const Status& why) override;
  bool EnsureConnected(std::string* error);
  // Fails every pending command with error (in order; their callbacks may send anew).
  void FailPending(const Status& error);
  void FailLater(Callback cb, const Status& error);
  void CheckTimeout();
  void ArmTimeout();
  void Lost();

  EventLoop* loop_;
  RedisConfig config_;
  std::string server_;
  StreamConnection stream_;
  std::string shutdown_reason_;  // set once shut down
  std::deque<Pending> pending_;  // sent, not answered, oldest first
  // NOSCRIPT handling: commands are numbered as sent; a script needs loading again only for a
  // NOSCRIPT to a command sent after its last SCRIPT LOAD (else one is already on its way).
  uint64_t commands_sent_ = 0;
  std::unordered_map<std::string, uint64_t> script_loaded_at_;  // sha1 -> command number
  Timer timeout_timer_;
  std::function<void()> on_lost_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_
