// HTTP over libcurl, the blocking half: a pool of easy handles, so that callers' threads reuse
// kept-alive connections and never serialize on one. (The async half is curl_multi.h.)
#ifndef DLOCK_DYNAMODB_HTTP_H_
#define DLOCK_DYNAMODB_HTTP_H_

#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace dlock::dynamodb {

struct HttpRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  int connect_timeout_ms = 2000;
  int timeout_ms = 3000;
  int configured_timeout_ms = 0;  // the URL's timeout_ms, for messages, when timeout_ms was cut
  bool tls_verify = true;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  // When the transfer failed: could the server have acted on the request? False only when
  // the connection was never made (refused, unresolvable), so nothing was sent.
  bool maybe_sent = false;
};

// Initializes libcurl once per process (thread-safe).
void EnsureCurlGlobalInit();

// A configured easy handle and the header list it points at.
class EasyTransfer {
 public:
  EasyTransfer();
  ~EasyTransfer();
  EasyTransfer(const EasyTransfer&) = delete;
  EasyTransfer& operator=(const EasyTransfer&) = delete;
  // Sets handle up for request (keeping its connection cache) and clears the response.
  void Prepare(const HttpRequest& request);
  CURL* handle() const { return curl_; }
  // Turns curl's result into a status and fills response->status; the body is already there.
  Status Finish(CURLcode code, HttpResponse* response);
  HttpResponse& response() { return response_; }
  const std::string& url() const { return url_; }

 private:
  static size_t OnData(char* data, size_t size, size_t n, void* arg);
  CURL* curl_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::string body_;  // curl reads the request body from here: must outlive the transfer
  std::string url_;
  int timeout_ms_ = 0;
  int configured_timeout_ms_ = 0;
  HttpResponse response_;
  char error_[CURL_ERROR_SIZE];
};

// Blocking transfers on pooled easy handles. Thread-safe.
class HttpPool {
 public:
  HttpPool() { EnsureCurlGlobalInit(); }
  // Performs request; an error only when no HTTP answer came (DLOCK_EIO).
  Status Perform(const HttpRequest& request, HttpResponse* response);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<EasyTransfer>> idle_;
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_HTTP_H_
