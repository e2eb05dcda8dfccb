// http::BlockingClient: whole answers on the caller's thread, and the bounds a request keeps
// (its timeout cut to the caller's deadline, the buffered size cap, nothing sent when refused).
#include "http/blocking_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "http_test_util.h"

namespace dlock::http {
namespace {

using dlock_test::Echo;
using dlock_test::FakeHttpServer;
using dlock_test::FakeRequest;
using dlock_test::FakeResponse;

TEST(BlockingClientTest, PerformReturnsTheWholeAnswer) {
  FakeHttpServer server(Echo);
  BlockingClient client;
  Request request;
  request.method = "POST";
  request.url = server.url() + "/v3/kv/range";
  request.headers = {"X-Test: yes"};
  request.body = R"({"key":"bG9jaw=="})";
  for (int i = 0; i < 2; ++i) {  // the second on a pooled handle
    Response response;
    ASSERT_TRUE(client.Perform(request, &response).ok());
    EXPECT_EQ(response.status, 201);
    EXPECT_EQ(response.body, R"(POST /v3/kv/range yes {"key":"bG9jaw=="})");
  }
  EXPECT_EQ(server.requests(), 2);
}

TEST(BlockingClientTest, ARequestEndsByTheCallersDeadline) {
  FakeHttpServer server([](const FakeRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return FakeResponse{200, "text/plain", "late"};
  });
  BlockingClient client;
  Request request;
  request.url = server.url() + "/";
  request.timeout_ms = 3000;
  request.deadline = Now() + Millis(200);
  const TimePoint start = Now();
  Response response;
  Status s = client.Perform(request, &response);
  EXPECT_LT(Now() - start, Millis(1400));
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("no answer within timeout_ms=3000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ms of it were left for this request"), std::string::npos) << s.message();
  EXPECT_TRUE(response.maybe_sent);
}

TEST(BlockingClientTest, ARunawayAnswerIsRefused) {
  FakeHttpServer server([](const FakeRequest&) {
    return FakeResponse{200, "text/plain", std::string((16u << 20) + 1, 'x')};
  });
  BlockingClient client;
  Request request;
  request.url = server.url() + "/";
  Response response;
  Status s = client.Perform(request, &response);
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("larger than 16 MiB"), std::string::npos) << s.message();
}

TEST(BlockingClientTest, ARefusedConnectionSentNothing) {
  BlockingClient client;
  Request request;
  request.url = "http://127.0.0.1:1/";  // nothing listens on port 1
  Response response;
  Status s = client.Perform(request, &response);
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_FALSE(response.maybe_sent);
}

// The count of open sockets (the dlock_connections gauge): one kept-alive connection for
// requests one after another on a pooled handle, none left by a refused connect, and none once
// the client (its handles and their connection caches) is gone: each socket counted out once.
TEST(BlockingClientTest, CountsTheSocketsItHasOpen) {
  FakeHttpServer server(Echo);
  auto count = std::make_shared<ConnectionCount>();
  {
    BlockingClient client(count);
    Request request;
    request.url = server.url() + "/";
    for (int i = 0; i < 3; ++i) {
      Response response;
      ASSERT_TRUE(client.Perform(request, &response).ok());
      EXPECT_EQ(count->open(), 1) << "request " << i;
    }
    Request refused;
    refused.url = "http://127.0.0.1:1/";  // nothing listens on port 1
    Response response;
    EXPECT_EQ(client.Perform(refused, &response).code(), Code::kIoError);
    EXPECT_EQ(count->open(), 1) << "the refused socket was not counted out";
  }
  EXPECT_EQ(count->open(), 0);
}

}  // namespace
}  // namespace dlock::http
