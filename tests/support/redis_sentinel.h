// A real, throwaway Redis Sentinel deployment for integration tests: one master, two replicas
// (REPLICAOF the master) and three sentinels (`redis-server sentinel.conf --sentinel`: Debian's
// redis-server package ships no redis-sentinel binary) monitoring it with quorum 2.
//
//   dlock_test::RedisSentinelGroup group;                 // starts it, or ADD_FAILURE()s
//   ASSERT_TRUE(group.ready());
//   std::string url = "redis-sentinel://" + group.sentinels() + "/" + group.master_name();
//   group.data_node(group.CurrentMaster()).Cli({"SET", "k", "v"});
//   std::string why;
//   int promoted = group.KillMasterAndAwaitFailover(std::chrono::seconds(20), &why);
//   ASSERT_GE(promoted, 0) << why;
//
// Every data node is a RedisServer (free loopback port, own temp dir, no persistence, always
// stopped); every sentinel is a ChildProcess on a free loopback port with its config file in the
// group's own temp dir (a sentinel rewrites its config: the file is its state, kept across
// RestartSentinel). Everything is stopped by pid when the group is destroyed, and dies with the
// thread that created it (PR_SET_PDEATHSIG): create the group on the test's own thread.
//
// A TLS group (certificates from tls_certs.h):
//
//   dlock_test::TestCertificates certs;
//   RedisSentinelGroup::Options options;
//   options.tls = dlock_test::RedisTls{.certs = &certs};
//   dlock_test::RedisSentinelGroup group(options);
//   std::string url = "redis-sentinel://" + group.sentinels() + "/" + group.master_name() +
//                     "?tls=1&ca=" + certs.ca_cert();
//
// Timing (redis 7.0.15, loopback, 2 CPUs): the group is ready in about 1.2 s (each sentinel's
// config names its peers, `sentinel known-sentinel`, instead of waiting for hello messages,
// which are published every 2 s; the remaining second is a sentinel retrying a peer that was not
// listening yet, and a replica's first once-a-second ACK). After a SIGKILL of the master, with
// the default down_after_ms of 1500, every sentinel names the promoted replica after ~2.7-2.8 s,
// and KillMasterAndAwaitFailover returns (everything settled) after ~4.1-4.3 s.
//
// What Sentinel does that a client must expect (observed on redis 7.0.15, see
// redis_sentinel_test.cc):
// - The failover leader answers SENTINEL GET-MASTER-ADDR-BY-NAME with the promoted replica as
//   soon as it sees the promotion (before the other replica is reconfigured and before it
//   publishes +switch-master); the other sentinels switch when the leader's hello reaches them,
//   within about 100 ms. Before the promotion every sentinel keeps naming the dead master: the
//   answer is never nil during a failover.
// - +switch-master is published on each sentinel's own pub/sub (channel "+switch-master", payload
//   "<master-name> <old-ip> <old-port> <new-ip> <new-port>") when that sentinel switches: the
//   leader only at the end of the failover (after +slave-reconf-done, ~1 s after it already
//   names the new master), the others on "+config-update-from" (often before the leader).
// - When it promotes a replica or points a replica at the new master, Sentinel kills that
//   node's normal AND pub/sub client connections (CLIENT KILL TYPE normal / pubsub).
// - A node that answers ROLE master while the sentinels name another (e.g. a restarted old
//   master: data_node(i).Restart() brings it back empty, as a master) stays a master until a
//   sentinel converts it (+convert-to-slave; seen ~10 s later): two nodes accept writes
//   meanwhile. RestartDataNodeAsReplica() skips that window.
// - down-after-milliseconds must stay well above 1000: Sentinel reconnects a link at most once
//   per second, so with 1000 a freshly switched master can be flagged down at once and a
//   second, spurious failover follows (seen with 1000).
#ifndef DLOCK_TESTS_SUPPORT_REDIS_SENTINEL_H_
#define DLOCK_TESTS_SUPPORT_REDIS_SENTINEL_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/child_process.h"
#include "support/redis_server.h"

