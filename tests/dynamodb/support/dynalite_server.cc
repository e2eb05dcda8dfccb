#include "support/dynalite_server.h"
#include "support/harness_util.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;


}  // namespace

void UseTestCredentials() {
  setenv("AWS_ACCESS_KEY_ID", "AKIDDLOCKTEST", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "dlock-test-secret", 1);
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_REGION", "us-east-1", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);  // never probe 169.254.169.254 from a test
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/dlock-test/credentials", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent/dlock-test/config", 1);
  for (const char* v : {"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ENDPOINT_URL",
                        "AWS_ENDPOINT_URL_DYNAMODB", "AWS_DEFAULT_REGION",
                        "AWS_EC2_METADATA_SERVICE_ENDPOINT"}) {
    unsetenv(v);
  }
}

DynaliteServer::DynaliteServer(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {
  tls_ = std::find(extra_args_.begin(), extra_args_.end(), "--ssl") != extra_args_.end();
  node_ = FindOnPath("node", "DLOCK_NODE");
  if (node_.empty()) {
    ADD_FAILURE() << "DynaliteServer: node not found on PATH (run scripts/setup)";
    return;
  }
  if (access(DLOCK_DYNALITE_CLI, R_OK) != 0) {
    ADD_FAILURE() << "DynaliteServer: " << DLOCK_DYNALITE_CLI
                  << " is missing: run scripts/setup (npm ci in tests/dynamodb)";
    return;
  }
  char tmpl[] = "/tmp/dlock-dynalite-XXXXXX.log";
  int fd = mkstemps(tmpl, 4);
  if (fd >= 0) close(fd);
  log_path_ = tmpl;
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    port_ = FreeTcpPort();
    Spawn();
    if (WaitReady(&why)) return;
    Kill();
  }
  ADD_FAILURE() << "DynaliteServer: could not start: " << why << "\n--- log ---\n" << ReadTail(log_path_, 3000);
}

DynaliteServer::~DynaliteServer() {
  if (::testing::Test::HasFailure() && running()) {
    fprintf(stderr, "--- dynalite on port %d, end of its log ---\n%s\n", port_, ReadTail(log_path_, 3000).c_str());
  }
  Stop();
  if (!log_path_.empty()) unlink(log_path_.c_str());
}

std::string DynaliteServer::endpoint() const {
  return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_);
}

std::string DynaliteServer::url(const std::string& table, const std::string& extra_params) const {
  return "dynamodb://" + table + "?region=us-east-1&endpoint=" + endpoint() +
         (extra_params.empty() ? "" : "&" + extra_params);
}

void DynaliteServer::Spawn() {
  std::vector<std::string> args = {node_, DLOCK_DYNALITE_CLI, "--port", std::to_string(port_),
                                   "--host", "127.0.0.1"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  // Tables ACTIVE at once, unless the test asked otherwise (a repeated flag would become a list).
  for (const char* flag : {"--createTableMs", "--deleteTableMs", "--updateTableMs"}) {
    if (std::find(extra_args_.begin(), extra_args_.end(), flag) == extra_args_.end()) {
      args.insert(args.end(), {flag, "0"});
    }
  }
  process_ = std::make_unique<ChildProcess>(args, ChildOptions::LogTo(log_path_));
}

bool DynaliteServer::WaitReady(std::string* why) {
  if (!process_->started()) {
    *why = process_->error();
    return false;
  }
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    if (int code = process_->Wait(std::chrono::milliseconds(0)); code != -1 || !running()) {
      *why = "dynalite " + DescribeExitCode(code) + " before answering";
      return false;
    }
    RawResponse r = Call("ListTables", "{}");
    if (r.status == 200 && r.body.find("TableNames") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *why = "no answer to ListTables within 10 s on port " + std::to_string(port_);
  return false;
}

void DynaliteServer::Kill() {
  if (process_) process_->Kill();
}
void DynaliteServer::Stop() {
  if (process_) process_->Stop(SIGTERM, std::chrono::milliseconds(2000));
}

bool DynaliteServer::Restart() {
  Stop();
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Spawn();
    if (WaitReady(&why)) return true;
    Kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ADD_FAILURE() << "DynaliteServer::Restart on port " << port_ << ": " << why;
  return false;
}

RawResponse DynaliteServer::Call(const std::string& operation, const std::string& json) const {
  RawResponse out;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return out;
  std::string url = endpoint() + "/";
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/x-amz-json-1.0");
  headers = curl_slist_append(headers, ("X-Amz-Target: DynamoDB_20120810." + operation).c_str());
  headers = curl_slist_append(headers, "X-Amz-Date: 20260101T000000Z");
  // dynalite checks the form of the signature, not its value.
  headers = curl_slist_append(headers,
                              "Authorization: AWS4-HMAC-SHA256 Credential=AKIDDLOCKTEST/20260101/"
                              "us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, "
                              "Signature=0000");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(json.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &out.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  if (tls_) {  // the harness trusts its own server
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.status);
  } else {
    out.body = curl_easy_strerror(code);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return out;
}

bool DynaliteServer::CreateTable(const std::string& table, const std::string& partition_key,
                                 const std::string& sort_key) const {
  std::string attributes = R"({"AttributeName":")" + partition_key + R"(","AttributeType":"S"})";
  std::string schema = R"({"AttributeName":")" + partition_key + R"(","KeyType":"HASH"})";
  if (!sort_key.empty()) {
    attributes += R"(,{"AttributeName":")" + sort_key + R"(","AttributeType":"S"})";
    schema += R"(,{"AttributeName":")" + sort_key + R"(","KeyType":"RANGE"})";
  }
  RawResponse r = Call("CreateTable", R"({"TableName":")" + table + R"(","AttributeDefinitions":[)" +
                                          attributes + R"(],"KeySchema":[)" + schema +
                                          R"(],"BillingMode":"PAY_PER_REQUEST"})");
  if (r.status != 200) {
    ADD_FAILURE() << "CreateTable " << table << ": HTTP " << r.status << " " << r.body;
    return false;
  }
  for (int i = 0; i < 100; ++i) {
    RawResponse d = Call("DescribeTable", R"({"TableName":")" + table + R"("})");
    if (d.body.find(R"("TableStatus":"ACTIVE")") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "table " << table << " did not become ACTIVE";
  return false;
}

std::string DynaliteServer::GetItem(const std::string& table, const std::string& key_json) const {
  RawResponse r = Call("GetItem", R"({"TableName":")" + table + R"(","Key":)" + key_json +
                                      R"(,"ConsistentRead":true})");
  size_t at = r.body.find(R"("Item":)");
  if (r.status != 200 || at == std::string::npos) return "";
  return r.body.substr(at + 7, r.body.size() - at - 8);  // drop the closing '}' of the answer
}

}  // namespace dlock_test
