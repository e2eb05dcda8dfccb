// A blocking Redis connection, authenticated and on the right database. Used by callers'
// threads for acquire/release/extend, one connection per thread at a time (the backend keeps a
// pool), so threads never wait on each other's round trips.
//
// The socket I/O is our own (connect with poll, then a blocking socket whose timeouts follow the
// deadline) so that every call has a deadline for the whole exchange: hiredis's blocking
// context only bounds each read(), so a server trickling one byte at a time could hold a
// caller forever. Commands are formatted by resp.h; hiredis's reader parses the replies. With TLS (the config's
// tls_context) the same socket carries OpenSSL's records: handshake, reads and writes follow
// the same deadlines.
#ifndef DLOCK_REDIS_WIRE_SYNC_CONNECTION_H_
#define DLOCK_REDIS_WIRE_SYNC_CONNECTION_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/connection_count.h"
#include "core/status.h"
#include "redis/redis_url.h"
#include "redis/wire/reply.h"
#include "redis/wire/scripts.h"

namespace dlock::redis {

class SyncConnection {
 public:
  // Connects, authenticates and selects the database, all before `deadline`.
  static Status Connect(const RedisConfig& config, TimePoint deadline,
                        std::unique_ptr<SyncConnection>* out);
  ~SyncConnection();
  SyncConnection(const SyncConnection&) = delete;
  SyncConnection& operator=(const SyncConnection&) = delete;

  // One round trip, sent and answered in full before `deadline`. Fails with EIO when the
  // server cannot be reached, closes the connection or misses the deadline, and with EBACKEND
  // when its bytes are not RESP; either way the connection is broken afterwards. An error reply
  // is returned as a reply, not a Status. On success *reply is never null.
  Status Command(const std::vector<std::string>& argv, TimePoint deadline, ReplyPtr* reply);
  // EVALSHA, loading the script and retrying once on NOSCRIPT (e.g. after SCRIPT FLUSH).
  Status Eval(const Script& script, const std::vector<std::string>& keys,
              const std::vector<std::string>& args, TimePoint deadline, ReplyPtr* reply);
  // Pipelining: queue commands, then read their replies in order (the first read sends).
  void Append(const std::vector<std::string>& argv);
  // The same for a script call: EVALSHA (or EVAL with the body, for `body`), formatted straight
  // from the keys and arguments.
  void AppendScriptCall(const Script& script, bool body, const std::vector<std::string>& keys,
                        const std::vector<std::string>& args);
  Status ReadReply(TimePoint deadline, ReplyPtr* reply);
  // Loads the script into the server's cache.
  Status LoadScript(const Script& script, TimePoint deadline);

  bool broken() const { return broken_; }
  // The last failure was the deadline passing (the server may be alive but slow or silent),
  // rather than the connection being refused, reset or closed.
  bool timed_out() const { return timed_out_; }

 private:
  SyncConnection(int fd, std::string server, int timeout_ms);
  Status Handshake(const RedisConfig& config, TimePoint deadline, const std::string& limit);
  // One send or recv, over TLS when there is any: > 0 bytes; 0 the peer closed; < 0 with
  // *again (the socket timeout: look at the deadline and try again) or *error set.
  ssize_t Send(const char* data, size_t len, bool* again, Status* error);
  ssize_t Recv(char* buf, size_t len, bool* again, Status* error);
  // Words for a failure before the first reply: a plain client at a TLS port, and the reverse.
  std::string ProtocolHint() const;
  Status Flush(TimePoint deadline);
  Status Fail(Status s);
  // Broken, or bytes nobody asked for wait unread: no command may be sent.
  Status ReadyForCommand();
  Status TimedOut(const char* doing);
  // Sets the socket's send/receive timeouts for what is left until deadline; false when
  // nothing is left.
  bool Arm(TimePoint deadline);

  int fd_;
  SSL* ssl_ = nullptr;
  std::string server_;
  int timeout_ms_;  // for messages: what the deadline was made of
  redisReader* reader_;
  std::string pending_;  // formatted commands not yet written
  int64_t armed_ms_ = 0;  // the socket's current SO_RCVTIMEO/SO_SNDTIMEO
  bool broken_ = false;
  bool timed_out_ = false;
  bool answered_ = false;  // a reply was read: the server speaks RESP on this transport
  CountedConnection counted_;  // once up (connected, TLS handshake done) until destroyed
};

// argv for EVALSHA sha numkeys keys... args...
std::vector<std::string> EvalShaArgv(const Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args);
// argv for EVAL body numkeys keys... args...: where no NOSCRIPT round trip may come between
// the command and the one before it (ASKING).
std::vector<std::string> EvalBodyArgv(const Script& script, const std::vector<std::string>& keys,
                                      const std::vector<std::string>& args);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_SYNC_CONNECTION_H_
