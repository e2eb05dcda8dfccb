// One libcurl easy handle set up for a Request, and what it received: the unit both clients
// (blocking_client.h, async_client.h) run and keep for reuse, with its kept-alive connection.
#ifndef DLOCK_HTTP_EASY_TRANSFER_H_
#define DLOCK_HTTP_EASY_TRANSFER_H_

#include <curl/curl.h>

#include <memory>
#include <string>

#include "core/connection_count.h"
#include "core/status.h"
#include "http/request.h"

namespace dlock::http {

// Initializes libcurl once per process (thread-safe).
void EnsureCurlGlobalInit();

// What ends a transfer in time.
enum class Bound {
  // The request: timeout_ms or the deadline, whichever comes first, ends the whole exchange.
  kWholeCall,
  // A stream: only the connection is bounded (connect_timeout_ms); the stream lasts while it
  // is fed, and its owner bounds the silence between chunks (AsyncClient::Stream).
  kConnectOnly,
};

class EasyTransfer {
 public:
  // connections: counts the sockets this handle opens to servers, from socket(2) to their
  // close (a connect under way counts); null counts nothing.
  explicit EasyTransfer(std::shared_ptr<ConnectionCount> connections = nullptr);
  ~EasyTransfer();
  EasyTransfer(const EasyTransfer&) = delete;
  EasyTransfer& operator=(const EasyTransfer&) = delete;

  // Sets the handle up for request (keeping its connection cache) and clears the response.
  void Prepare(const Request& request, Bound bound = Bound::kWholeCall);
  CURL* handle() const { return curl_; }
  // Runs the prepared request to its end on the calling thread (curl_easy_perform's job, on a
  // multi handle whose descriptors are close-on-exec). Not for a handle in another multi.
  CURLcode PerformBlocking();
  const std::string& url() const { return url_; }
  // The body received and not yet taken: all of it for a request, what arrived since the last
  // take for a stream.
  std::string& body() { return response_.body; }
  // The HTTP status once the answer's head has come; 0 before.
  long status() const;
  // Turns curl's result into a status and fills *response; an error only when no whole HTTP
  // answer came: DLOCK_EAUTH when TLS refused a certificate, DLOCK_EIO otherwise.
  Status Finish(CURLcode code, Response* response);

 private:
  static size_t OnData(char* data, size_t size, size_t n, void* arg);
  // Kept for own_multi_'s connections, which close in the destructor.
  std::shared_ptr<ConnectionCount> connections_;
  CURL* curl_ = nullptr;
  CURLM* own_multi_ = nullptr;  // PerformBlocking's, made on first use
  curl_slist* headers_ = nullptr;
  curl_slist* connect_to_ = nullptr;
  std::string body_;  // curl reads the request body from here: must outlive the transfer
  std::string url_;
  int timeout_ms_ = 0;             // what this request got: timeout_ms, or less before a deadline
  int configured_timeout_ms_ = 0;  // the URL's timeout_ms, for messages
  bool too_large_ = false;
  Response response_;
  char error_[CURL_ERROR_SIZE];
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_EASY_TRANSFER_H_
