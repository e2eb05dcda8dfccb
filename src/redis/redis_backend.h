// The Redis backends: one server (redis://, redis+unix://), a Redis Cluster (redis-cluster://)
// and a master followed through Sentinel (redis-sentinel://): one Backend over the lock
// operations, on a channel per topology.
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
Status NewRedisSentinelBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
Status PrepareRedisSentinel(const Url& url, int64_t wait_ms);
Status NewRedlockBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
Status PrepareRedlock(const Url& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_REDIS_REDIS_BACKEND_H_
