// Client: one backend, its event loop thread, its heartbeats, and the locks it holds.
// Implements the waiting policy of DESIGN guarantee 5 on top of Backend.
#ifndef DLOCK_CORE_CLIENT_H_
#define DLOCK_CORE_CLIENT_H_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/backend.h"
#include "core/options.h"
#include "core/status.h"
#include "loop/event_loop.h"
#include "loop/heartbeats.h"

namespace dlock {

class Client {
 public:
  static Status Open(const std::string& url, std::shared_ptr<Client>* out);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Status Acquire(const std::string& name, const AcquireOptions& options,
                 std::shared_ptr<LockState>* out);
  Status Release(const std::shared_ptr<LockState>& lock);
  Status Extend(const std::shared_ptr<LockState>& lock, uint64_t lease_ms);
  // Stops heartbeats, releases every held lock, stops the loop thread. Idempotent.
  void Close();

  Backend* backend() { return backend_.get(); }
  Heartbeats* heartbeats() { return heartbeats_.get(); }

 private:
  Client() = default;
  Status NotHeldStatus(const LockState& lock) const;
  void Forget(const std::shared_ptr<LockState>& lock);

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Heartbeats> heartbeats_;
  std::mutex mu_;
  bool closed_ = false;
  std::unordered_map<LockState*, std::shared_ptr<LockState>> held_;
};

}  // namespace dlock

#endif  // DLOCK_CORE_CLIENT_H_
