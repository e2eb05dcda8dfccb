// HTTP over libcurl, the blocking half: requests on the caller's thread, on a pool of easy
// handles, so that callers' threads reuse kept-alive connections and never serialize on one.
// (The async half, on the client's loop, is async_client.h.)
#ifndef DLOCK_HTTP_BLOCKING_CLIENT_H_
#define DLOCK_HTTP_BLOCKING_CLIENT_H_

#include <memory>
#include <mutex>
#include <vector>

#include "core/connection_count.h"
#include "core/status.h"
#include "http/easy_transfer.h"
#include "http/request.h"

namespace dlock::http {

// Thread-safe.
class BlockingClient {
 public:
  // connections: counts the sockets its handles open (EasyTransfer); null counts nothing (the
  // credentials' fetches, which are not the backend's servers).
  explicit BlockingClient(std::shared_ptr<ConnectionCount> connections = nullptr)
      : connections_(std::move(connections)) {
    EnsureCurlGlobalInit();
  }
  // Performs request; an error only when no HTTP answer came (DLOCK_EIO), with
  // response->maybe_sent saying whether the server may have acted on it.
  Status Perform(const Request& request, Response* response);

 private:
  const std::shared_ptr<ConnectionCount> connections_;
  std::mutex mu_;
  std::vector<std::unique_ptr<EasyTransfer>> idle_;
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_BLOCKING_CLIENT_H_
