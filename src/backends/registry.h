// The backend registry: URL scheme -> how to open a backend and how to prepare what it needs.
// The core and the C API find backends only through here; registry.cc is the one file that
// names them.
#ifndef DLOCK_BACKENDS_REGISTRY_H_
#define DLOCK_BACKENDS_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/client.h"
#include "core/status.h"
#include "core/url.h"
#include "loop/event_loop.h"

namespace dlock {

struct BackendEntry {
  const char* scheme;  // "redis", "redis+unix", "dynamodb", ...
  // A backend for url, whose connections and timers run on loop.
  Status (*open)(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
  // Creates what the backend needs before clients can use it (a DynamoDB table), waiting up to
  // wait_ms for it to be ready (-1 = no limit); Ok at once when there is nothing to create.
  Status (*prepare)(const Url& url, int64_t wait_ms);
};

// The entry for url's scheme, or an EINVAL naming the schemes this build supports.
Status FindBackend(const Url& url, const BackendEntry** out);

// dlock_client_open and dlock_client_open_evbase: the URL parsed, its backend found here, then
// the client opened with it (a bad URL starts no thread).
Status OpenClient(const std::string& url, std::shared_ptr<Client>* out);
Status OpenClientOnBase(const std::string& url, event_base* base, std::shared_ptr<Client>* out);
// dlock_client_open_hooks: the same on the caller's loop, reached through host (which a bad
// URL never calls).
Status OpenClientOnHost(const std::string& url, std::unique_ptr<HostLoop> host,
                        std::shared_ptr<Client>* out);
// dlock_backend_prepare: creates what the URL's backend needs before use.
Status PrepareBackend(const std::string& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_BACKENDS_REGISTRY_H_
