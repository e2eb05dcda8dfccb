// One HTTP exchange as the backends see it, with nothing of any one backend in it: what to send
// and the bounds it must keep, and what came back.
#ifndef DLOCK_HTTP_REQUEST_H_
#define DLOCK_HTTP_REQUEST_H_

#include <string>
#include <vector>

#include "core/clock.h"

namespace dlock::http {

struct Request {
  std::string method = "GET";  // POST and PUT send body; any other method sends none
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  int connect_timeout_ms = 2000;
  // One request's bound: the URL's timeout_ms. The request ends by then, or by deadline (the
  // caller's whole call, retries included) if that comes first.
  int timeout_ms = 3000;
  TimePoint deadline = TimePoint::max();
  bool tls_verify = true;
  // HTTPS: trusted CAs (PEM; the system's when empty), a client certificate and its key.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // "HOST:PORT:CONNECT-HOST:CONNECT-PORT" (curl's CURLOPT_CONNECT_TO): the URL names the host
  // the certificate must match (and the SNI), the connection goes to another address.
  std::string connect_to;
};

struct Response {
  long status = 0;  // the HTTP status; 0 when no answer's head came
  std::string body;  // a streamed response's body went to its chunk callback instead
  // When the transfer failed: could the server have acted on the request? False only when
  // the connection was never made (refused, unresolvable), so nothing was sent.
  bool maybe_sent = false;
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_REQUEST_H_
