// Plain hiredis helpers the test harnesses share to talk to the servers they start (not the
// library's own I/O): one command, its reply as text, and no SIGPIPE from a server that died.
#ifndef DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_
#define DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <memory>
#include <string>
#include <vector>

namespace dlock_test::wire {

// Blocks SIGPIPE on this thread for the scope, and swallows one raised meanwhile: hiredis 0.14
// writes with write(2), and a server that dies mid-command must not kill the test process.
class ScopedNoSigpipe {
 public:
  ScopedNoSigpipe();
  ~ScopedNoSigpipe();
  ScopedNoSigpipe(const ScopedNoSigpipe&) = delete;
  ScopedNoSigpipe& operator=(const ScopedNoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval Tv(int ms);
// One command; null when the connection failed (c->errstr says why).
ReplyPtr Command(redisContext* c, const std::vector<std::string>& args);
// status/string -> its text, integer -> decimal, nil -> "(nil)", error -> "ERR: <message>",
// array -> elements rendered the same way and joined by "\n".
std::string Render(const redisReply* r);

}  // namespace dlock_test::wire

#endif  // DLOCK_TESTS_SUPPORT_REDIS_WIRE_H_
