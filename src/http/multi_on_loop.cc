#include "http/multi_on_loop.h"

#include <event2/event.h>

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
    self->watches_.insert(watch);
    curl_multi_assign(self->multi_, fd, watch);
  }
  short kinds = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
                ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
  if (watch->ev != nullptr) {
    event_del(watch->ev);
    event_assign(watch->ev, self->loop_->base(), fd, kinds, &MultiOnLoop::OnSocketEvent, watch);
  } else {
    watch->ev = event_new(self->loop_->base(), fd, kinds, &MultiOnLoop::OnSocketEvent, watch);
  }
  if (watch->ev != nullptr) event_add(watch->ev, nullptr);
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

void MultiOnLoop::OnSocketEvent(int fd, short kind, void* arg) {
  auto* watch = static_cast<SocketWatch*>(arg);
  MultiOnLoop* self = watch->self;  // watch may be freed inside socket_action
  int action = ((kind & EV_READ) ? CURL_CSELECT_IN : 0) | ((kind & EV_WRITE) ? CURL_CSELECT_OUT : 0);
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
  if (watch->ev != nullptr) event_free(watch->ev);
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
  for (SocketWatch* watch : watches_) {
    if (watch->ev != nullptr) event_free(watch->ev);
    delete watch;
  }
  watches_.clear();
}

}  // namespace dlock::http
