#include "support/etcd_cluster.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "support/tls_certs.h"

namespace dlock_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr auto kRejoinTimeout = std::chrono::seconds(10);
// A new node's JSON gateway holds requests until it is ready: measured 0.2 to 2.5 s after the
// start, in steps of about 1 s (likely its own gRPC connection's reconnect backoff).
constexpr long kStatusTimeoutMs = 1000;
// A put through a follower waits for the leader; without a quorum etcd itself gives up after
// about 5 s plus two election timeouts.
constexpr long kRequestTimeoutMs = 8000;
constexpr int kEtcdStartAttempts = 3;

struct HttpAnswer {
  long status = 0;  // 0: no HTTP answer (error says why)
  std::string body;
  std::string error;
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

HttpAnswer HttpPost(const std::string& url, const std::string& json, const EtcdClusterOptions& o,
                    long timeout_ms) {
  HttpAnswer answer;
  CURL* curl = curl_easy_init();
  if (!curl) return {0, "", "curl_easy_init failed"};
  char error[CURL_ERROR_SIZE] = "";
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(json.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  if (o.tls) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, o.tls->ca_cert().c_str());
    if (o.client_cert_required) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, o.tls->client_cert().c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, o.tls->client_key().c_str());
    }
  }
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  } else {
    answer.error = error[0] ? error : curl_easy_strerror(rc);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return answer;
}

// The string value of `field` in a JSON gateway answer, "" when absent. Enough for the fields
// read here: each occurs once per answer, and the gateway prints 64-bit integers and bytes
// (base64) as strings, never with escapes.
std::string JsonString(const std::string& body, const std::string& field) {
  const std::string tag = "\"" + field + "\":\"";
  size_t at = body.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  return body.substr(at, body.find('"', at) - at);
}

unsigned char* Bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }
const unsigned char* Bytes(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::string Base64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  out.resize(EVP_EncodeBlock(Bytes(out), Bytes(s), static_cast<int>(s.size())));
  return out;
}

std::string Unbase64(const std::string& s) {
  std::string out(3 * (s.size() / 4) + 3, '\0');
  int n = EVP_DecodeBlock(Bytes(out), Bytes(s), static_cast<int>(s.size()));
  if (n < 0) return "";
  // EVP_DecodeBlock counts the bytes the padding stands for.
  for (size_t i = s.size(); i > 0 && s[i - 1] == '='; --i) --n;
  out.resize(n);
  return out;
}

struct Status {
  std::string cluster_id, member_id, leader;
  long long term = 0;
};

}  // namespace

EtcdCluster::EtcdCluster(Options options) : options_(std::move(options)) {
  if (options_.tls && !options_.tls->ok()) {
    ADD_FAILURE() << "EtcdCluster: options.tls must be certificates that were made (ok())";
    return;
  }
  etcd_path_ = FindOnPath("etcd", "DLOCK_ETCD");
  if (etcd_path_.empty()) {
    ADD_FAILURE() << "EtcdCluster: etcd not found on PATH (Debian: etcd-server)";
    return;
  }
  std::string why;
  dir_ = MakeTempDir("etcd", &why);
  if (dir_.empty()) {
    ADD_FAILURE() << "EtcdCluster: " << why;
    return;
  }
  ready_ = Create(/*new_ports=*/true);
}

