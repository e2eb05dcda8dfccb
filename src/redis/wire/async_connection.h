// A pipelined Redis connection on the client's event loop (loop thread only), over a
// StreamConnection (TCP, unix socket or TLS). Commands issued in one loop iteration leave in
// one write: that is how heartbeats are pipelined. Replies come back in order and each goes
// to its command's callback. When the oldest command waits longer than timeout_ms (connecting
// included), the connection is dropped and every pending command fails with EIO; the next
// command connects again.
#ifndef DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_
#define DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <functional>
#include <string>
#include <string_view>
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
  // One command sent and not answered. No allocation of its own: the ring below keeps the
  // slots, and an EVALSHA's bytes (kept to send again after a NOSCRIPT) are in sent_.
  struct Pending {
    Callback cb;  // null for the connection's own setup commands
    TimePoint sent;
    const Script* script = nullptr;  // an EVALSHA of this script, retried once on NOSCRIPT
    uint64_t number = 0;             // the command's number on commands_sent_'s count
    size_t command_size = 0;         // an EVALSHA's bytes, at the front of what sent_ keeps
  };
  // Sent, not answered, oldest first: a ring of slots that stay allocated while it is in use
  // (a deque allocates and frees a block every few commands). Its storage is given back when it
  // drains after a burst (a heartbeat round of thousands).
  class PendingQueue {
   public:
    bool empty() const { return size_ == 0; }
    size_t size() const { return size_; }
    Pending& front() { return slots_[head_]; }
    // Room for one more, so that push_back cannot fail; false when out of memory.
    bool MakeRoom() noexcept;
    void push_back(Pending p);  // after MakeRoom
    Pending pop_front();
    void swap(PendingQueue& other) noexcept {
      slots_.swap(other.slots_);
      std::swap(head_, other.head_);
      std::swap(size_, other.size_);
    }

   private:
    std::vector<Pending> slots_;  // a power of two of them, or none
    size_t head_ = 0;
    size_t size_ = 0;
  };
  // Queues cb for the command just written; returns the command's number.
  uint64_t Push(Callback cb, const Script* script, size_t command_size);
  // Sends a command already in RESP (the NOSCRIPT retry), like Command.
  uint64_t SendFormatted(std::string_view command, Callback cb);
  // The front EVALSHA's bytes, taken off sent_: valid until sent_ changes (the next Eval).
  std::string_view TakeSent(size_t size);
  // Gives back what sent_ holds of answered commands, before an Eval appends to it.
  void TrimSent();
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
  PendingQueue pending_;
  // The bytes of every pending EVALSHA, oldest first from sent_start_ (the NOSCRIPT retry
  // sends them again): one buffer, not a copy per command.
  std::string sent_;
  size_t sent_start_ = 0;
  // NOSCRIPT handling: commands are numbered as sent; a script needs loading again only for a
  // NOSCRIPT to a command sent after its last SCRIPT LOAD (else one is already on its way).
  uint64_t commands_sent_ = 0;
  std::unordered_map<std::string, uint64_t> script_loaded_at_;  // sha1 -> command number
  Timer timeout_timer_;
  std::function<void()> on_lost_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_ASYNC_CONNECTION_H_
