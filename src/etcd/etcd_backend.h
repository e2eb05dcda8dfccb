// The etcd backend (etcd:// URLs): lock_protocol.h for the protocol, etcd_config.h for the URL,
// watches.h for release notifications.
#ifndef DLOCK_ETCD_ETCD_BACKEND_H_
#define DLOCK_ETCD_ETCD_BACKEND_H_

#include <memory>

#include "core/backend.h"
#include "core/url.h"
#include "loop/event_loop.h"

namespace dlock {

Status NewEtcdBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
// Nothing to create: checks the URL only.
Status PrepareEtcd(const Url& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_ETCD_ETCD_BACKEND_H_
