#include "dynamodb/curl_multi.h"

#include <event2/event.h>

namespace dlock::dynamodb {
namespace {

// Connections to the endpoint at once; further transfers wait in curl's queue. Enough for a
// burst of renewals, few enough not to look like a flood to the server.
constexpr long kMaxHostConnections = 32;
constexpr size_t kMaxIdleTransfers = 64;

}  // namespace

CurlMulti::CurlMulti(EventLoop* loop) : loop_(loop) {
  EnsureCurlGlobalInit();
  multi_ = curl_multi_init();
  timer_ = evtimer_new(loop_->base(), &CurlMulti::OnTimerEvent, this);
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &CurlMulti::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &CurlMulti::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, kMaxHostConnections);
  }
}

CurlMulti::~CurlMulti() {
  Shutdown("client closed");
  if (timer_ != nullptr) event_free(timer_);
}

void CurlMulti::Start(const HttpRequest& request, Done done) {
  std::string error;
  if (shut_down_) error = shutdown_reason_;
  if (multi_ == nullptr || timer_ == nullptr) error = "curl_multi_init failed";
  std::unique_ptr<EasyTransfer> easy;
  if (error.empty()) {
    if (!idle_.empty()) {
      easy = std::move(idle_.back());
      idle_.pop_back();
    } else {
      easy = std::make_unique<EasyTransfer>();
    }
    if (easy->handle() == nullptr) error = "curl_easy_init failed";
  }
  if (error.empty()) {
    easy->Prepare(request);
    CURLMcode code = curl_multi_add_handle(multi_, easy->handle());
    if (code != CURLM_OK) error = std::string("curl_multi_add_handle: ") + curl_multi_strerror(code);
  }
  if (!error.empty()) {  // fail later, never inside the call
    loop_->Post([done = std::move(done), error] { done(Status::IoError(error), HttpResponse()); });
    return;
  }
  CURL* handle = easy->handle();
  active_.emplace(handle, Transfer{std::move(easy), std::move(done)});
  // curl asked for a 0 ms timer from add_handle: the transfer starts on the next loop pass.
}

int CurlMulti::OnSocket(CURL*, curl_socket_t fd, int what, void* userp, void* socketp) {
  auto* self = static_cast<CurlMulti*>(userp);
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
    event_assign(watch->ev, self->loop_->base(), fd, kinds, &CurlMulti::OnSocketEvent, watch);
  } else {
    watch->ev = event_new(self->loop_->base(), fd, kinds, &CurlMulti::OnSocketEvent, watch);
  }
  if (watch->ev != nullptr) event_add(watch->ev, nullptr);
  return 0;
}

int CurlMulti::OnTimer(CURLM*, long timeout_ms, void* userp) {
  auto* self = static_cast<CurlMulti*>(userp);
  if (self->timer_ == nullptr) return 0;  // shut down
  if (timeout_ms < 0) {
    evtimer_del(self->timer_);
    return 0;
  }
  timeval tv;
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  evtimer_add(self->timer_, &tv);
  return 0;
}

void CurlMulti::OnSocketEvent(int fd, short kind, void* arg) {
  auto* watch = static_cast<SocketWatch*>(arg);
  CurlMulti* self = watch->self;  // watch may be freed inside socket_action
  int action = ((kind & EV_READ) ? CURL_CSELECT_IN : 0) | ((kind & EV_WRITE) ? CURL_CSELECT_OUT : 0);
  int running = 0;
  curl_multi_socket_action(self->multi_, fd, action, &running);
  self->FinishCompleted();
}

void CurlMulti::OnTimerEvent(int, short, void* arg) {
  auto* self = static_cast<CurlMulti*>(arg);
  int running = 0;
  curl_multi_socket_action(self->multi_, CURL_SOCKET_TIMEOUT, 0, &running);
  self->FinishCompleted();
}

void CurlMulti::FinishCompleted() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL* handle = msg->easy_handle;
    CURLcode code = msg->data.result;
    curl_multi_remove_handle(multi_, handle);
    auto it = active_.find(handle);
    if (it == active_.end()) continue;
    Transfer transfer = std::move(it->second);
    active_.erase(it);
    HttpResponse response;
    Status s = transfer.easy->Finish(code, &response);
    if (idle_.size() < kMaxIdleTransfers) idle_.push_back(std::move(transfer.easy));
    // Last: done may start new transfers (which is why the entry is gone already).
    transfer.done(s, std::move(response));
  }
}

void CurlMulti::FreeWatch(SocketWatch* watch) {
  if (watch->ev != nullptr) event_free(watch->ev);
  curl_multi_assign(multi_, watch->fd, nullptr);
  watches_.erase(watch);
  delete watch;
}

void CurlMulti::Shutdown(const std::string& why) {
  if (shut_down_) return;
  shut_down_ = true;
  shutdown_reason_ = why;
  std::unordered_map<CURL*, Transfer> failing;
  failing.swap(active_);
  for (auto& [handle, transfer] : failing) curl_multi_remove_handle(multi_, handle);
  if (timer_ != nullptr) event_free(timer_);  // nothing of ours stays on a caller's base
  timer_ = nullptr;
  for (auto& [handle, transfer] : failing) {
    HttpResponse response;
    response.maybe_sent = true;
    transfer.done(Status::IoError(why), std::move(response));
  }
  idle_.clear();
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

}  // namespace dlock::dynamodb
