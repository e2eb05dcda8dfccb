// One connection to one Redis server on the loop thread, over a loop Stream (loop/stream.h): TCP,
// a unix socket, or TLS (when the config has a tls_context). Commands are formatted by resp.h,
// replies parsed by hiredis's reader; the I/O is ours because Debian's hiredis (0.14) has no TLS and its async
// layer knows neither SSUBSCRIBE nor smessage.
//
// It only connects, writes and reads: deadlines, handshakes (AUTH) and what the replies mean
// belong to its users (AsyncConnection, Subscriber). Commands written in one loop iteration
// leave together.
#ifndef DLOCK_REDIS_WIRE_STREAM_CONNECTION_H_
#define DLOCK_REDIS_WIRE_STREAM_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/connection_count.h"
#include "core/status.h"
#include "loop/event_loop.h"
#include "loop/stream.h"
#include "redis/redis_url.h"

namespace dlock::redis {

class StreamConnection : private Stream::Handler {
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
  ~StreamConnection() override;
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Starts connecting: each of the host's addresses in turn, until connect_timeout_ms after
  // this call. False, with *why, when it cannot even start (no address, no memory); else the
  // outcome arrives through the handler. Writes made before it connects are sent then.
  bool Open(std::string* why);
  // Formats argv and queues it; false only out of memory (the stream is then unusable: the
  // caller should treat it as lost).
  bool Write(const std::vector<std::string>& argv);
  // Queues a command already in RESP (resp.h); false only out of memory, as Write.
  bool WriteFormatted(std::string_view command);
  // Closes now, no callback. Open() may follow.
  void Close();

  bool open() const { return stream_.open(); }
  bool connected() const { return stream_.connected(); }
  // Counts connections opened: a handler holding a number knows whether it is still current.
  uint64_t generation() const { return stream_.generation(); }
  const std::string& server() const { return server_; }

 private:
  // Stream::Handler
  void OnStreamConnected() override;
  void OnStreamData(const char* data, size_t len) override;
  void OnStreamFailed(const StreamFailure& failure, bool trying_next) override;

  bool Addresses(std::vector<StreamAddress>* out, std::string* why) const;
  Status Describe(const StreamFailure& failure) const;
  void Lost(const Status& why);

  RedisConfig config_;
  Handler* handler_;
  std::string server_;
  Stream stream_;
  redisReader* reader_ = nullptr;
  bool answered_ = false;  // a reply arrived on this connection
  std::string scratch_;    // Write's formatted command, its capacity kept
  // Once up (connected, TLS handshake done) until Close(), which every end of the stream goes
  // through (Lost, Open, the destructor).
  CountedConnection counted_;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_STREAM_CONNECTION_H_
