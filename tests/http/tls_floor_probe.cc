// One HTTPS request through dlock's HTTP layer, certificate unchecked, run by tls_floor_test.cc
// in a process of its own (OpenSSL reads its configuration once per process: the test gives
// this one a configuration that allows TLS 1.0 and 1.1, so that only dlock's floor can refuse).
// Prints "answered HTTP N" or "refused: MESSAGE"; exits 0 when answered, 1 when refused.
#include <cstdio>

#include "http/blocking_client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s https://HOST:PORT/\n", argv[0]);
    return 2;
  }
  dlock::http::BlockingClient client;
  dlock::http::Request request;
  request.url = argv[1];
  request.tls_verify = false;
  request.timeout_ms = 10000;
  request.connect_timeout_ms = 10000;
  dlock::http::Response response;
  dlock::Status s = client.Perform(request, &response);
  if (s.ok()) {
    std::printf("answered HTTP %ld\n", response.status);
    return 0;
  }
  std::printf("refused: %s\n", s.message().c_str());
  return 1;
}
