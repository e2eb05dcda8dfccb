// A blocking hiredis connection with timeouts, authenticated and on the right database.
// Used by callers' threads for acquire/release/extend, one connection per thread at a time
// (the backend keeps a pool), so threads never wait on each other's round trips.
#ifndef DLOCK_REDIS_SYNC_CONNECTION_H_
#define DLOCK_REDIS_SYNC_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "redis/redis_url.h"
#include "redis/reply.h"
#include "redis/scripts.h"

namespace dlock::redis {

class SyncConnection {
 public:
  static Status Connect(const RedisConfig& config, std::unique_ptr<SyncConnection>* out);
  ~SyncConnection();
  SyncConnection(const SyncConnection&) = delete;
  SyncConnection& operator=(const SyncConnection&) = delete;

  // One round trip. Fails with EIO (and the connection becomes broken) when the server cannot
  // be reached or does not answer in time; an error reply is returned as a reply, not a Status.
  Status Command(const std::vector<std::string>& argv, ReplyPtr* reply);
  // EVALSHA, loading the script and retrying once on NOSCRIPT (e.g. after SCRIPT FLUSH).
  Status Eval(const Script& script, const std::vector<std::string>& keys,
              const std::vector<std::string>& args, ReplyPtr* reply);
  // Pipelining: queue commands, then read their replies in order.
  void Append(const std::vector<std::string>& argv);
  Status ReadReply(ReplyPtr* reply);
  // Loads the script into the server's cache.
  Status LoadScript(const Script& script);

  bool broken() const { return broken_; }

 private:
  SyncConnection(redisContext* ctx, std::string server) : ctx_(ctx), server_(std::move(server)) {}
  Status IoError(const char* doing);

  redisContext* ctx_;
  std::string server_;
  bool broken_ = false;
};

// argv for EVALSHA sha numkeys keys... args...
std::vector<std::string> EvalShaArgv(const Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_SYNC_CONNECTION_H_
