// http::AsyncClient on a loop: a whole answer, and a streamed body (etcd's watch: newline-
// delimited JSON for as long as the watch lasts) handed over chunk by chunk as the server sends
// it, cancelled, cut by its idle timeout, and failed by Shutdown. The server's body is written
// by the test while the response is open (ChunkFeed), so "before the response ends" is a fact
// the test arranges, not a race it hopes to win.
#include "http/async_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_test_util.h"
#include "loop/event_loop.h"

namespace dlock::http {
namespace {

using dlock_test::ChunkFeed;
using dlock_test::Echo;
using dlock_test::FakeHttpServer;
using dlock_test::FakeRequest;
using dlock_test::FakeResponse;
using namespace std::chrono_literals;

// What one transfer delivered so far.
struct Delivered {
  std::vector<std::string> chunks;
  std::vector<long> chunk_statuses;
  int done_count = 0;
  Status error;
  Response response;
  TimePoint done_at;
  std::string text() const {
    std::string all;
    for (const auto& c : chunks) all += c;
    return all;
  }
};

// Records what a transfer delivers: written by its callbacks on the loop thread, read by the
// test.
class Probe {
 public:
  AsyncClient::OnChunk OnChunk() {
    return [this](long status, std::string_view chunk) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.chunks.emplace_back(chunk);
      seen_.chunk_statuses.push_back(status);
      cv_.notify_all();
    };
  }
  AsyncClient::Done OnDone() {
    return [this](const Status& error, Response response) {
      std::lock_guard<std::mutex> lock(mu_);
      ++seen_.done_count;
      seen_.error = error;
      seen_.response = std::move(response);
      seen_.done_at = Now();
      cv_.notify_all();
    };
  }
  Delivered seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  // Wait until the chunks so far make text, or done has run; false after 10 s.
  bool WaitForText(const std::string& text) { return WaitFor([&] { return seen_.text() == text; }); }
  bool WaitForDone() { return WaitFor([&] { return seen_.done_count > 0; }); }
  // True when no further chunk nor done comes within quiet.
  bool StaysQuietFor(Millis quiet) {
    std::unique_lock<std::mutex> lock(mu_);
    const size_t chunks = seen_.chunks.size();
    const int dones = seen_.done_count;
    return !cv_.wait_for(lock, quiet, [&] { return seen_.chunks.size() > chunks || seen_.done_count > dones; });
  }

 private:
  bool WaitFor(const std::function<bool()>& ready) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, ready);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  Delivered seen_;
};

// A server whose every answer is a body the test feeds.
class FedServer {
 public:
  FedServer() : feed_(std::make_shared<ChunkFeed>()), server_([feed = feed_](const FakeRequest&) {
    FakeResponse response;
    response.content_type = "application/json";
    response.feed = feed;
    return response;
  }) {}
  ChunkFeed& feed() { return *feed_; }
  std::string url() const { return server_.url() + "/v3/watch"; }

 private:
  std::shared_ptr<ChunkFeed> feed_;
  FakeHttpServer server_;
};

class AsyncClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(EventLoop::Start(&loop_).ok());
    loop_->RunSync([&] { client_ = std::make_unique<AsyncClient>(loop_.get()); });
  }
  void TearDown() override {
    loop_->RunSync([&] { client_.reset(); });  // fails what is still open, on the loop thread
    loop_->Stop();
  }

  // Opens a stream to url on the loop; probe gets what it delivers.
  AsyncClient::StreamId OpenStream(const std::string& url, Millis idle_timeout, Probe* probe) {
    Request request;
    request.method = "POST";
    request.url = url;
    request.body = R"({"create_request":{"key":"bG9jaw=="}})";
    AsyncClient::StreamId id = 0;
    loop_->RunSync([&] { id = client_->Stream(request, idle_timeout, probe->OnChunk(), probe->OnDone()); });
    return id;
  }
  size_t InFlight() {
    size_t n = 0;
    loop_->RunSync([&] { n = client_->in_flight(); });
    return n;
  }

  // Declared before the client: the client's callbacks point at them until it is gone.
  Probe probe_;
  Probe other_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<AsyncClient> client_;
};

TEST_F(AsyncClientTest, StartDeliversTheWholeAnswer) {
  FakeHttpServer server(Echo);
  Request request;
  request.method = "POST";
  request.url = server.url() + "/v3/kv/put";
  request.headers = {"X-Test: yes"};
  request.body = R"({"key":"bG9jaw==","value":"MQ=="})";
  loop_->RunSync([&] { client_->Start(request, probe_.OnDone()); });
  ASSERT_TRUE(probe_.WaitForDone());
  const Delivered seen = probe_.seen();
  EXPECT_TRUE(seen.error.ok()) << seen.error.message();
  EXPECT_EQ(seen.response.status, 201);
  EXPECT_EQ(seen.response.body, R"(POST /v3/kv/put yes {"key":"bG9jaw==","value":"MQ=="})");
  EXPECT_EQ(seen.done_count, 1);
}