namespace dlock_test {

struct RedisSentinelOptions {
  std::string master_name = "dlock-master";
  // Non-empty: requirepass + masterauth on every data node, `sentinel auth-pass` on the sentinels.
  std::string master_password;
  // Non-empty: requirepass on every sentinel (and `sentinel sentinel-pass`, so they still talk to
  // each other). SentinelCli() authenticates with it unless told not to.
  std::string sentinel_password;
  // `sentinel down-after-milliseconds`: keep it above ~1200 (see the header comment).
  int down_after_ms = 1500;
  // `sentinel failover-timeout`: a failed election is retried after twice this; a promotion not
  // seen within it aborts the failover.
  int failover_timeout_ms = 3000;
  // Extra redis-server arguments for every data node.
  std::vector<std::string> data_node_args;
  // Set: TLS everywhere, with these settings (RedisTls). Every data node is a TLS RedisServer
  // replicating over TLS (--tls-replication yes); every sentinel listens with TLS only
  // (port 0, tls-port) and talks TLS to the data nodes and to its peers (tls-replication yes,
  // which is what a sentinel's outgoing links follow). The helpers below speak TLS then.
  std::optional<RedisTls> tls = {};
};

class RedisSentinelGroup {
 public:
  using Options = RedisSentinelOptions;
  static constexpr int kDataNodes = 3;  // 0 = the initial master, 1 and 2 its replicas
  static constexpr int kSentinels = 3;
  static constexpr int kQuorum = 2;

  // Starts the data nodes, waits until both replicas are in sync, starts the sentinels and waits
  // (up to 20 s) until each knows the master, its 2 replicas (up, linked) and its 2 peers. On
  // failure, ADD_FAILURE() with the reason (and the sentinels' logs) and ready() is false.
  explicit RedisSentinelGroup(Options options = {});
  // Stops every sentinel, then every data node (by pid), and removes the temp dir. If the test
  // has failed, the tail of each sentinel's log is printed first.
  ~RedisSentinelGroup();
  RedisSentinelGroup(const RedisSentinelGroup&) = delete;
  RedisSentinelGroup& operator=(const RedisSentinelGroup&) = delete;

  bool ready() const { return ready_; }
  const std::string& master_name() const { return options_.master_name; }
  const Options& options() const { return options_; }

  // Data node i (0..kDataNodes-1): Cli() authenticates with the master password. Killing or
  // restarting one directly is allowed (see RestartDataNodeAsReplica for a clean rejoin).
  RedisServer& data_node(int i) { return *data_[i]; }
  // The data node listening on that port, or -1.
  int DataNodeByPort(int port) const;

  // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3": every sentinel (running or not) in index order, as
  // a redis-sentinel:// URL's host list.
  std::string sentinels() const;
  int sentinel_port(int s) const { return sentinels_[s].port; }
  std::string sentinel_address(int s) const;  // "127.0.0.1:P"
  bool sentinel_running(int s) const;
  pid_t sentinel_pid(int s) const;
  std::string sentinel_log(int s) const;  // path of its log file

  // The data node every answering sentinel names as master (SENTINEL GET-MASTER-ADDR-BY-NAME);
  // -1 when none answers, they disagree, or one names an address that is not a data node.
  // Stopped and paused sentinels are not asked; one that cannot be reached does not count.
  int CurrentMaster();
  // The data node sentinel s names as master, or -1 (no answer, nil, not a data node).
  int MasterNamedBy(int s);

  // SIGKILLs the current master, then waits up to timeout until every running sentinel names
  // the same new master and has switched to it (SENTINEL MASTER shows its address, flags
  // exactly "master": no failover in progress), that node answers ROLE master, and every other
  // running data node is its replica and in sync. Returns its index; -1 (and why) on timeout.
  int KillMasterAndAwaitFailover(std::chrono::milliseconds timeout, std::string* why);

