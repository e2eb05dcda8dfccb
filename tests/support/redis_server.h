// A real, throwaway redis-server for integration tests.
//
//   dlock_test::RedisServer redis;                 // starts it, or ADD_FAILURE()s
//   ASSERT_TRUE(redis.running());
//   dlock_client_open(redis.url().c_str(), &c);   // "redis://127.0.0.1:PORT"
//   EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{job}"}), "1");
//   redis.Kill();  redis.Restart();                // crash, then come back empty on the same port
//
// Each server gets a free loopback port, its own temp dir (also holding its unix socket and its
// log) and no persistence, so tests may run in parallel (ctest -j) and never share state. The
// server is started with PR_SET_PDEATHSIG, so it dies with the thread that created it even if
// the test process is killed: create servers on a thread that outlives them (normally the
// test's own thread). It does not inherit the test's file descriptors or signal mask.
//
// When extra_args contain `--requirepass PASSWORD`, Cli() and the readiness check authenticate
// with it (a plain hiredis connection does not).
//
// A TLS server (certificates from tls_certs.h):
//
//   dlock_test::TestCertificates certs;
//   dlock_test::RedisServer redis(dlock_test::RedisTls{.certs = &certs,
//                                                      .require_client_cert = true});
//   redis.url();             // "rediss://127.0.0.1:PORT": TLS only, no unix socket
//   redis.Cli({"PING"});     // over TLS, with certs.client_cert(); Restart() keeps TLS
//
// redis-server refuses a plain client on a TLS port at once (the client sees the connection
// reset), but a TLS client on a plain port waits: the server reads its ClientHello as the start
// of an inline command and answers nothing, so the client's handshake times out.
#ifndef DLOCK_TESTS_SUPPORT_REDIS_SERVER_H_
#define DLOCK_TESTS_SUPPORT_REDIS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/child_process.h"

namespace dlock_test {

class TestCertificates;

// How a TLS RedisServer listens: redis-server --port 0 --tls-port PORT, with
// --tls-cert-file/--tls-key-file of the chosen certificate, --tls-ca-cert-file certs->ca_cert()
// and --tls-auth-clients yes|no. When it connects to another server itself (give it
// --tls-replication yes, --tls-cluster yes in extra_args), it presents certs->client_cert().
struct RedisTls {
  enum class Cert { kServer, kWrongHost, kExpired };  // server_cert, wrong_host_cert, ...

  const TestCertificates* certs = nullptr;  // must outlive the server (its files are used)
  Cert server_cert = Cert::kServer;         // the certificate the server presents
  bool require_client_cert = false;         // --tls-auth-clients yes: refuse clients without one
  bool plain_port_too = false;              // also listen without TLS, on plain_port()

  // The settings above as redis.conf directives, name and value ("tls-cert-file", path...):
  // the certificates, tls-auth-clients, and the client certificate. Not the ports.
  std::vector<std::pair<std::string, std::string>> ServerConfig() const;
};

class RedisServer {
 public:
  // Starts `redis-server` (found on PATH) on a free 127.0.0.1 port with no persistence
  // (--save "" --appendonly no), in a fresh temp dir, also listening on a unix socket in that
  // dir; waits until it answers PING (up to 5 s). Retries on a new port if the port was taken
  // in the meantime. On failure, ADD_FAILURE() with the reason (and the server's log) and
  // running() is false.
  explicit RedisServer(std::vector<std::string> extra_args = {});
  // The same, but listening with TLS only (on port(); with plain_port_too also without TLS on
  // plain_port()); the readiness check and Cli() speak TLS (see wire::TlsConnection), without
  // checking the server's certificate and presenting certs->client_cert().
  explicit RedisServer(const RedisTls& tls, std::vector<std::string> extra_args = {});
  // Always stops it (SIGTERM, then SIGKILL after 2 s), reaps it, removes the temp dir. If the
  // current test has failed, the tail of the server's log is printed first.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool running() const { return pid() > 0; }
  int port() const { return port_; }  // a TLS server's TLS port
  // A TLS server's port without TLS when it was asked for (plain_port_too); -1 otherwise.
  int plain_port() const { return plain_port_; }
  bool tls() const { return tls_.has_value(); }
  std::string host() const { return "127.0.0.1"; }
  std::string address() const;      // "127.0.0.1:PORT"
  std::string url() const;          // "redis://127.0.0.1:PORT" ("rediss://" with TLS)
  std::string unix_socket() const;  // absolute path of the socket ("" for a TLS server)
  std::string dir() const { return dir_; }  // the temp dir (log: dir() + "/redis.log")
  pid_t pid() const { return process_ ? process_->pid() : -1; }  // -1 when not running

