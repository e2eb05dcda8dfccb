#include "dynamodb/http.h"

#include <cstring>

namespace dlock::dynamodb {
namespace {

// Idle easy handles kept (each holds its own kept-alive connection).
constexpr size_t kMaxIdleTransfers = 64;

}  // namespace

void EnsureCurlGlobalInit() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)init;
}

EasyTransfer::EasyTransfer() : curl_(curl_easy_init()) { error_[0] = '\0'; }

EasyTransfer::~EasyTransfer() {
  if (curl_ != nullptr) curl_easy_cleanup(curl_);
  curl_slist_free_all(headers_);
}

size_t EasyTransfer::OnData(char* data, size_t size, size_t n, void* arg) {
  auto* self = static_cast<EasyTransfer*>(arg);
  // A DynamoDB answer is small; refuse to buffer a runaway one (curl then fails the transfer).
  if (self->response_.body.size() + size * n > (16u << 20)) return 0;
  self->response_.body.append(data, size * n);
  return size * n;
}

void EasyTransfer::Prepare(const HttpRequest& request) {
  response_ = HttpResponse();
  error_[0] = '\0';
  url_ = request.url;
  timeout_ms_ = request.timeout_ms;
  configured_timeout_ms_ = request.configured_timeout_ms != 0 ? request.configured_timeout_ms : request.timeout_ms;
  body_ = request.body;
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  for (const auto& h : request.headers) headers_ = curl_slist_append(headers_, h.c_str());
  // curl would add "Expect: 100-continue" to larger bodies: a wasted round trip.
  headers_ = curl_slist_append(headers_, "Expect:");

  curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout_ms));
  curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout_ms));
  curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYPEER, request.tls_verify ? 1L : 0L);
  curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYHOST, request.tls_verify ? 2L : 0L);
  curl_easy_setopt(curl_, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &EasyTransfer::OnData);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_);
  curl_easy_setopt(curl_, CURLOPT_PROXY, "");  // never through an environment proxy
  if (request.method == "POST" || request.method == "PUT") {
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body_.data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body_.size()));
    curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, request.method == "PUT" ? "PUT" : nullptr);
  } else {
    curl_easy_setopt(curl_, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST,
                     request.method == "GET" ? nullptr : request.method.c_str());
  }
}

Status EasyTransfer::Finish(CURLcode code, HttpResponse* response) {
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response_.status);
    *response = std::move(response_);
    return Status::Ok();
  }
  response_.maybe_sent = !(code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                           code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_UNSUPPORTED_PROTOCOL ||
                           code == CURLE_URL_MALFORMAT || code == CURLE_SSL_CONNECT_ERROR ||
                           code == CURLE_PEER_FAILED_VERIFICATION);
  *response = std::move(response_);
  std::string detail = error_[0] != '\0' ? error_ : curl_easy_strerror(code);
  if (code == CURLE_OPERATION_TIMEDOUT) {
    detail = "no answer within timeout_ms=" + std::to_string(configured_timeout_ms_) +
             (timeout_ms_ < configured_timeout_ms_
                  ? " (" + std::to_string(timeout_ms_) + " ms of it were left for this request)"
                  : std::string()) +
             " (" + detail + ")";
  }
  // The URL names the endpoint only (no credentials ever appear in it).
  return Status::IoError("cannot reach " + url_ + ": " + detail);
}

Status HttpPool::Perform(const HttpRequest& request, HttpResponse* response) {
  std::unique_ptr<EasyTransfer> transfer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      transfer = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (transfer == nullptr) transfer = std::make_unique<EasyTransfer>();
  if (transfer->handle() == nullptr) return Status::Internal("curl_easy_init failed");
  transfer->Prepare(request);
  CURLcode code = curl_easy_perform(transfer->handle());
  Status s = transfer->Finish(code, response);
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleTransfers) idle_.push_back(std::move(transfer));
  return s;
}

}  // namespace dlock::dynamodb
