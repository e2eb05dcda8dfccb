// A holder's ears for release requests (dlock_request_release): one per held lock whose options
// set on_release_requested. The backend tells it on the loop thread (a pub/sub message, a watch
// event, a renewal's answer), possibly under the backend's own locks; it posts the delivery to
// a later turn of the loop, drops a request it has heard already (Redlock's masters each publish
// it) and calls the handler only while the lock is still held and valid, under the lock's
// callback_mu, so that once release returns the handler is neither running nor going to run.
#ifndef DLOCK_CORE_RELEASE_REQUESTS_H_
#define DLOCK_CORE_RELEASE_REQUESTS_H_

#include <deque>
#include <memory>
#include <string>

#include "core/backend.h"

namespace dlock {

class Client;

class ReleaseRequestListener : public ReleaseWatcher,
                               public std::enable_shared_from_this<ReleaseRequestListener> {
 public:
  ReleaseRequestListener(std::weak_ptr<Client> client, std::weak_ptr<LockState> lock)
      : client_(std::move(client)), lock_(std::move(lock)) {}
  void OnWatchReady(bool /*live*/) override {}
  void OnReleased() override {}  // a holder does not wait
  void OnReleaseRequested(const std::string& id, const std::string& reason) override;

 private:
  // Loop thread: calls the handler unless this request was heard already or the lock is gone.
  void Deliver(const std::string& id, const std::string& reason);
  // How many request ids are remembered, to drop repeats (one per Redlock master).
  static constexpr size_t kRemembered = 16;

  const std::weak_ptr<Client> client_;
  const std::weak_ptr<LockState> lock_;
  std::deque<std::string> heard_;  // loop thread only
};

}  // namespace dlock

#endif  // DLOCK_CORE_RELEASE_REQUESTS_H_
