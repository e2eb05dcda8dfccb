// A tiny HTTP/1.1 server on 127.0.0.1 for the faults and endpoints dynalite cannot provide: a
// container-credentials endpoint, an EC2 metadata service, a proxy that throttles before
// passing calls through to dynalite, a server answering errors or garbage, a body streamed
// while the test writes it (ChunkFeed). Keep-alive, one thread per connection, requests with
// Content-Length bodies. The handler runs on those threads; it must be thread-safe.
#ifndef DLOCK_TESTS_DYNAMODB_SUPPORT_FAKE_HTTP_SERVER_H_
#define DLOCK_TESTS_DYNAMODB_SUPPORT_FAKE_HTTP_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dlock_test {

struct FakeRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

// A body the test writes while the server sends it (Transfer-Encoding: chunked): each Push
// goes out at once as one HTTP chunk, End finishes the response. Until then the connection
// stays open, silent while nothing is pushed. Thread-safe.
class ChunkFeed {
 public:
  void Push(std::string chunk);
  void End();
  // The server's side: waits for the next chunk; false once the feed ended or stopping is set.
  bool Next(const std::atomic<bool>& stopping, std::string* chunk);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  bool ended_ = false;
};

struct FakeResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::shared_ptr<ChunkFeed> feed = nullptr;  // if set, the body comes from it instead
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeResponse(const FakeRequest&)>;
  explicit FakeHttpServer(Handler handler);
  ~FakeHttpServer();  // closes the listener and every connection, joins the threads
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd);
  bool SendFed(int fd, const FakeResponse& response);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<int> connections_;
};

// Sends request on to base_url (same method, path, body and headers except Host) and returns
// the answer: how a proxy passes a call through to dynalite.
FakeResponse ForwardTo(const std::string& base_url, const FakeRequest& request);

}  // namespace dlock_test

#endif  // DLOCK_TESTS_DYNAMODB_SUPPORT_FAKE_HTTP_SERVER_H_
