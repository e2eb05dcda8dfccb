#include "http/easy_transfer.h"

#include <unistd.h>

#include <algorithm>

#include "http/cloexec.h"

namespace dlock::http {
namespace {

// The answers buffered whole are small (DynamoDB items, credentials, etcd ranges); refuse to
// buffer a runaway one (curl then fails the transfer). A stream hands its body over as it
// comes, so only what arrived in one pass of the loop counts against it.
constexpr size_t kMaxBufferedBody = 16u << 20;

// Failures after which the server cannot have seen the request: no connection was made.
bool NothingSent(CURLcode code) {
  return code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
         code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_UNSUPPORTED_PROTOCOL ||
         code == CURLE_URL_MALFORMAT || code == CURLE_SSL_CONNECT_ERROR ||
         code == CURLE_PEER_FAILED_VERIFICATION;
}

// CURLOPT_OPENSOCKETFUNCTION and CURLOPT_CLOSESOCKETFUNCTION: close-on-exec sockets
// (cloexec.h), counted in clientp (a ConnectionCount, or null) from socket(2) to close(2). curl
// closes a connection's socket with the callback and clientp of the handle that opened it, also
// after that handle is gone (a multi's connection cache closes last): whoever owns the multi
// keeps the count alive until then (AsyncClient, and this handle for its own multi).
curl_socket_t OpenCountedSocket(void* clientp, curlsocktype purpose, curl_sockaddr* address) {
  const curl_socket_t fd = OpenSocketCloexec(nullptr, purpose, address);
  if (fd != CURL_SOCKET_BAD && clientp != nullptr) static_cast<ConnectionCount*>(clientp)->Opened();
  return fd;
}

int CloseCountedSocket(void* clientp, curl_socket_t fd) {
  if (clientp != nullptr) static_cast<ConnectionCount*>(clientp)->Closed();
  return close(fd);
}

}  // namespace

void EnsureCurlGlobalInit() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)init;
}

EasyTransfer::EasyTransfer(std::shared_ptr<ConnectionCount> connections)
    : connections_(std::move(connections)), curl_(curl_easy_init()) {
  error_[0] = '\0';
  if (curl_ == nullptr) return;
  // Connections never leak into child processes (cloexec.h), and each is counted while open.
  curl_easy_setopt(curl_, CURLOPT_OPENSOCKETFUNCTION, &OpenCountedSocket);
  curl_easy_setopt(curl_, CURLOPT_OPENSOCKETDATA, connections_.get());
  curl_easy_setopt(curl_, CURLOPT_CLOSESOCKETFUNCTION, &CloseCountedSocket);
  curl_easy_setopt(curl_, CURLOPT_CLOSESOCKETDATA, connections_.get());
}

EasyTransfer::~EasyTransfer() {
  if (own_multi_ != nullptr) curl_multi_cleanup(own_multi_);  // the handle is never in it here
  if (curl_ != nullptr) curl_easy_cleanup(curl_);
  curl_slist_free_all(headers_);
  curl_slist_free_all(connect_to_);
}

size_t EasyTransfer::OnData(char* data, size_t size, size_t n, void* arg) {
  auto* self = static_cast<EasyTransfer*>(arg);
  if (self->response_.body.size() + size * n > kMaxBufferedBody) {
    self->too_large_ = true;
    return 0;
  }
  self->response_.body.append(data, size * n);
  return size * n;
}

