#include "support/redis_sentinel.h"
#include "support/harness_util.h"
#include "support/redis_wire.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

namespace dlock_test {
namespace {

using wire::Connection;
using wire::Render;
using wire::ReplyPtr;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr int kSentinelStartAttempts = 5;
constexpr auto kSentinelUpTimeout = std::chrono::seconds(5);
constexpr auto kSentinelReadyTimeout = std::chrono::seconds(20);
constexpr int kPollMs = 50;


// One command on 127.0.0.1:port (over TLS when tls is set), AUTHenticating first when password
// is set. The reply, or null and why (rendered as RedisServer::Cli does: "CONNECT FAILED: ...",
// "IO FAILED: ...", "ERR: ...").
ReplyPtr Run(int port, const std::optional<RedisTls>& tls, const std::string& password,
             const std::vector<std::string>& args, int io_timeout_ms, std::string* why) {
  Connection c(port, "", wire::HarnessTls(tls ? tls->certs : nullptr), password, 1000,
               io_timeout_ms);
  ReplyPtr r = c.ok() ? c.Command(args) : nullptr;
  if (!r) *why = c.error();
  return r;
}

// A flat [key, value, key, value...] array (SENTINEL MASTER, an element of SENTINEL REPLICAS).
std::map<std::string, std::string> Fields(const redisReply* r) {
  std::map<std::string, std::string> out;
  if (r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    if (r->element[i]->type == REDIS_REPLY_STRING || r->element[i]->type == REDIS_REPLY_STATUS) {
      out[Render(r->element[i])] = Render(r->element[i + 1]);
    }
  }
  return out;
}

// The value of "name:value" in INFO text, "" if absent.
std::string InfoField(const std::string& info, const std::string& name) {
  const std::string key = name + ":";
  for (size_t at = 0; at < info.size();) {
    size_t end = info.find('\n', at);
    if (end == std::string::npos) end = info.size();
    std::string line = info.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
    at = end + 1;
  }
  return "";
}

// A config-file token: double-quoted, with the escapes redis's sdssplitargs understands.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string MakeTempDir(std::string* why) {
  std::string base = "/tmp";
  if (const char* t = getenv("TMPDIR"); t && *t && strlen(t) < 60) base = t;
  std::string tmpl = base + "/dlock-sentinel-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    *why = "mkdtemp(" + tmpl + ") failed: " + strerror(errno);
    return "";
  }
  std::error_code ec;
  fs::path abs = fs::absolute(buf.data(), ec);
  return ec ? std::string(buf.data()) : abs.string();
}

std::string Ms(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<milliseconds>(d).count()) + " ms";
}

}  // namespace

RedisSentinelGroup::RedisSentinelGroup(Options options) : options_(std::move(options)) {
  sentinels_.resize(kSentinels);
  redis_path_ = FindOnPath("redis-server", "DLOCK_REDIS_SERVER");
  if (redis_path_.empty()) {
    ADD_FAILURE() << "RedisSentinelGroup: redis-server not found on PATH";
    return;
  }
  std::string why;
  dir_ = MakeTempDir(&why);
  if (dir_.empty()) {
    ADD_FAILURE() << "RedisSentinelGroup: " << why;
    return;
  }
  if (!StartDataNodes(&why)) {
    ADD_FAILURE() << "RedisSentinelGroup: " << why;
    return;
  }
  // The sentinels start once the replicas are linked: a sentinel learns the replicas from the
  // master's INFO, which it asks for at once on connecting and then only every 10 s.
  if (!StartSentinels(&why)) {
    ADD_FAILURE() << "RedisSentinelGroup: " << why << "\n" << SentinelLogs();
    return;
  }
  // Meanwhile (each can take a second): the sentinels connect to each other (a sentinel that
  // tried a peer before it listened retries a second later), and the master starts streaming
  // writes to each replica (once the replica acknowledged the RDB, on its once-a-second cron).
  const auto until = Clock::now() + kSentinelReadyTimeout;
  std::string bad;
  bool replicated = false;
  while (true) {
    bad.clear();
    for (int r = 1; r < kDataNodes && bad.empty(); ++r) bad = ReplicaProblem(r, 0);
    if (bad.empty() && !replicated) {
      bad = ReplicationProblem(0, milliseconds(100));
      replicated = bad.empty();
    }
    for (int s = 0; s < kSentinels && bad.empty(); ++s) bad = SentinelProblem(s, 0, true);
    if (bad.empty()) {
      ready_ = true;
      return;
    }
    if (Clock::now() >= until) break;
    SleepMs(kPollMs);
  }
  ADD_FAILURE() << "RedisSentinelGroup: not ready within " << Ms(kSentinelReadyTimeout) << ": " << bad
                << "\n"
                << SentinelLogs();
}

