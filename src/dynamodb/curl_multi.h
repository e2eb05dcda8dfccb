// HTTP over libcurl, the async half: one curl multi handle driven by the client's libevent
// loop (curl_multi_socket_action, with curl's socket and timer callbacks mapped onto libevent
// events, as in curl's hiperfifo example). Heartbeat renewals and async calls are transfers
// in flight at once over kept-alive connections. Loop thread only.
#ifndef DLOCK_DYNAMODB_CURL_MULTI_H_
#define DLOCK_DYNAMODB_CURL_MULTI_H_

#include <curl/curl.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dynamodb/http.h"
#include "loop/event_loop.h"

struct event;

namespace dlock::dynamodb {

class CurlMulti {
 public:
  using Done = std::function<void(const Status& error, HttpResponse response)>;

  explicit CurlMulti(EventLoop* loop);
  ~CurlMulti();
  CurlMulti(const CurlMulti&) = delete;
  CurlMulti& operator=(const CurlMulti&) = delete;

  // Starts request; done runs exactly once on the loop thread, never inside Start. error is
  // DLOCK_EIO when no HTTP answer came (response.maybe_sent says whether it may have arrived).
  void Start(const HttpRequest& request, Done done);
  // Fails every transfer in flight with EIO(why), closes the connections; later Starts fail.
  void Shutdown(const std::string& why);
  size_t in_flight() const { return active_.size(); }

 private:
  struct Transfer {
    std::unique_ptr<EasyTransfer> easy;
    Done done;
  };
  struct SocketWatch {
    CurlMulti* self;
    curl_socket_t fd;
    event* ev;
  };
  static int OnSocket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp);
  static int OnTimer(CURLM* multi, long timeout_ms, void* userp);
  static void OnSocketEvent(int fd, short kind, void* arg);
  static void OnTimerEvent(int fd, short kind, void* arg);
  void FinishCompleted();
  void FreeWatch(SocketWatch* watch);

  EventLoop* loop_;
  CURLM* multi_ = nullptr;
  event* timer_ = nullptr;
  bool shut_down_ = false;
  std::string shutdown_reason_;
  std::unordered_map<CURL*, Transfer> active_;
  std::unordered_set<SocketWatch*> watches_;
  std::vector<std::unique_ptr<EasyTransfer>> idle_;
};

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_CURL_MULTI_H_
