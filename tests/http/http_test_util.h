// What the tests of src/http share: a fake server's handler that echoes the request back.
#ifndef DLOCK_TESTS_HTTP_HTTP_TEST_UTIL_H_
#define DLOCK_TESTS_HTTP_HTTP_TEST_UTIL_H_

#include <string>

#include "support/fake_http_server.h"

namespace dlock_test {

// Answers 201 with "METHOD PATH x-test-header BODY", so a test sees what went out.
inline FakeResponse Echo(const FakeRequest& request) {
  auto header = request.headers.find("x-test");
  return FakeResponse{201, "text/plain",
                      request.method + " " + request.path + " " +
                          (header == request.headers.end() ? "-" : header->second) + " " + request.body};
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_HTTP_HTTP_TEST_UTIL_H_
