// One connection to one Redis server on the loop thread, over a libevent bufferevent: TCP, a
// unix socket, or TLS (bufferevent_openssl, when the config has a tls_context). hiredis
// formats the commands and parses the replies; the I/O is ours because Debian's hiredis (0.14)
// has no TLS and its async layer knows neither SSUBSCRIBE nor smessage.
//
// It only connects, writes and reads: deadlines, handshakes (AUTH) and what the replies mean
// belong to its users (AsyncConnection, Subscriber). Commands written in one loop iteration
// leave together: libevent flushes the output buffer when the loop next runs.
#ifndef DLOCK_REDIS_STREAM_CONNECTION_H_
#define DLOCK_REDIS_STREAM_CONNECTION_H_

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loop/event_loop.h"
#include "redis/redis_url.h"

struct bufferevent;

namespace dlock::redis {

class StreamConnection {
 public:
  // Called on the loop thread. Each may Close() the connection, or Open() it anew; after
  // either, nothing more of the old connection is delivered.
  class Handler {
   public:
    virtual ~Handler() = default;
    // Connected (and the TLS handshake done): the handler's own handshake goes first.
    virtual void OnStreamConnected() = 0;
    // One reply, freed after the call.
    virtual void OnStreamReply(redisReply* reply) = 0;
    // The connection failed and is closed: refused, reset, closed by the server, a TLS
    // failure, or bytes that are not RESP. why names the server and the cause.
    virtual void OnStreamLost(const Status& why) = 0;
  };

  StreamConnection(EventLoop* loop, const RedisConfig& config, Handler* handler);
  // Closes; no callback runs after.
  ~StreamConnection();
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Starts connecting: each of the host's addresses in turn, until connect_timeout_ms after
  // this call. False, with *why, when it cannot even start (no address, no memory); else the
  // outcome arrives through the handler. Writes made before it connects are sent then.
  bool Open(std::string* why);
  // Formats argv and queues it; false only out of memory (the stream is then unusable: the
  // caller should treat it as lost).
  bool Write(const std::vector<std::string>& argv);
  // Closes now, no callback. Open() may follow.
  void Close();

  bool open() const { return bev_ != nullptr; }
  bool connected() const { return connected_; }
  // Counts connections opened: a handler holding a number knows whether it is still current.
  uint64_t generation() const { return generation_; }
  const std::string& server() const { return server_; }

 private:
  struct Address {
    sockaddr_storage addr;
    socklen_t len;
  };
  bool ConnectNext();
  bool Send(const char* data, size_t len);
  void Flush();
  static void OnFlush(int fd, short events, void* arg);
  static void OnRead(bufferevent* bev, void* arg);
  static void OnEvent(bufferevent* bev, short events, void* arg);
  void ReadReplies();
  void Lost(const Status& why);
  Status DescribeFailure(short events) const;

  EventLoop* loop_;
  RedisConfig config_;
  Handler* handler_;
  std::string server_;
  bufferevent* bev_ = nullptr;
  event* flush_ = nullptr;   // sends outgoing_ at the end of the loop turn (plain sockets)
  std::string outgoing_;     // commands written this turn, not sent yet
  redisReader* reader_ = nullptr;
  bool connected_ = false;
  bool answered_ = false;  // a reply arrived on this connection
  uint64_t generation_ = 0;
  std::vector<Address> addresses_;
  size_t next_address_ = 0;
  TimePoint connect_started_{};
  std::string last_connect_error_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_STREAM_CONNECTION_H_
