// A hiredis async connection on the client's event loop (loop thread only). Commands issued in
// one loop iteration leave in one write: that is how heartbeats are pipelined. hiredis 0.14 has
// no async timeouts, so this class enforces timeout_ms itself: when the oldest command waits
// longer, the connection is dropped and every pending command fails with EIO.
#ifndef DLOCK_REDIS_ASYNC_CONNECTION_H_
#define DLOCK_REDIS_ASYNC_CONNECTION_H_

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <deque>
#include <unordered_map>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "loop/event_loop.h"
#include "redis/redis_url.h"
#include "redis/scripts.h"

namespace dlock::redis {

// Opens a hiredis async context on loop for config, attaches it to the loop, sets data and the
// callbacks, and queues AUTH and SELECT (their replies are ignored: a refusal shows up as the
// next command's NOAUTH error). Null with *error set when it cannot even start connecting.
redisAsyncContext* OpenAsyncContext(EventLoop* loop, const RedisConfig& config, void* data,
                                    redisConnectCallback* on_connect,
                                    redisDisconnectCallback* on_disconnect, std::string* error);

class AsyncConnection {
 public:
  // reply is null exactly when error is not ok. The reply is freed after the callback.
  using Callback = std::function<void(redisReply* reply, const Status& error)>;

  AsyncConnection(EventLoop* loop, const RedisConfig& config);
  ~AsyncConnection();
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
  size_t pending() const { return sent_.size(); }
  // Runs (loop thread) whenever a connection fails: refused, closed by the server, dropped
  // for silence, or a command failed on it. Not for Shutdown. May run several times per loss.
  void set_on_lost(std::function<void()> on_lost) { on_lost_ = std::move(on_lost); }

 private:
  struct Pending;
  static void OnReply(redisAsyncContext* ac, void* reply, void* privdata);
  static void OnConnect(const redisAsyncContext* ac, int status);
  static void OnDisconnect(const redisAsyncContext* ac, int status);
  bool EnsureConnected(std::string* error);
  void CheckTimeout();
  void ArmTimeout();
  void Lost();

  EventLoop* loop_;
  RedisConfig config_;
  std::string server_;
  redisAsyncContext* ctx_ = nullptr;
  std::string drop_reason_;
  std::string shutdown_reason_;  // set once shut down
  std::deque<TimePoint> sent_;  // send times of pending commands, oldest first
  // NOSCRIPT handling: commands are numbered as sent; a script needs loading again only for a
  // NOSCRIPT to a command sent after its last SCRIPT LOAD (else one is already on its way).
  uint64_t commands_sent_ = 0;
  std::unordered_map<std::string, uint64_t> script_loaded_at_;  // sha1 -> command number
  Timer timeout_timer_;
  std::function<void()> on_lost_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_ASYNC_CONNECTION_H_