void EasyTransfer::Prepare(const Request& request, Bound bound) {
  response_ = Response();
  error_[0] = '\0';
  too_large_ = false;
  url_ = request.url;
  configured_timeout_ms_ = request.timeout_ms;
  timeout_ms_ = request.timeout_ms;
  int connect_timeout_ms = request.connect_timeout_ms;
  if (bound == Bound::kConnectOnly) {
    timeout_ms_ = 0;  // curl: no limit
  } else if (request.deadline != TimePoint::max()) {
    // The caller's whole call ends at deadline: this request gets what is left (at least 1 ms).
    int64_t left = std::chrono::duration_cast<Millis>(request.deadline - Now()).count();
    left = std::max<int64_t>(left, 1);
    timeout_ms_ = static_cast<int>(std::min<int64_t>(timeout_ms_, left));
    connect_timeout_ms = static_cast<int>(std::min<int64_t>(connect_timeout_ms, left));
  }
  body_ = request.body;
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  for (const auto& h : request.headers) headers_ = curl_slist_append(headers_, h.c_str());
  // curl would add "Expect: 100-continue" to larger bodies: a wasted round trip.
  headers_ = curl_slist_append(headers_, "Expect:");

  curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout_ms));
  curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms_));
  curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYPEER, request.tls_verify ? 1L : 0L);
  curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYHOST, request.tls_verify ? 2L : 0L);
  curl_easy_setopt(curl_, CURLOPT_TCP_NODELAY, 1L);
  // The Redis path's floor (tls.cc): nothing older than TLS 1.2, whatever the system allows.
  curl_easy_setopt(curl_, CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &EasyTransfer::OnData);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_);
  curl_easy_setopt(curl_, CURLOPT_PROXY, "");  // never through an environment proxy
  // Empty strings would name files: null restores curl's defaults on a reused handle.
  auto file_or_null = [](const std::string& f) { return f.empty() ? nullptr : f.c_str(); };
  curl_easy_setopt(curl_, CURLOPT_CAINFO, file_or_null(request.ca_file));
  curl_easy_setopt(curl_, CURLOPT_SSLCERT, file_or_null(request.cert_file));
  curl_easy_setopt(curl_, CURLOPT_SSLKEY, file_or_null(request.key_file));
  curl_slist_free_all(connect_to_);
  connect_to_ = request.connect_to.empty() ? nullptr : curl_slist_append(nullptr, request.connect_to.c_str());
  curl_easy_setopt(curl_, CURLOPT_CONNECT_TO, connect_to_);
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

CURLcode EasyTransfer::PerformBlocking() {
  // curl_easy_perform would make a multi handle of its own, whose wake-up socketpair is not
  // close-on-exec (curl 7.88): this is the same loop on a multi made by NewMultiCloexec, kept
  // with the handle so that its connection cache survives between requests.
  if (own_multi_ == nullptr) own_multi_ = NewMultiCloexec();
  if (own_multi_ == nullptr) return CURLE_OUT_OF_MEMORY;
  if (curl_multi_add_handle(own_multi_, curl_) != CURLM_OK) return CURLE_FAILED_INIT;
  CURLcode result = CURLE_OK;
  for (bool done = false; !done;) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(own_multi_, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(own_multi_, &left)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == curl_) {
        result = msg->data.result;
        done = true;
      }
    }
    // curl bounds the wait by its own timers (timeouts included).
    if (!done && mc == CURLM_OK) mc = curl_multi_poll(own_multi_, nullptr, 0, 1000, nullptr);
    if (!done && mc != CURLM_OK) {
      result = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_RECV_ERROR;
      done = true;
    }
  }
  curl_multi_remove_handle(own_multi_, curl_);
  return result;
}

long EasyTransfer::status() const {
  long status = 0;
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

Status EasyTransfer::Finish(CURLcode code, Response* response) {
  if (code == CURLE_OK) {
    response_.status = status();
    *response = std::move(response_);
    return Status::Ok();
  }
  response_.maybe_sent = !NothingSent(code);
  response_.status = status();
  *response = std::move(response_);
  std::string detail = error_[0] != '\0' ? error_ : curl_easy_strerror(code);
  if (too_large_) {
    detail = "the answer is larger than " + std::to_string(kMaxBufferedBody >> 20) + " MiB";
  } else if (code == CURLE_OPERATION_TIMEDOUT && timeout_ms_ != 0) {
    detail = "no answer within timeout_ms=" + std::to_string(configured_timeout_ms_) +
             (timeout_ms_ < configured_timeout_ms_
                  ? " (" + std::to_string(timeout_ms_) + " ms of it were left for this request)"
                  : std::string()) +
             " (" + detail + ")";
  }
  // The URL names the endpoint only (no credentials ever appear in it). A request sent and
  // never answered met a server that is there and silent (an etcd member without a leader
  // holds a write until its own timeout), not one out of reach.
  const bool connected_silence = code == CURLE_OPERATION_TIMEDOUT && response->maybe_sent &&
                                 std::string(error_).find("onnect") == std::string::npos;
  if (connected_silence) return Status::IoError(url_ + ": " + detail);
  if (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CERTPROBLEM ||
      code == CURLE_SSL_CACERT_BADFILE) {
    return Status::AuthError("TLS with " + url_ + " failed: " + detail);
  }
  return Status::IoError("cannot reach " + url_ + ": " + detail);
}

}  // namespace dlock::http
