// The Redis backends: one server (redis://, redis+unix://) and a Redis Cluster
// (redis-cluster://), one Backend over the lock operations on a channel.
#ifndef DLOCK_REDIS_REDIS_BACKEND_H_
#define DLOCK_REDIS_REDIS_BACKEND_H_

#include <memory>

#include "core/backend.h"
#include "core/url.h"
#include "loop/event_loop.h"

namespace dlock {

Status NewRedisBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
// Redis needs nothing created up front: checks the URL only.
Status PrepareRedis(const Url& url, int64_t wait_ms);
Status NewRedisClusterBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
Status PrepareRedisCluster(const Url& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_REDIS_REDIS_BACKEND_H_