TEST_F(AsyncClientTest, StartEndsByTheRequestTimeout) {
  FakeHttpServer server([](const FakeRequest&) {
    std::this_thread::sleep_for(1500ms);
    return FakeResponse{200, "text/plain", "late"};
  });
  Request request;
  request.url = server.url() + "/";
  request.timeout_ms = 200;
  loop_->RunSync([&] { client_->Start(request, probe_.OnDone()); });
  ASSERT_TRUE(probe_.WaitForDone());
  const Delivered seen = probe_.seen();
  EXPECT_EQ(seen.error.code(), Code::kIoError);
  EXPECT_NE(seen.error.message().find("no answer within timeout_ms=200"), std::string::npos)
      << seen.error.message();
  EXPECT_TRUE(seen.response.maybe_sent);
}

TEST_F(AsyncClientTest, StreamDeliversEachChunkAsTheServerSendsIt) {
  FedServer server;
  OpenStream(server.url(), 0ms, &probe_);
  const std::string first = R"({"result":{"created":true}})" "\n";
  const std::string second = R"({"result":{"events":[{"type":"DELETE"}]}})" "\n";

  server.feed().Push(first);
  ASSERT_TRUE(probe_.WaitForText(first)) << probe_.seen().text();
  EXPECT_EQ(probe_.seen().done_count, 0);  // the response is still open: the chunk came before its end
  server.feed().Push(second);
  ASSERT_TRUE(probe_.WaitForText(first + second)) << probe_.seen().text();
  EXPECT_EQ(probe_.seen().done_count, 0);

  server.feed().End();
  ASSERT_TRUE(probe_.WaitForDone());
  const Delivered seen = probe_.seen();
  EXPECT_TRUE(seen.error.ok()) << seen.error.message();
  EXPECT_EQ(seen.response.status, 200);
  EXPECT_EQ(seen.response.body, "");  // all of it went to the chunks
  EXPECT_GE(seen.chunks.size(), 2u);
  for (long status : seen.chunk_statuses) EXPECT_EQ(status, 200);
  EXPECT_EQ(seen.done_count, 1);
  EXPECT_EQ(InFlight(), 0u);
}

TEST_F(AsyncClientTest, CancelEndsTheStreamBeforeItReturns) {
  FedServer server;
  AsyncClient::StreamId id = OpenStream(server.url(), 0ms, &probe_);
  ASSERT_NE(id, 0u);
  server.feed().Push("a\n");
  ASSERT_TRUE(probe_.WaitForText("a\n"));

  int done_when_cancel_returned = -1;
  loop_->RunSync([&] {
    client_->Cancel(id);
    done_when_cancel_returned = probe_.seen().done_count;
  });
  EXPECT_EQ(done_when_cancel_returned, 1);
  EXPECT_EQ(probe_.seen().error.code(), Code::kCancelled);
  EXPECT_EQ(probe_.seen().response.status, 200);
  EXPECT_EQ(InFlight(), 0u);

  server.feed().Push("b\n");  // sent to a closed stream: nothing more may arrive
  EXPECT_TRUE(probe_.StaysQuietFor(300ms));
  loop_->RunSync([&] { client_->Cancel(id); });  // an ended stream: nothing happens
  EXPECT_EQ(probe_.seen().text(), "a\n");
  EXPECT_EQ(probe_.seen().done_count, 1);
}

TEST_F(AsyncClientTest, AChunkCallbackMayCancelItsOwnStream) {
  FedServer server;
  auto id = std::make_shared<AsyncClient::StreamId>(0);
  Request request;
  request.method = "POST";
  request.url = server.url();
  loop_->RunSync([&] {
    AsyncClient::OnChunk record = probe_.OnChunk();
    *id = client_->Stream(request, 0ms, [this, id, record](long status, std::string_view chunk) {
      record(status, chunk);
      client_->Cancel(*id);
    }, probe_.OnDone());
  });
  server.feed().Push("first\n");
  ASSERT_TRUE(probe_.WaitForDone());
  EXPECT_EQ(probe_.seen().error.code(), Code::kCancelled);
  server.feed().Push("second\n");
  EXPECT_TRUE(probe_.StaysQuietFor(300ms));
  EXPECT_EQ(probe_.seen().text(), "first\n");
  EXPECT_EQ(probe_.seen().done_count, 1);
}