  // SIGKILL + reap (simulates a crash); running() becomes false.
  void Kill();
  // SIGTERM (SIGKILL after 2 s) + reap; running() becomes false.
  void Stop();
  // Starts again on the SAME port with empty data (stops it first if it is running). True when
  // it answers PING within 5 s; otherwise ADD_FAILURE() with the reason and false.
  bool Restart();

  // Runs one command over a fresh hiredis connection (TCP; TLS for a TLS server, see
  // wire::TlsConnection) and renders the reply as text:
  // status/string -> its text, integer -> decimal, nil -> "(nil)", error -> "ERR: <message>",
  // array -> elements rendered the same way and joined by "\n" (empty array -> "").
  // Connection failure -> "CONNECT FAILED: <reason>"; an I/O error or timeout (10 s) after
  // connecting -> "IO FAILED: <reason>". Safe to call when the server is not running.
  std::string Cli(const std::vector<std::string>& args) const;

 private:
  void Start();                       // picks free ports, starts, waits until ready
  void Spawn();                       // starts redis-server on port_ (and plain_port_)
  bool WaitReady(std::string* why);  // PING (and our pid) within the deadline
  std::string LogTail() const;

  std::vector<std::string> extra_args_;
  std::string password_;  // from --requirepass, if any
  std::string redis_path_;
  std::string dir_;
  int port_ = -1;
  std::optional<RedisTls> tls_;
  int plain_port_ = -1;
  std::unique_ptr<ChildProcess> process_;
};

// errorstat_<kind>:count=N from the server's INFO errorstats (how many MOVED, ASK, TRYAGAIN...
// replies it sent); 0 when absent.
long ErrorCount(const RedisServer& node, const std::string& kind);

// Holding a server's answers back, so that a request is provably in flight: writes paused on a
// node (30 s at most, should a test never let them go), and let go.
inline std::vector<std::string> RedisPauseWritesCommand() { return {"CLIENT", "PAUSE", "30000", "WRITE"}; }
inline std::vector<std::string> RedisUnpauseCommand() { return {"CLIENT", "UNPAUSE"}; }
// How many clients CLIENT LIST's answer (a line each) shows blocked (flags
// with b) in a script call (the lock calls'), which is what a paused write looks like. Others
// block too: a sentinel's PUBLISH of its hello message.
inline std::vector<std::string> RedisClientListCommand() { return {"CLIENT", "LIST"}; }
inline int RedisPausedScripts(const std::string& client_list) {
  auto field = [](const std::string& line, const std::string& key) {
    const size_t at = line.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    const size_t from = at + key.size() + 2;
    return line.substr(from, line.find(' ', from) - from);
  };
  int paused = 0;
  size_t begin = 0;
  while (begin < client_list.size()) {
    size_t end = client_list.find('\n', begin);
    if (end == std::string::npos) end = client_list.size();
    const std::string line = client_list.substr(begin, end - begin);
    const std::string cmd = field(line, "cmd");
    paused += field(line, "flags").find('b') != std::string::npos &&
              (cmd == "eval" || cmd == "evalsha" || cmd == "fcall");
    begin = end + 1;
  }
  return paused;
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_REDIS_SERVER_H_
