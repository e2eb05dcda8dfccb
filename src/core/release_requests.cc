#include "core/release_requests.h"

#include <algorithm>

#include "core/client.h"

namespace dlock {

void ReleaseRequestListener::OnReleaseRequested(const std::string& id, const std::string& reason) {
  std::shared_ptr<Client> client = client_.lock();
  if (client == nullptr) return;
  // Posted: the backend may be holding its own locks, and the handler may call back in.
  client->loop()->Post([listener = weak_from_this(), id, reason] {
    if (auto l = listener.lock()) l->Deliver(id, reason);
  });
}

void ReleaseRequestListener::Deliver(const std::string& id, const std::string& reason) {
  std::shared_ptr<Client> client = client_.lock();
  std::shared_ptr<LockState> lock = lock_.lock();
  if (client == nullptr || lock == nullptr) return;
  if (std::find(heard_.begin(), heard_.end(), id) != heard_.end()) return;
  heard_.push_back(id);
  if (heard_.size() > kRemembered) heard_.pop_front();
  std::lock_guard<std::recursive_mutex> guard(lock->callback_mu);
  if (!lock->IsValid() || !lock->on_release_requested) return;
  client->RunCallback([&] { lock->on_release_requested(lock->name, lock->fencing_token, reason); });
}

}  // namespace dlock