RedisSentinelGroup::~RedisSentinelGroup() {
  if (::testing::Test::HasFailure() && !dir_.empty()) {
    fprintf(stderr, "%s\n", SentinelLogs().c_str());
  }
  // Every process is told at once (each takes up to a 100 ms cron tick to act on SIGTERM), then
  // each is stopped and reaped in turn (SIGKILL after 2 s).
  for (Sentinel& sn : sentinels_) {
    if (sn.process) sn.process->Signal(SIGTERM);
  }
  for (auto& node : data_) {
    if (node->running()) kill(node->pid(), SIGTERM);  // our unreaped child: the pid is its own
  }
  for (int s = 0; s < static_cast<int>(sentinels_.size()); ++s) StopSentinel(s);
  data_.clear();  // each RedisServer stops (and reaps) its node
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

bool RedisSentinelGroup::StartDataNodes(std::string* why) {
  std::vector<std::string> args = {
      // A replica that never finished its first sync is not promoted: sync at once (the default
      // waits 5 s for more replicas before streaming).
      "--repl-diskless-sync-delay", "0"};
  if (!options_.master_password.empty()) {
    args.insert(args.end(), {"--requirepass", options_.master_password, "--masterauth",
                             options_.master_password});
  }
  if (options_.tls) args.insert(args.end(), {"--tls-replication", "yes"});
  args.insert(args.end(), options_.data_node_args.begin(), options_.data_node_args.end());
  for (int i = 0; i < kDataNodes; ++i) {
    data_.push_back(options_.tls ? std::make_unique<RedisServer>(*options_.tls, args)
                                 : std::make_unique<RedisServer>(args));
    if (!data_.back()->running()) {
      *why = "data node " + std::to_string(i) + " did not start";  // RedisServer said why
      return false;
    }
  }
  // REPLICAOF at run time rather than --replicaof: the replica connects at once instead of on
  // its next replication cron tick (up to 1 s), and a restarted node comes back as a master, as
  // a crashed master with its original config would.
  const std::string master_port = std::to_string(data_[0]->port());
  for (int i = 1; i < kDataNodes; ++i) {
    std::string r = data_[i]->Cli({"REPLICAOF", "127.0.0.1", master_port});
    if (r != "OK") {
      *why = "REPLICAOF on data node " + std::to_string(i) + " answered " + r;
      return false;
    }
  }
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (true) {
    std::string bad;
    for (int i = 1; i < kDataNodes && bad.empty(); ++i) bad = ReplicaProblem(i, 0);
    if (bad.empty()) return true;
    if (Clock::now() >= until) {
      *why = "replicas not in sync within 10 s: " + bad;
      return false;
    }
    SleepMs(20);
  }
}

bool RedisSentinelGroup::WriteSentinelConfig(int s, std::string* why) {
  const Sentinel& sn = sentinels_[s];
  const std::string name = Quoted(options_.master_name);
  std::string conf;
  if (options_.tls) {
    // TLS only; tls-replication makes its links to the data nodes and its peers TLS too.
    conf += "port 0\n";
    conf += "tls-port " + std::to_string(sn.port) + "\n";
    conf += "tls-replication yes\n";
    for (const auto& [directive, value] : options_.tls->ServerConfig()) {
      conf += directive + " " + Quoted(value) + "\n";
    }
  } else {
    conf += "port " + std::to_string(sn.port) + "\n";
  }
  conf += "bind 127.0.0.1\n";
  conf += "protected-mode no\n";
  conf += "daemonize no\n";
  conf += "dir " + Quoted(sn.dir) + "\n";
  conf += "logfile " + Quoted(sn.dir + "/sentinel.log") + "\n";
  if (!options_.sentinel_password.empty()) {
    conf += "requirepass " + Quoted(options_.sentinel_password) + "\n";
    // Sentinels vote over direct connections to each other: they need the password too.
    conf += "sentinel sentinel-pass " + Quoted(options_.sentinel_password) + "\n";
  }
  conf += "sentinel announce-ip 127.0.0.1\n";
  conf += "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(data_[0]->port()) + " " +
          std::to_string(kQuorum) + "\n";
  if (!options_.master_password.empty()) {
    conf += "sentinel auth-pass " + name + " " + Quoted(options_.master_password) + "\n";
  }
  conf += "sentinel down-after-milliseconds " + name + " " +
          std::to_string(options_.down_after_ms) + "\n";
  conf += "sentinel failover-timeout " + name + " " + std::to_string(options_.failover_timeout_ms) +
          "\n";
  conf += "sentinel parallel-syncs " + name + " 1\n";
  // Each sentinel knows its peers from the start (as a rewritten config records them), instead
  // of discovering them through hello messages, which are published every 2 s.
  conf += "sentinel myid " + sn.id + "\n";
  for (int o = 0; o < kSentinels; ++o) {
    if (o == s) continue;
    conf += "sentinel known-sentinel " + name + " 127.0.0.1 " +
            std::to_string(sentinels_[o].port) + " " + sentinels_[o].id + "\n";
  }
  const std::string path = sn.dir + "/sentinel.conf";
  std::ofstream out(path, std::ios::trunc);
  out << conf;
  out.close();
  if (!out) {
    *why = "cannot write " + path;
    return false;
  }
  return true;
}

bool RedisSentinelGroup::StartSentinels(std::string* why) {
  std::random_device random;
  for (int s = 0; s < kSentinels; ++s) {
    Sentinel& sn = sentinels_[s];
    sn.dir = dir_ + "/sentinel" + std::to_string(s);
    std::error_code ec;
    fs::create_directories(sn.dir, ec);
    if (ec) {
      *why = "cannot create " + sn.dir + ": " + ec.message();
      return false;
    }
    static const char kHex[] = "0123456789abcdef";
    sn.id.clear();
    for (int k = 0; k < 40; ++k) sn.id += kHex[random() % 16];
  }
  for (int attempt = 1; attempt <= kSentinelStartAttempts; ++attempt) {
    std::set<int> ports;
    for (int s = 0; s < kSentinels; ++s) {
      int port = FreeTcpPort();
      while (port > 0 && ports.count(port)) port = FreeTcpPort();
      if (port <= 0) {
        *why = std::string("no free TCP port on 127.0.0.1: ") + strerror(errno);
        return false;
      }
      ports.insert(port);
      sentinels_[s].port = port;
    }
    // Fresh configs each attempt: a sentinel that ran rewrote its own.
    for (int s = 0; s < kSentinels; ++s) {
      if (!WriteSentinelConfig(s, why)) return false;
    }
    bool up = true;
    for (int s = 0; s < kSentinels && up; ++s) up = SpawnSentinel(s, why);
    for (int s = 0; s < kSentinels && up; ++s) {
      if (!WaitSentinelUp(s, kSentinelUpTimeout, why)) {
        *why = "sentinel " + std::to_string(s) + ": " + *why;
        up = false;
      }
    }
    if (up) return true;
    bool port_taken = false;
    for (int s = 0; s < kSentinels; ++s) {
      if (sentinels_[s].process) sentinels_[s].process->Kill();
      std::string log = ReadTail(sentinels_[s].dir + "/sentinel.log", 4096) +
                        ReadTail(sentinels_[s].dir + "/stdout.log", 4096);
      port_taken |= log.find("Address already in use") != std::string::npos;
    }
    // Only a port taken between FreeTcpPort() and the bind is worth another try.
    if (!port_taken || attempt == kSentinelStartAttempts) return false;
    for (int s = 0; s < kSentinels; ++s) {
      std::error_code ec;
      fs::remove(sentinel_log(s), ec);
      fs::remove(sentinels_[s].dir + "/stdout.log", ec);
    }
  }
  return false;
}

bool RedisSentinelGroup::SpawnSentinel(int s, std::string* why) {
  Sentinel& sn = sentinels_[s];
  sn.paused = false;
  sn.process = std::make_unique<ChildProcess>(
      std::vector<std::string>{redis_path_, sn.dir + "/sentinel.conf", "--sentinel"},
      ChildOptions::LogTo(sn.dir + "/stdout.log"));
  if (!sn.process->started()) {
    *why = sn.process->error();
    return false;
  }
  return true;
}

bool RedisSentinelGroup::WaitSentinelUp(int s, std::chrono::milliseconds timeout,
                                        std::string* why) {
  Sentinel& sn = sentinels_[s];
  const auto until = Clock::now() + timeout;
  std::string last = "no answer yet";
  while (Clock::now() < until) {
    if (int code = sn.process->Wait(milliseconds(0)); code != -1) {
      *why = "redis-server --sentinel " + DescribeExitCode(code) + " before answering PING";
      return false;
    }
    std::string err;
    ReplyPtr info =
        Run(sn.port, options_.tls, options_.sentinel_password, {"INFO", "server"}, 1000, &err);
    if (info && info->type == REDIS_REPLY_STRING) {
      std::string text = Render(info.get());
      // Ours, not another test's process that raced us to the port.
      if (InfoField(text, "process_id") == std::to_string(sn.process->pid()) &&
          InfoField(text, "redis_mode") == "sentinel") {
        return true;
      }
      last = "port " + std::to_string(sn.port) + " answered by another process";
    } else {
      last = info ? Render(info.get()) : err;
    }
    SleepMs(20);
  }
  *why = "no answer within " + Ms(timeout) + " (" + last + ")";
  return false;
}

std::string RedisSentinelGroup::SentinelProblem(int s, int master, bool replica_links) {
  const Sentinel& sn = sentinels_[s];
  const std::string who = "sentinel " + std::to_string(s) + " (" + sentinel_address(s) + ")";
  std::string why;
  ReplyPtr m = Run(sn.port, options_.tls, options_.sentinel_password,
                   {"SENTINEL", "MASTER", options_.master_name}, 1000, &why);
  if (!m) return who + ": " + why;
  if (m->type != REDIS_REPLY_ARRAY) return who + ": SENTINEL MASTER answered " + Render(m.get());
  auto fields = Fields(m.get());
  const std::string want_port = std::to_string(data_[master]->port());
  if (fields["ip"] != "127.0.0.1" || fields["port"] != want_port) {
    return who + " monitors " + fields["ip"] + ":" + fields["port"] + ", not data node " +
           std::to_string(master) + " (port " + want_port + ")";
  }
  if (fields["flags"] != "master") return who + ": master flags are " + fields["flags"];

  ReplyPtr replicas = Run(sn.port, options_.tls, options_.sentinel_password,
                          {"SENTINEL", "REPLICAS", options_.master_name}, 1000, &why);
  if (!replicas) return who + ": " + why;
  if (replicas->type != REDIS_REPLY_ARRAY) {
    return who + ": SENTINEL REPLICAS answered " + Render(replicas.get());
  }
  for (int d = 0; d < kDataNodes; ++d) {
    if (d == master || !data_[d]->running()) continue;
    bool found = false;
    for (size_t k = 0; k < replicas->elements && !found; ++k) {
      auto r = Fields(replicas->element[k]);
      if (r["port"] != std::to_string(data_[d]->port())) continue;
      found = true;
      if (r["flags"] != "slave") {
        return who + ": replica " + std::to_string(d) + " has flags " + r["flags"];
      }
      if (!replica_links) continue;
      if (r["master-port"] != want_port) {
        return who + ": replica " + std::to_string(d) + " reports master port " +
               r["master-port"];
      }
      if (r["master-link-status"] != "ok") {
        return who + ": replica " + std::to_string(d) + " master-link-status " +
               r["master-link-status"];
      }
    }
    if (!found) return who + " does not know replica " + std::to_string(d) + " yet";
  }

  ReplyPtr peers = Run(sn.port, options_.tls, options_.sentinel_password,
                       {"SENTINEL", "SENTINELS", options_.master_name}, 1000, &why);
  if (!peers) return who + ": " + why;
  if (peers->type != REDIS_REPLY_ARRAY) {
    return who + ": SENTINEL SENTINELS answered " + Render(peers.get());
  }
  for (int o = 0; o < kSentinels; ++o) {
    if (o == s || !sentinel_running(o) || sentinels_[o].paused) continue;
    bool found = false;
    for (size_t k = 0; k < peers->elements && !found; ++k) {
      auto p = Fields(peers->element[k]);
      if (p["port"] != std::to_string(sentinels_[o].port)) continue;
      found = true;
      // Not "sentinel" exactly: a peer keeps "master_down" (its last answer to "is the master
      // down?") for 5 s after the failover.
      const std::string& flags = p["flags"];
      if (flags.find("s_down") != std::string::npos ||
          flags.find("disconnected") != std::string::npos) {
        return who + ": peer sentinel " + std::to_string(o) + " has flags " + flags;
      }
    }
    if (!found) return who + " does not know sentinel " + std::to_string(o) + " yet";
  }
  return "";
}

std::string RedisSentinelGroup::ReplicaProblem(int replica, int master) {
  std::string info = data_[replica]->Cli({"INFO", "replication"});
  const std::string who = "data node " + std::to_string(replica);
  if (InfoField(info, "role") != "slave") {
    return who + " is not a replica: " + info.substr(0, 200);
  }
  if (InfoField(info, "master_port") != std::to_string(data_[master]->port())) {
    return who + " replicates port " + InfoField(info, "master_port") + ", not data node " +
           std::to_string(master);
  }
  if (InfoField(info, "master_link_status") != "up") {
    return who + " is not in sync with data node " + std::to_string(master) + " yet";
  }
  return "";
}

int RedisSentinelGroup::DataNodeByPort(int port) const {
  for (int d = 0; d < static_cast<int>(data_.size()); ++d) {
    if (data_[d]->port() == port) return d;
  }
  return -1;
}

std::string RedisSentinelGroup::sentinels() const {
  std::string out;
  for (int s = 0; s < static_cast<int>(sentinels_.size()); ++s) {
    out += (out.empty() ? "" : ",") + sentinel_address(s);
  }
  return out;
}

std::string RedisSentinelGroup::sentinel_address(int s) const {
  return "127.0.0.1:" + std::to_string(sentinels_[s].port);
}

bool RedisSentinelGroup::sentinel_running(int s) const {
  return sentinels_[s].process && sentinels_[s].process->pid() > 0;
}

pid_t RedisSentinelGroup::sentinel_pid(int s) const {
  return sentinels_[s].process ? sentinels_[s].process->pid() : -1;
}

std::string RedisSentinelGroup::sentinel_log(int s) const {
  return sentinels_[s].dir + "/sentinel.log";
}

int RedisSentinelGroup::AskMaster(int s, bool* answered) {
  *answered = false;
  if (!sentinel_running(s) || sentinels_[s].port <= 0) return -1;
  std::string why;
  ReplyPtr r = Run(sentinels_[s].port, options_.tls, options_.sentinel_password,
                   {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name}, 1000, &why);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return -1;  // no answer, nil
  *answered = true;
  if (Render(r->element[0]) != "127.0.0.1") return -1;
  return DataNodeByPort(atoi(Render(r->element[1]).c_str()));
}

int RedisSentinelGroup::MasterNamedBy(int s) {
  bool answered = false;
  return AskMaster(s, &answered);
}

int RedisSentinelGroup::CurrentMaster() {
  int named = -1;
  for (int s = 0; s < kSentinels; ++s) {
    if (!sentinel_running(s) || sentinels_[s].paused) continue;
    bool answered = false;
    int m = AskMaster(s, &answered);
    if (!answered) continue;
    if (m < 0 || (named >= 0 && m != named)) return -1;  // not a data node, or disagreement
    named = m;
  }
  return named;
}

std::string RedisSentinelGroup::SettledProblem(int* master_out) {
  const int master = CurrentMaster();
  *master_out = master;
  if (master < 0) return "the sentinels do not agree on a master";
  if (!data_[master]->running()) {
    return "the sentinels name data node " + std::to_string(master) + ", which is not running";
  }
  if (std::string role = data_[master]->Cli({"ROLE"}); role.rfind("master\n", 0) != 0) {
    return "data node " + std::to_string(master) + " answers ROLE " + role.substr(0, 60);
  }
  for (int s = 0; s < kSentinels; ++s) {
    if (!sentinel_running(s) || sentinels_[s].paused) continue;
    if (std::string bad = SentinelProblem(s, master, false); !bad.empty()) return bad;
  }
  for (int d = 0; d < kDataNodes; ++d) {
    if (d == master || !data_[d]->running()) continue;
    if (std::string bad = ReplicaProblem(d, master); !bad.empty()) return bad;
  }
  return ReplicationProblem(master, milliseconds(500));
}

std::string RedisSentinelGroup::ReplicationProblem(int master, milliseconds timeout) {
  int replicas = 0;
  for (int d = 0; d < kDataNodes; ++d) replicas += d != master && data_[d]->running();
  const std::string who = "data node " + std::to_string(master);
  // One connection for all: WAIT counts the acknowledgements of this connection's writes.
  Connection c(data_[master]->port(), "",
               wire::HarnessTls(options_.tls ? options_.tls->certs : nullptr),
               options_.master_password, 1000, static_cast<int>(timeout.count()) + 2000);
  if (!c.ok()) return who + ": " + c.error();
  ReplyPtr r = c.Command({"PUBLISH", "__dlock_test__:replication-probe", "1"});
  if (r && r->type != REDIS_REPLY_ERROR) {
    r = c.Command({"WAIT", std::to_string(replicas), std::to_string(timeout.count())});
  }
  if (!r) return who + ": " + c.error();
  if (r->type == REDIS_REPLY_ERROR) return who + ": " + Render(r.get());
  if (r->type != REDIS_REPLY_INTEGER || r->integer < replicas) {
    return who + ": only " + Render(r.get()) + " of its " + std::to_string(replicas) +
           " replicas acknowledged a write within " + Ms(timeout);
  }
  return "";
}

bool RedisSentinelGroup::WaitReplicated(milliseconds timeout, std::string* why) {
  const int master = CurrentMaster();
  if (master < 0 || !data_[master]->running()) {
    *why = "the sentinels name no running master";
    return false;
  }
  *why = ReplicationProblem(master, timeout);
  return why->empty();
}

bool RedisSentinelGroup::WaitSettled(std::chrono::milliseconds timeout, std::string* why) {
  const auto until = Clock::now() + timeout;
  while (true) {
    int master = -1;
    std::string bad = SettledProblem(&master);
    if (bad.empty()) return true;
    if (Clock::now() >= until) {
      *why = "not settled within " + Ms(timeout) + ": " + bad;
      return false;
    }
    SleepMs(kPollMs);
  }
}

int RedisSentinelGroup::KillMasterAndAwaitFailover(std::chrono::milliseconds timeout,
                                                   std::string* why) {
  const int old = CurrentMaster();
  if (old < 0 || !data_[old]->running()) {
    *why = "no running master named by the sentinels to kill";
    return -1;
  }
  const auto until = Clock::now() + timeout;
  data_[old]->Kill();
  std::string bad;
  while (true) {
    int master = -1;
    bad = SettledProblem(&master);
    if (bad.empty()) return master;  // never `old`: it is not running
    if (Clock::now() >= until) break;
    SleepMs(kPollMs);
  }
  *why = "no failover from data node " + std::to_string(old) + " within " + Ms(timeout) + ": " +
         bad + "\n" + SentinelLogs();
  return -1;
}

bool RedisSentinelGroup::RestartDataNodeAsReplica(int i, std::chrono::milliseconds timeout,
                                                  std::string* why) {
  const int master = CurrentMaster();
  if (master < 0 || master == i || !data_[master]->running()) {
    *why = "no running master other than data node " + std::to_string(i) + " to replicate";
    return false;
  }
  if (!data_[i]->Restart()) {
    *why = "data node " + std::to_string(i) + " did not restart";
    return false;
  }
  std::string r = data_[i]->Cli({"REPLICAOF", "127.0.0.1", std::to_string(data_[master]->port())});
  if (r != "OK") {
    *why = "REPLICAOF answered " + r;
    return false;
  }
  return WaitSettled(timeout, why);
}

void RedisSentinelGroup::StopSentinel(int s) {
  Sentinel& sn = sentinels_[s];
  if (!sn.process) return;
  if (sn.paused) sn.process->Signal(SIGCONT);
  sn.paused = false;
  sn.process->Stop(SIGTERM, milliseconds(2000));
}

void RedisSentinelGroup::KillSentinel(int s) {
  Sentinel& sn = sentinels_[s];
  if (!sn.process) return;
  sn.paused = false;
  sn.process->Kill();
}

bool RedisSentinelGroup::RestartSentinel(int s) {
  Sentinel& sn = sentinels_[s];
  if (sn.dir.empty() || sn.port <= 0) {
    ADD_FAILURE() << "RedisSentinelGroup::RestartSentinel(" << s << "): never started";
    return false;
  }
  StopSentinel(s);
  std::string why;
  bool up = false;
  for (int attempt = 1; attempt <= 3 && !up; ++attempt) {
    up = SpawnSentinel(s, &why) && WaitSentinelUp(s, kSentinelUpTimeout, &why);
    if (!up) {
      if (sn.process) sn.process->Kill();
      SleepMs(200);  // the port may be briefly taken by someone else: try the same port again
    }
  }
  if (up) {
    const auto until = Clock::now() + kSentinelReadyTimeout;
    while (true) {
      int master = CurrentMaster();
      why = master < 0 ? "the sentinels do not agree on a master"
                       : SentinelProblem(s, master, false);
      if (why.empty()) return true;
      if (Clock::now() >= until) break;
      SleepMs(kPollMs);
    }
  }
  ADD_FAILURE() << "RedisSentinelGroup::RestartSentinel(" << s << ") on port " << sn.port << ": "
                << why << "\n"
                << SentinelLogs();
  return false;
}

void RedisSentinelGroup::PauseSentinel(int s) {
  Sentinel& sn = sentinels_[s];
  if (!sentinel_running(s) || sn.paused) return;
  sn.process->Signal(SIGSTOP);
  sn.paused = true;
}

void RedisSentinelGroup::ResumeSentinel(int s) {
  Sentinel& sn = sentinels_[s];
  if (!sentinel_running(s) || !sn.paused) return;
  sn.process->Signal(SIGCONT);
  sn.paused = false;
}

std::string RedisSentinelGroup::SentinelCli(int s, const std::vector<std::string>& args,
                                            bool authenticate) const {
  if (sentinels_[s].port <= 0) return "CONNECT FAILED: the sentinel was never started";
  std::string why;
  ReplyPtr r = Run(sentinels_[s].port, options_.tls, authenticate ? options_.sentinel_password : "",
                   args, 10000, &why);
  return r ? Render(r.get()) : why;
}

std::string RedisSentinelGroup::SentinelLogs() const {
  std::string out;
  for (int s = 0; s < static_cast<int>(sentinels_.size()); ++s) {
    if (sentinels_[s].dir.empty()) continue;
    out += "--- sentinel " + std::to_string(s) + " on port " + std::to_string(sentinels_[s].port) +
           ", end of its log ---\n" + ReadTail(sentinel_log(s), 2500) + "\n";
    std::string stdout_tail = ReadTail(sentinels_[s].dir + "/stdout.log", 500);
    if (!stdout_tail.empty()) out += "--- its stdout/stderr ---\n" + stdout_tail + "\n";
  }
  return out;
}

}  // namespace dlock_test