  // Restarts data node i (empty, same port), makes it a replica of the current master at once
  // (instead of waiting ~10 s for a sentinel to convert it) and waits until it is in sync and
  // every running sentinel lists it as an up replica. False (and why) on failure.
  bool RestartDataNodeAsReplica(int i, std::chrono::milliseconds timeout, std::string* why);

  // Sentinel s: SIGTERM (SIGKILL after 2 s) + reap; Kill: SIGKILL + reap.
  void StopSentinel(int s);
  void KillSentinel(int s);
  // Starts sentinel s again on the same port with its (rewritten) config: it remembers the
  // master, replicas, peers and epochs. True once it answers PING and knows the master, its
  // replicas and peers again (up to 20 s); otherwise ADD_FAILURE() with the reason and false.
  bool RestartSentinel(int s);
  // SIGSTOP / SIGCONT: a sentinel that accepts connections (the kernel does) but never answers.
  void PauseSentinel(int s);
  void ResumeSentinel(int s);

  // Runs one command on sentinel s over a fresh connection, rendered as RedisServer::Cli does
  // ("ERR: ..." for an error reply, arrays flattened with "\n", "CONNECT FAILED: ..."). With
  // authenticate, AUTHs first with the sentinel password (when there is one).
  std::string SentinelCli(int s, const std::vector<std::string>& args,
                          bool authenticate = true) const;

  // Whether every running replica of the current master has everything written to it so far:
  // publishes a no-op on the master (PUBLISH is replicated) and WAITs on that connection for
  // every running replica to acknowledge it. (WAIT over RedisServer::Cli proves nothing: a
  // fresh connection has written nothing, so WAIT returns at once. And master_link_status:up
  // alone is not enough: after a diskless sync the master streams writes to a replica only once
  // it acknowledged the RDB.) False and why when they did not within timeout.
  bool WaitReplicated(std::chrono::milliseconds timeout, std::string* why);

  // Waits up to timeout until every running sentinel knows the master named by CurrentMaster(),
  // with flags exactly "master", its other running data nodes as up replicas and its running
  // peers as up; that node answers ROLE master; and every other running data node is its
  // replica, in sync (master_link_status:up, and WaitReplicated). why says otherwise.
  bool WaitSettled(std::chrono::milliseconds timeout, std::string* why);

 private:
  struct Sentinel {
    int port = -1;
    std::string id;  // its run id (`sentinel myid`), 40 hex digits
    std::string dir;
    std::unique_ptr<ChildProcess> process;
    bool paused = false;
  };

  bool StartDataNodes(std::string* why);
  bool StartSentinels(std::string* why);  // first start: free ports, fresh configs
  bool SpawnSentinel(int s, std::string* why);  // runs it on its port with its config
  bool WaitSentinelUp(int s, std::chrono::milliseconds timeout, std::string* why);
  bool WriteSentinelConfig(int s, std::string* why);
  // Nothing wrong with sentinel s's view of the deployment with `master` as the master: ""; else
  // what is wrong. With replica_links, also what it last heard from each replica (master port,
  // link ok): a sentinel refreshes that only every 10 s outside a failover.
  std::string SentinelProblem(int s, int master, bool replica_links);
  std::string ReplicaProblem(int replica, int master);
  // "" when every running data node but master acknowledged a write on master within timeout.
  std::string ReplicationProblem(int master, std::chrono::milliseconds timeout);
  // What keeps the deployment from being settled (see WaitSettled), "" when it is; master is
  // set to CurrentMaster().
  std::string SettledProblem(int* master);
  std::string SentinelLogs() const;
  // The data node sentinel s names as master (-1: nil, no answer, or not a data node); answered
  // is false when it gave no address (not running, unreachable, error, nil).
  int AskMaster(int s, bool* answered);

  Options options_;
  std::string redis_path_;
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> data_;
  std::vector<Sentinel> sentinels_;
  bool ready_ = false;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_REDIS_SENTINEL_H_
