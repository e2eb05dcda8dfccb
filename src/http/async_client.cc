#include "http/async_client.h"

#include <algorithm>

namespace dlock::http {
namespace {

constexpr size_t kMaxIdleAsyncTransfers = 64;

}  // namespace

AsyncClient::AsyncClient(EventLoop* loop, std::shared_ptr<ConnectionCount> connections)
    : loop_(loop),
      connections_(std::move(connections)),
      driver_(loop, [this] { AfterStep(); }),
      idle_check_(loop, [this] { CheckIdle(); }) {}

AsyncClient::Transfer* AsyncClient::Launch(const Request& request, Bound bound, Done done) {
  std::string error;
  if (shut_down_) {
    error = shutdown_reason_;
  } else if (driver_.multi() == nullptr) {
    error = "curl_multi_init failed";
  }
  std::unique_ptr<EasyTransfer> easy;
  if (error.empty()) {
    if (!idle_.empty()) {
      easy = std::move(idle_.back());
      idle_.pop_back();
    } else {
      easy = std::make_unique<EasyTransfer>(connections_);
    }
    if (easy->handle() == nullptr) error = "curl_easy_init failed";
  }
  if (error.empty()) {
    easy->Prepare(request, bound);
    CURLMcode code = curl_multi_add_handle(driver_.multi(), easy->handle());
    if (code != CURLM_OK) error = std::string("curl_multi_add_handle: ") + curl_multi_strerror(code);
  }
  if (!error.empty()) {  // fail later, never inside the call
    loop_->Post([done = std::move(done), error] { done(Status::IoError(error), Response()); });
    return nullptr;
  }
  // curl asked for a 0 ms timer from add_handle: the transfer starts on the next loop pass.
  Transfer& transfer = active_[easy->handle()];
  transfer.easy = std::move(easy);
  transfer.done = std::move(done);
  return &transfer;
}

void AsyncClient::Start(const Request& request, Done done) {
  Launch(request, Bound::kWholeCall, std::move(done));
}

AsyncClient::StreamId AsyncClient::Stream(const Request& request, Millis idle_timeout,
                                          OnChunk on_chunk, Done done) {
  Transfer* transfer = Launch(request, Bound::kConnectOnly, std::move(done));
  if (transfer == nullptr) return 0;
  transfer->id = ++last_stream_id_;
  transfer->on_chunk = std::make_shared<OnChunk>(std::move(on_chunk));
  transfer->idle_timeout = std::max(idle_timeout, Millis(0));
  transfer->last_data = Now();
  streams_.emplace(transfer->id, transfer->easy->handle());
  if (transfer->idle_timeout.count() > 0) ArmIdleCheck();
  return transfer->id;
}

void AsyncClient::Cancel(StreamId id) { EndStream(id, Status::Cancelled("stream cancelled")); }

void AsyncClient::AfterStep() {
  DeliverChunks();
  FinishCompleted();
}

void AsyncClient::DeliverChunks() {
  if (streams_.empty()) return;
  std::vector<StreamId> fed;
  for (const auto& [id, handle] : streams_) {
    if (!active_.at(handle).easy->body().empty()) fed.push_back(id);
  }
  for (StreamId id : fed) {
    auto stream = streams_.find(id);
    if (stream == streams_.end()) continue;  // ended by an earlier chunk's callback
    Transfer& transfer = active_.at(stream->second);
    std::string chunk = std::move(transfer.easy->body());
    transfer.easy->body().clear();
    transfer.last_data = Now();
    std::shared_ptr<OnChunk> on_chunk = transfer.on_chunk;  // the call may end this stream
    (*on_chunk)(transfer.easy->status(), chunk);
  }
}

void AsyncClient::FinishCompleted() {
  int left = 0;
  while (CURLMsg* msg = driver_.multi() != nullptr ? curl_multi_info_read(driver_.multi(), &left)
                                                   : nullptr) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL* handle = msg->easy_handle;
    CURLcode code = msg->data.result;
    curl_multi_remove_handle(driver_.multi(), handle);
    auto it = active_.find(handle);
    if (it == active_.end()) continue;
    Transfer transfer = std::move(it->second);
    active_.erase(it);
    if (transfer.id != 0) streams_.erase(transfer.id);
    Response response;
    Status s = transfer.easy->Finish(code, &response);
    Recycle(std::move(transfer.easy));
    // Last: done may start new transfers (which is why the entry is gone already).
    transfer.done(s, std::move(response));
  }
}

void AsyncClient::EndStream(StreamId id, const Status& error) {
  auto stream = streams_.find(id);
  if (stream == streams_.end()) return;
  CURL* handle = stream->second;
  streams_.erase(stream);
  auto node = active_.extract(handle);
  Transfer& transfer = node.mapped();
  curl_multi_remove_handle(driver_.multi(), handle);  // stops it; curl closes its connection
  Response response;
  response.status = transfer.easy->status();
  response.maybe_sent = true;
  Recycle(std::move(transfer.easy));
  transfer.done(error, std::move(response));
}

void AsyncClient::CheckIdle() {
  const TimePoint now = Now();
  std::vector<std::pair<StreamId, Status>> silent;
  for (const auto& [id, handle] : streams_) {
    const Transfer& transfer = active_.at(handle);
    if (transfer.idle_timeout.count() == 0 || now - transfer.last_data < transfer.idle_timeout) continue;
    silent.emplace_back(id, Status::IoError("the stream from " + transfer.easy->url() +
                                            " fell silent: nothing came for " +
                                            std::to_string(transfer.idle_timeout.count()) +
                                            " ms (its idle timeout)"));
  }
  for (const auto& [id, error] : silent) EndStream(id, error);
  ArmIdleCheck();
}

void AsyncClient::ArmIdleCheck() {
  TimePoint first = TimePoint::max();
  for (const auto& [id, handle] : streams_) {
    const Transfer& transfer = active_.at(handle);
    if (transfer.idle_timeout.count() > 0) first = std::min(first, transfer.last_data + transfer.idle_timeout);
  }
  if (first == TimePoint::max()) {
    idle_check_.Cancel();
  } else {
    idle_check_.StartAt(first);
  }
}

void AsyncClient::Recycle(std::unique_ptr<EasyTransfer> easy) {
  if (idle_.size() < kMaxIdleAsyncTransfers) idle_.push_back(std::move(easy));
}

void AsyncClient::Shutdown(const std::string& why) {
  if (shut_down_) return;
  shut_down_ = true;
  shutdown_reason_ = why;
  std::unordered_map<CURL*, Transfer> failing;
  failing.swap(active_);
  streams_.clear();
  for (auto& [handle, transfer] : failing) curl_multi_remove_handle(driver_.multi(), handle);
  idle_check_.Free();  // nothing of ours stays on a caller's base
  idle_.clear();
  driver_.Close();
  // Last: done may call back in (and fail at once: we are shut down).
  for (auto& [handle, transfer] : failing) {
    Response response;
    response.maybe_sent = true;
    transfer.done(Status::IoError(why), std::move(response));
  }
}

}  // namespace dlock::http
