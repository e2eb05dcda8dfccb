// A curl multi handle driven by the loop: curl_multi_socket_action, with curl's socket and
// timer callbacks mapped onto the loop's fd watches and timers, as in curl's hiperfifo example. It only
// drives; after every step of curl's (outside any curl callback) it calls after_step, where the
// owner (AsyncClient) hands data over and reads finished transfers. Loop thread only.
#ifndef DLOCK_HTTP_MULTI_ON_LOOP_H_
#define DLOCK_HTTP_MULTI_ON_LOOP_H_

#include <curl/curl.h>

#include <functional>
#include <memory>
#include <unordered_set>

#include "loop/event_loop.h"
#include "loop/fd_watch.h"

namespace dlock::http {

class MultiOnLoop {
 public:
  MultiOnLoop(EventLoop* loop, std::function<void()> after_step);
  ~MultiOnLoop() { Close(); }
  MultiOnLoop(const MultiOnLoop&) = delete;
  MultiOnLoop& operator=(const MultiOnLoop&) = delete;

  // Null when curl_multi_init failed, or after Close.
  CURLM* multi() const { return multi_; }
  // Closes the cached connections and frees every event of ours, so that nothing stays on a
  // caller's base. Every easy handle must have been removed first. Idempotent.
  void Close();

 private:
  struct SocketWatch {
    MultiOnLoop* self;
    curl_socket_t fd;
    std::unique_ptr<FdWatch> ready;
  };
  static int OnSocket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp);
  static int OnTimer(CURLM* multi, long timeout_ms, void* userp);
  static void OnSocketReady(void* arg, bool readable, bool writable);
  void OnTimeout();
  void FreeWatch(SocketWatch* watch);

  EventLoop* loop_;
  std::function<void()> after_step_;
  CURLM* multi_ = nullptr;
  Timer timer_;  // curl's one timer
  std::unordered_set<SocketWatch*> watches_;
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_MULTI_ON_LOOP_H_
