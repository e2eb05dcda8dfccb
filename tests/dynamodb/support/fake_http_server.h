// A tiny HTTP/1.1 server on 127.0.0.1 for the faults and endpoints dynalite cannot provide: a
// container-credentials endpoint, an EC2 metadata service, a proxy that throttles before
// passing calls through to dynalite, a server answering errors or garbage. Keep-alive, one
// thread per connection, requests with Content-Length bodies. The handler runs on those
// threads; it must be thread-safe.
#ifndef DLOCK_TESTS_DYNAMODB_SUPPORT_FAKE_HTTP_SERVER_H_
#define DLOCK_TESTS_DYNAMODB_SUPPORT_FAKE_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
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

struct FakeResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
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