TEST_F(AsyncClientTest, IdleTimeoutEndsASilentStream) {
  FedServer server;  // answers 200 with its head, then says nothing
  const TimePoint start = Now();
  OpenStream(server.url(), 300ms, &probe_);
  ASSERT_TRUE(probe_.WaitForDone());
  const Delivered seen = probe_.seen();
  EXPECT_GE(seen.done_at - start, 300ms);
  EXPECT_EQ(seen.error.code(), Code::kIoError);
  EXPECT_NE(seen.error.message().find("fell silent: nothing came for 300 ms"), std::string::npos)
      << seen.error.message();
  EXPECT_EQ(seen.done_count, 1);
  EXPECT_EQ(InFlight(), 0u);
}

TEST_F(AsyncClientTest, IdleTimeoutCountsSilenceNotTheWholeStream) {
  FedServer server;
  const TimePoint start = Now();
  OpenStream(server.url(), 1000ms, &probe_);
  std::string sent;
  // 2.5 s in all, never 1 s of silence: a line every 100 ms leaves a busy machine 900 ms.
  for (int i = 0; i < 25; ++i) {
    std::this_thread::sleep_for(100ms);
    const std::string line = "{\"n\":" + std::to_string(i) + "}\n";
    sent += line;
    server.feed().Push(line);
  }
  server.feed().End();
  ASSERT_TRUE(probe_.WaitForDone());
  const Delivered seen = probe_.seen();
  EXPECT_TRUE(seen.error.ok()) << seen.error.message();
  EXPECT_GE(seen.done_at - start, 2000ms);  // lived well past its idle timeout
  EXPECT_EQ(seen.text(), sent);
}

TEST_F(AsyncClientTest, ShutdownFailsAnOpenStreamAndLaterOnes) {
  FedServer server;
  OpenStream(server.url(), 0ms, &probe_);
  server.feed().Push("a\n");
  ASSERT_TRUE(probe_.WaitForText("a\n"));
  loop_->RunSync([&] { client_->Shutdown("client closed"); });
  const Delivered seen = probe_.seen();
  EXPECT_EQ(seen.done_count, 1);
  EXPECT_EQ(seen.error.code(), Code::kIoError);
  EXPECT_EQ(seen.error.message(), "client closed");

  int done_inside_the_call = -1;
  loop_->RunSync([&] {
    Request request;
    request.url = server.url();
    EXPECT_EQ(client_->Stream(request, 0ms, other_.OnChunk(), other_.OnDone()), 0u);
    done_inside_the_call = other_.seen().done_count;
  });
  EXPECT_EQ(done_inside_the_call, 0);  // never inside the call
  ASSERT_TRUE(other_.WaitForDone());
  EXPECT_EQ(other_.seen().error.code(), Code::kIoError);
  EXPECT_EQ(other_.seen().error.message(), "client closed");
}

// The count of open sockets (the dlock_connections gauge): a request's kept-alive connection
// and a stream's count while open; Shutdown closes the multi's cache and counts them all out,
// and so does a connect refused.
TEST_F(AsyncClientTest, CountsTheSocketsItHasOpen) {
  auto count = std::make_shared<ConnectionCount>();
  std::unique_ptr<AsyncClient> client;
  loop_->RunSync([&] { client = std::make_unique<AsyncClient>(loop_.get(), count); });
  FakeHttpServer server(Echo);
  FedServer fed;
  Request request;
  request.url = server.url() + "/";
  loop_->RunSync([&] { client->Start(request, probe_.OnDone()); });
  ASSERT_TRUE(probe_.WaitForDone());
  EXPECT_TRUE(probe_.seen().error.ok()) << probe_.seen().error.message();
  EXPECT_EQ(count->open(), 1);  // kept alive in the multi's cache
  Request watch;
  watch.method = "POST";
  watch.url = fed.url();
  loop_->RunSync([&] { client->Stream(watch, 0ms, other_.OnChunk(), other_.OnDone()); });
  fed.feed().Push("a\n");
  ASSERT_TRUE(other_.WaitForText("a\n"));
  EXPECT_EQ(count->open(), 2);
  Probe refused_probe;
  Request refused;
  refused.url = "http://127.0.0.1:1/";  // nothing listens on port 1
  loop_->RunSync([&] { client->Start(refused, refused_probe.OnDone()); });
  ASSERT_TRUE(refused_probe.WaitForDone());
  EXPECT_EQ(refused_probe.seen().error.code(), Code::kIoError);
  EXPECT_EQ(count->open(), 2) << "the refused socket was not counted out";
  loop_->RunSync([&] { client->Shutdown("client closed"); });
  EXPECT_EQ(count->open(), 0);
  loop_->RunSync([&] { client.reset(); });
  EXPECT_EQ(count->open(), 0);
}

}  // namespace
}  // namespace dlock::http
