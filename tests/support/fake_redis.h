// A fake Redis on loopback, for the faults a real server cannot make: replies that are not RESP,
// replies of the wrong shape, absurd numbers, replies trickled byte by byte, silence.
//
//   FakeRedis fake([](const std::vector<std::string>& argv) -> FakeReply {
//     if (argv[0] == "PING") return {"+PONG\r\n"};
//     return {"$-5\r\n"};                           // garbage to everything else
//   });
//   dlock_client_open(fake.url().c_str(), &c);
//
// Each connection gets its own thread; commands are parsed with hiredis's reader (a client's
// commands are RESP arrays) and answered in order. Counts of commands by name are kept.
#ifndef DLOCK_TESTS_SUPPORT_FAKE_REDIS_H_
#define DLOCK_TESTS_SUPPORT_FAKE_REDIS_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dlock_test {

struct FakeReply {
  std::string bytes;    // sent as is
  int trickle_ms = 0;   // > 0: one byte every trickle_ms
  bool silent = false;  // send nothing, ever (the connection stays open)
  bool hang_up = false; // close the connection after sending bytes
  size_t flood = 0;     // after bytes, this many more 'x' bytes, sent while the client reads
};

class FakeRedis {
 public:
  using Responder = std::function<FakeReply(const std::vector<std::string>& argv)>;
  explicit FakeRedis(Responder respond);
  ~FakeRedis();  // closes every connection, joins every thread
  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url(const std::string& params = "") const {
    return "redis://" + address() + (params.empty() ? "" : "?" + params);
  }
  // How many commands named `name` (upper case, e.g. "EVALSHA") arrived so far.
  int count(const std::string& name) const;

  // Replies a well-behaved server would give to what dlock sends before its scripts.
  static bool Handshake(const std::vector<std::string>& argv, FakeReply* out);
  // acquire.lua's answers.
  static std::string Acquired(uint64_t token);
  static std::string HeldFor(long long pttl_ms);

 private:
  void Accept();
  void Serve(int fd);

  Responder respond_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> workers_;
  std::map<std::string, int> counts_;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_FAKE_REDIS_H_