EtcdCluster::~EtcdCluster() {
  // A failed start has said it all already; a failed test may want the logs.
  if (::testing::Test::HasFailure() && (running(0) || running(1) || running(2))) {
    fprintf(stderr, "--- etcd cluster %s ---\n%s\n", endpoints().c_str(), AllLogTails().c_str());
  }
  Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

bool EtcdCluster::Create(bool new_ports) {
  std::string why;
  for (int attempt = 1; attempt <= kEtcdStartAttempts; ++attempt) {
    if (new_ports) {
      std::set<int> taken;
      for (Node& n : nodes_) {
        for (int* port : {&n.client_port, &n.peer_port}) {
          do {
            *port = FreeTcpPort();
          } while (*port > 0 && taken.count(*port));
          taken.insert(*port);
        }
      }
      if (taken.count(-1)) {
        ADD_FAILURE() << "EtcdCluster: no free TCP port on 127.0.0.1";
        return false;
      }
    }
    // A new token makes a new cluster (new cluster and member ids), never one mistaken for the
    // one before.
    token_ = fs::path(dir_).filename().string() + "-" + std::to_string(++generation_);
    std::error_code ec;
    for (int i = 0; i < kNodes; ++i) fs::remove_all(DataDir(i), ec);
    for (int i = 0; i < kNodes; ++i) Spawn(i, /*existing=*/false);
    if (WaitHealthy(kStartTimeout, &why)) return true;
    // Only a port taken between FreeTcpPort() and etcd's bind is worth another try.
    bool port_taken = false;
    for (int i = 0; i < kNodes; ++i) {
      port_taken |= !running(i) &&
                    ReadTail(LogPath(i), 8000).find("address already in use") != std::string::npos;
    }
    Kill();
    if (!port_taken) break;
    if (!new_ports) std::this_thread::sleep_for(milliseconds(200));
  }
  ADD_FAILURE() << "EtcdCluster: " << why << "\n" << AllLogTails();
  return false;
}

void EtcdCluster::Spawn(int i, bool existing) {
  auto client_url = [&](int k) {
    return (options_.tls ? "https://127.0.0.1:" : "http://127.0.0.1:") +
           std::to_string(nodes_[k].client_port);
  };
  auto peer_url = [&](int k) { return "http://127.0.0.1:" + std::to_string(nodes_[k].peer_port); };
  std::string initial_cluster;
  for (int k = 0; k < kNodes; ++k) {
    initial_cluster += (k ? ",n" : "n") + std::to_string(k) + "=" + peer_url(k);
  }
  std::vector<std::string> args = {
      etcd_path_,
      "--name", "n" + std::to_string(i),
      "--data-dir", DataDir(i),
      "--listen-client-urls", client_url(i),
      "--advertise-client-urls", client_url(i),
      "--listen-peer-urls", peer_url(i),
      "--initial-advertise-peer-urls", peer_url(i),
      "--initial-cluster", initial_cluster,
      "--initial-cluster-state", existing ? "existing" : "new",
      "--initial-cluster-token", token_,
      "--heartbeat-interval", std::to_string(options_.heartbeat_ms),
      "--election-timeout", std::to_string(options_.election_timeout_ms),
      "--experimental-watch-progress-notify-interval",
      std::to_string(options_.progress_notify_ms) + "ms",
      "--logger", "zap", "--log-outputs", "stderr"};
  if (options_.tls) {
    // The peer certificate, not the server one: the JSON gateway dials the node's own gRPC
    // port presenting it, and --client-cert-auth refuses a certificate without clientAuth.
    args.insert(args.end(), {"--cert-file", options_.tls->peer_cert(), "--key-file",
                             options_.tls->peer_key()});
    if (options_.client_cert_required) {
      args.insert(args.end(), {"--trusted-ca-file", options_.tls->ca_cert(), "--client-cert-auth"});
    }
  }
  Node& n = nodes_[i];
  n.process.reset();  // kills and reaps a previous run
  n.process = std::make_unique<ChildProcess>(args, ChildOptions::LogTo(LogPath(i)));
  n.stopped = false;
}

std::string EtcdCluster::endpoint(int i) const {
  return "127.0.0.1:" + std::to_string(nodes_[i].client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (int i = 0; i < kNodes; ++i) out += (i ? "," : "") + endpoint(i);
  return out;
}

std::string EtcdCluster::url() const {
  std::string url = "etcd://" + endpoints();
  if (options_.tls) {
    url += "?tls=1&ca=" + options_.tls->ca_cert();
    if (options_.client_cert_required) {
      url += "&cert=" + options_.tls->client_cert() + "&key=" + options_.tls->client_key();
    }
  }
  return url;
}

std::string EtcdCluster::HttpUrl(int i, const std::string& path) const {
  return (options_.tls ? "https://" : "http://") + endpoint(i) + path;
}

bool EtcdCluster::running(int i) const {
  return nodes_[i].process && nodes_[i].process->pid() != -1;
}

bool EtcdCluster::WaitHealthy(milliseconds timeout, std::string* why) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    for (int i = 0; i < kNodes; ++i) {
      if (!running(i)) continue;
      if (int code = nodes_[i].process->Wait(milliseconds(0)); code != -1) {
        // An etcd that exited stays down: no use waiting for it.
        *why = "node " + std::to_string(i) + " (" + endpoint(i) + ") " + DescribeExitCode(code);
        return false;
      }
    }
    std::string bad;
    std::map<int, Status> statuses;
    for (int i = 0; i < kNodes && bad.empty(); ++i) {
      if (!running(i) || nodes_[i].stopped) continue;
      HttpAnswer a = HttpPost(HttpUrl(i, "/v3/maintenance/status"), "{}", options_,
                              kStatusTimeoutMs);
      Status s{JsonString(a.body, "cluster_id"), JsonString(a.body, "member_id"),
               JsonString(a.body, "leader")};
      if (a.status != 200 || s.cluster_id.empty()) {
        bad = endpoint(i) + ": " + (a.status ? std::to_string(a.status) + " " + a.body : a.error);
      } else if (s.leader.empty() || s.leader == "0") {
        bad = endpoint(i) + " knows no leader";
      } else {
        statuses[i] = s;
      }
    }
    if (bad.empty()) {
      std::set<std::string> members;
      for (auto& [i, s] : statuses) members.insert(s.member_id);
      for (auto& [i, s] : statuses) {
        // Another cluster's etcd on a port of ours would say another cluster id.
        if (s.cluster_id != statuses.begin()->second.cluster_id) {
          bad = "the nodes are not of one cluster";
        } else if (s.leader != statuses.begin()->second.leader || !members.count(s.leader)) {
          bad = endpoint(i) + " names leader " + s.leader + ", not one the others agree on";
        }
      }
      if (statuses.empty()) bad = "no node is running";
    }
    if (bad.empty()) return true;
    if (std::chrono::steady_clock::now() >= until) {
      *why = "not healthy within " + std::to_string(timeout.count()) + " ms: " + bad;
      return false;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

int EtcdCluster::Leader() {
  std::map<std::string, int> index_of;  // member id -> node
  Status best;
  for (int i = 0; i < kNodes; ++i) {
    if (!running(i) || nodes_[i].stopped) continue;
    std::optional<std::string> body = Post("/v3/maintenance/status", "{}", i);
    if (!body) continue;
    index_of[JsonString(*body, "member_id")] = i;
    Status s{"", "", JsonString(*body, "leader"),
             std::atoll(JsonString(*body, "raftTerm").c_str())};
    // A node cut off from the others may still name the leader of an older term.
    if (!s.leader.empty() && s.leader != "0" && s.term > best.term) best = s;
  }
  auto it = best.leader.empty() ? index_of.end() : index_of.find(best.leader);
  return it == index_of.end() ? -1 : it->second;
}

pid_t EtcdCluster::pid(int i) const { return running(i) ? nodes_[i].process->pid() : -1; }

void EtcdCluster::Stop(int i) {
  if (!running(i)) return;
  nodes_[i].process->Signal(SIGSTOP);
  nodes_[i].stopped = true;
}

void EtcdCluster::Cont(int i) {
  if (!running(i)) return;
  nodes_[i].process->Signal(SIGCONT);
  nodes_[i].stopped = false;
}

void EtcdCluster::Kill(int i) {
  if (nodes_[i].process) nodes_[i].process->Kill();
  nodes_[i].stopped = false;
}

void EtcdCluster::Kill() {
  for (int i = 0; i < kNodes; ++i) Kill(i);
}

bool EtcdCluster::StartAgain(int i) {
  if (etcd_path_.empty() || dir_.empty() || token_.empty()) {
    ADD_FAILURE() << "EtcdCluster::StartAgain: the cluster was never started";
    return false;
  }
  Spawn(i, /*existing=*/true);
  std::string why;
  if (WaitHealthy(kRejoinTimeout, &why)) return true;
  ADD_FAILURE() << "EtcdCluster::StartAgain(" << i << "): " << why << "\n" << LogTail(i);
  return false;
}

bool EtcdCluster::Restart() {
  ready_ = false;
  Kill();
  if (etcd_path_.empty() || dir_.empty() || nodes_[0].client_port <= 0) {
    ADD_FAILURE() << "EtcdCluster::Restart: the cluster was never started";
    return false;
  }
  ready_ = Create(/*new_ports=*/false);
  return ready_;
}

std::optional<std::string> EtcdCluster::Post(const std::string& path, const std::string& json,
                                             int i) {
  for (int k = (i < 0 ? 0 : i); k < (i < 0 ? kNodes : i + 1); ++k) {
    if (!running(k) || nodes_[k].stopped) continue;
    HttpAnswer a = HttpPost(HttpUrl(k, path), json, options_, kRequestTimeoutMs);
    if (a.status == 200) return a.body;
  }
  return std::nullopt;
}

bool EtcdCluster::Put(const std::string& key, const std::string& value) {
  return Post("/v3/kv/put",
              R"({"key":")" + Base64(key) + R"(","value":")" + Base64(value) + R"("})")
      .has_value();
}

std::optional<std::string> EtcdCluster::Get(const std::string& key) {
  std::optional<std::string> body = Post("/v3/kv/range", R"({"key":")" + Base64(key) + R"("})");
  if (!body || body->find("\"kvs\":") == std::string::npos) return std::nullopt;
  return Unbase64(JsonString(*body, "value"));  // an empty value is left out: ""
}

bool EtcdCluster::Delete(const std::string& key) {
  std::optional<std::string> body =
      Post("/v3/kv/deleterange", R"({"key":")" + Base64(key) + R"("})");
  // "deleted" is left out when it is 0.
  return body && JsonString(*body, "deleted") == "1";
}

bool EtcdCluster::DeleteRange(const std::string& key, const std::string& range_end) {
  std::optional<std::string> body =
      Post("/v3/kv/deleterange",
           R"({"key":")" + Base64(key) + R"(","range_end":")" + Base64(range_end) + R"("})");
  return body && !JsonString(*body, "deleted").empty();
}

int EtcdCluster::Count(const std::string& key, const std::string& range_end) {
  std::optional<std::string> body =
      Post("/v3/kv/range", R"({"key":")" + Base64(key) + R"(","range_end":")" + Base64(range_end) +
                               R"(","count_only":true})");
  if (!body) return -1;
  const std::string count = JsonString(*body, "count");  // left out when 0
  return count.empty() ? 0 : std::stoi(count);
}

std::string EtcdCluster::LogTail(int i) const {
  return dir_.empty() ? "" : ReadTail(LogPath(i), 3000);
}

std::string EtcdCluster::AllLogTails() const {
  std::string out;
  for (int i = 0; i < kNodes; ++i) {
    out += "--- etcd node " + std::to_string(i) + " (" + endpoint(i) + "), end of its log ---\n" +
           LogTail(i) + "\n";
  }
  return out;
}

}  // namespace dlock_test
