// A real, throwaway 3-node etcd cluster for integration tests: each node an `etcd` (3.4) on
// free loopback ports (client and peer), its data dir in one temp dir the harness makes and
// removes, its log in that dir, always killed by pid (ChildProcess).
//
//   dlock_test::EtcdCluster etcd;             // starts it, waits until healthy, or ADD_FAILURE()s
//   ASSERT_TRUE(etcd.ready());
//   etcd.url();                               // "etcd://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2"
//   etcd.Put("k", "v");  etcd.Get("k");       // behind the clients' backs (the JSON gateway)
//   etcd.Kill(etcd.Leader());                 // another leader within about 0.5 to 1.5 s
//
// Timings are short so that failover is quick: --heartbeat-interval 50 --election-timeout 500.
// Measured on a 2-core machine (etcd 3.4.23): healthy 0.2 to 2.5 s after the start (etcd has a
// leader within 0.2 s; its JSON gateway takes the rest); a new leader 0.35 to 1.5 s after the
// leader is SIGKILLed, mostly 0.5 to 0.7 s; a node started again rejoins within 0.1 s.
// etcd's minimum lease TTL follows from them: 1.5 election timeouts (750 ms) rounded up to 1 s,
// so a lease/grant with TTL 1 is granted TTL 1 (with etcd's defaults, 100/1000 ms, it is granted
// 2); a key on such a lease was gone 1.3 s after its put.
// --experimental-watch-progress-notify-interval (3.4.23 has it; default 10 minutes) is 2 s here:
// a watch created with "progress_notify": true gets a header-only message about every 2 s when
// nothing else comes (through the JSON gateway too), so a client can bound a silent stream.
//
// TLS (certificates from tls_certs.h): clients speak https, peers stay plain http.
//
//   dlock_test::TestCertificates certs;
//   dlock_test::EtcdCluster etcd({.tls = &certs, .client_cert_required = true});
//   etcd.url();   // "etcd://...?tls=1&ca=<ca.crt>&cert=<client.crt>&key=<client.key>"
#ifndef DLOCK_TESTS_SUPPORT_ETCD_CLUSTER_H_
#define DLOCK_TESTS_SUPPORT_ETCD_CLUSTER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "support/child_process.h"

namespace dlock_test {

class TestCertificates;

struct EtcdClusterOptions {
  // Set: client URLs are https with certs' peer certificate (see tls_certs.h); url() names the CA.
  const TestCertificates* tls = nullptr;
  // With tls: clients must present a certificate signed by the CA (--client-cert-auth), and
  // url() names client_cert() and client_key().
  bool client_cert_required = false;
  int heartbeat_ms = 50;
  int election_timeout_ms = 500;
  // --experimental-watch-progress-notify-interval.
  int progress_notify_ms = 2000;
};

class EtcdCluster {
 public:
  using Options = EtcdClusterOptions;
  static constexpr int kNodes = 3;

  // Starts the nodes and waits (up to 30 s) until healthy (see WaitHealthy). On failure,
  // ADD_FAILURE() with the reason and the nodes' log tails, and ready() is false.
  explicit EtcdCluster(Options options = {});
  ~EtcdCluster();  // kills every node, removes the temp dir
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool ready() const { return ready_; }
  const Options& options() const { return options_; }
  // "127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2": the client ports.
  std::string endpoints() const;
  std::string endpoint(int i) const;
  // "etcd://" + endpoints(), with ?tls=1&ca=... (and &cert=&key=) for a TLS cluster.
  std::string url() const;
  // Node i's process runs (it may be stopped by Stop).
  bool running(int i) const;
  pid_t pid(int i) const;  // node i's process, -1 when it is not running

  // Waits up to timeout until every running node that is not stopped answers
  // POST /v3/maintenance/status, all of one cluster, and names a leader among them; why says
  // otherwise.
  bool WaitHealthy(std::chrono::milliseconds timeout, std::string* why);
  // The index of the current leader (as the node of the highest raft term says), or -1.
  int Leader();

  void Stop(int i);  // SIGSTOP: the node hangs, its connections stay open
  void Cont(int i);  // SIGCONT
  void Kill(int i);  // SIGKILL, reaped
  // Starts node i again with its data dir (--initial-cluster-state existing) and waits until it
  // answers and knows the leader. ADD_FAILURE()s when it cannot.
  bool StartAgain(int i);
  void Kill();  // every node
  // Kills every node, wipes the data and starts a new empty cluster (new cluster token) at the
  // same ports; true when healthy again.
  bool Restart();

  // Through the JSON gateway of the first running node (not stopped) that answers 200, the
  // next one tried after an error or a timeout: keys and values as given (any bytes).
  bool Put(const std::string& key, const std::string& value);
  std::optional<std::string> Get(const std::string& key);  // nullopt: no such key, or no answer
  bool Delete(const std::string& key);                      // true when a key was deleted
  // Deletes every key in [key, range_end); true when one was.
  bool DeleteRange(const std::string& key, const std::string& range_end);
  // How many keys lie in [key, range_end); -1 when no node answered.
  int Count(const std::string& key, const std::string& range_end);
  // POST json to path ("/v3/...") on node i, or as above when i is -1: the body of a 200
  // answer, nullopt otherwise. For what the helpers above do not cover (leases...).
  std::optional<std::string> Post(const std::string& path, const std::string& json, int i = -1);

  // The end of node i's log (all its runs), for failure messages.
  std::string LogTail(int i) const;

 private:
  struct Node {
    int client_port = -1;
    int peer_port = -1;
    bool stopped = false;
    std::unique_ptr<ChildProcess> process;
  };

  // Starts a new empty cluster (on new free ports, or the same), then WaitHealthy; retries
  // when a port was taken meanwhile. ADD_FAILURE()s.
  bool Create(bool new_ports);
  void Spawn(int i, bool existing);
  std::string DataDir(int i) const { return dir_ + "/n" + std::to_string(i); }
  std::string LogPath(int i) const { return dir_ + "/n" + std::to_string(i) + ".log"; }
  std::string HttpUrl(int i, const std::string& path) const;  // node i's gateway
  std::string AllLogTails() const;

  Options options_;
  std::string etcd_path_;
  std::string dir_;
  std::string token_;  // --initial-cluster-token: a new one per Create
  int generation_ = 0;
  Node nodes_[kNodes];
  bool ready_ = false;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_ETCD_CLUSTER_H_
