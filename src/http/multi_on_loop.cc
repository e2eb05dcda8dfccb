#include "http/multi_on_loop.h"

#include "http/cloexec.h"
#include "http/easy_transfer.h"

namespace dlock::http {
namespace {

// Connections to one host at once; further transfers wait in curl's queue. Enough for a burst
// of renewals, few enough not to look like a flood to the server.
constexpr long kMaxHostConnections = 32;

}  // namespace

MultiOnLoop::MultiOnLoop(EventLoop* loop, std::function<void()> after_step)
    : loop_(loop), after_step_(std::move(after_step)), timer_(loop, [this] { OnTimeout(); }) {
  EnsureCurlGlobalInit();
  multi_ = NewMultiCloexec();  // its wake-up pair close-on-exec too
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &MultiOnLoop::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &MultiOnLoop::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, kMaxHostConnections);
  }
}

int MultiOnLoop::OnSocket(CURL*, curl_socket_t fd, int what, void* userp, void* socketp) {
  auto* self = static_cast<MultiOnLoop*>(userp);
  auto* watch = static_cast<SocketWatch*>(socketp);
  if (what == CURL_POLL_REMOVE) {
    if (watch != nullptr) self->FreeWatch(watch);
    return 0;
  }
  if (watch == nullptr) {
    watch = new SocketWatch{self, fd, nullptr};
    watch->ready = std::make_unique<FdWatch>(self->loop_, fd, &MultiOnLoop::OnSocketReady, watch);
    self->watches_.insert(watch);
    curl_multi_assign(self->multi_, fd, watch);
  }
  watch->ready->Want((what & CURL_POLL_IN) != 0, (what & CURL_POLL_OUT) != 0);
  return 0;
}

int MultiOnLoop::OnTimer(CURLM*, long timeout_ms, void* userp) {
  auto* self = static_cast<MultiOnLoop*>(userp);
  if (timeout_ms < 0) {
    self->timer_.Cancel();
  } else {
    self->timer_.StartAfter(Millis(timeout_ms));  // does nothing once closed
  }
  return 0;
}

void MultiOnLoop::OnSocketReady(void* arg, bool readable, bool writable) {
  auto* watch = static_cast<SocketWatch*>(arg);
  MultiOnLoop* self = watch->self;  // watch may be freed inside socket_action
  const curl_socket_t fd = watch->fd;
  int action = (readable ? CURL_CSELECT_IN : 0) | (writable ? CURL_CSELECT_OUT : 0);
  int running = 0;
  curl_multi_socket_action(self->multi_, fd, action, &running);
  self->after_step_();
}

void MultiOnLoop::OnTimeout() {
  int running = 0;
  curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
  after_step_();
}

void MultiOnLoop::FreeWatch(SocketWatch* watch) {
  curl_multi_assign(multi_, watch->fd, nullptr);
  watches_.erase(watch);
  delete watch;
}

void MultiOnLoop::Close() {
  timer_.Free();  // nothing of ours stays on a caller's base
  if (multi_ != nullptr) {
    curl_multi_cleanup(multi_);  // closes the cached connections (may call OnSocket REMOVE)
    multi_ = nullptr;
  }
  for (SocketWatch* watch : watches_) delete watch;
  watches_.clear();
}

}  // namespace dlock::http
