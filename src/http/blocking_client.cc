#include "http/blocking_client.h"

namespace dlock::http {
namespace {

// Idle easy handles kept (each holds its own kept-alive connection).
constexpr size_t kMaxIdleBlockingTransfers = 64;

}  // namespace

Status BlockingClient::Perform(const Request& request, Response* response) {
  std::unique_ptr<EasyTransfer> transfer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      transfer = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (transfer == nullptr) transfer = std::make_unique<EasyTransfer>(connections_);
  if (transfer->handle() == nullptr) return Status::Internal("curl_easy_init failed");
  transfer->Prepare(request);
  CURLcode code = transfer->PerformBlocking();
  Status s = transfer->Finish(code, response);
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleBlockingTransfers) idle_.push_back(std::move(transfer));
  return s;
}

}  // namespace dlock::http
