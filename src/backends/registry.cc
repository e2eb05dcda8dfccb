// The one file that names backends: a backend is its folder (with its sources.cmake) plus one
// line here.
#include "backends/registry.h"

#include "redis/redis_backend.h"
#if DLOCK_WITH_DYNAMODB
#include "dynamodb/dynamodb_backend.h"
#endif
#if DLOCK_WITH_ETCD
#include "etcd/etcd_backend.h"
#endif
#if DLOCK_WITH_POSTGRES
#include "postgres/postgres_backend.h"
#endif

namespace dlock {
namespace {

const BackendEntry kBackends[] = {
    {"redis", NewRedisBackend, PrepareRedis},
    {"redis+unix", NewRedisBackend, PrepareRedis},
    {"rediss", NewRedisBackend, PrepareRedis},
    {"redis-cluster", NewRedisClusterBackend, PrepareRedisCluster},
    {"redis-sentinel", NewRedisSentinelBackend, PrepareRedisSentinel},
    {"redlock", NewRedlockBackend, PrepareRedlock},
#if DLOCK_WITH_DYNAMODB
    {"dynamodb", NewDynamoDbBackend, PrepareDynamoDb},
#endif
#if DLOCK_WITH_ETCD
    {"etcd", NewEtcdBackend, PrepareEtcd},
#endif
#if DLOCK_WITH_POSTGRES
    {"postgres", NewPostgresBackend, PreparePostgres},
    {"postgresql", NewPostgresBackend, PreparePostgres},
#endif
};

}  // namespace

Status FindBackend(const Url& url, const BackendEntry** out) {
  std::string supported;
  for (const BackendEntry& entry : kBackends) {
    if (url.scheme == entry.scheme) {
      *out = &entry;
      return Status::Ok();
    }
    supported += std::string(supported.empty() ? "" : ", ") + entry.scheme + "://";
  }
  return Status::InvalidArgument("unsupported URL scheme '" + url.scheme + "://' (supported: " +
                                 supported + ")");
}

namespace {

Status ParseAndFind(const std::string& text, Url* url, const BackendEntry** entry) {
  Status s = ParseUrl(text, url);
  return s.ok() ? FindBackend(*url, entry) : s;
}

}  // namespace

Status OpenClient(const std::string& text, std::shared_ptr<Client>* out) {
  Url url;
  const BackendEntry* entry = nullptr;
  Status s = ParseAndFind(text, &url, &entry);
  return s.ok() ? Client::Open(url, entry->open, out) : s;
}

Status OpenClientOnBase(const std::string& text, event_base* base, std::shared_ptr<Client>* out) {
  Url url;
  const BackendEntry* entry = nullptr;
  std::unique_ptr<EventLoop> loop;
  Status s = ParseAndFind(text, &url, &entry);
  if (s.ok()) s = EventLoop::Wrap(base, &loop);
  return s.ok() ? Client::OpenOnLoop(url, entry->open, std::move(loop), out) : s;
}

Status OpenClientOnHost(const std::string& text, std::unique_ptr<HostLoop> host,
                        std::shared_ptr<Client>* out) {
  Url url;
  const BackendEntry* entry = nullptr;
  std::unique_ptr<EventLoop> loop;
  Status s = ParseAndFind(text, &url, &entry);
  if (s.ok()) s = EventLoop::Drive(std::move(host), &loop);
  return s.ok() ? Client::OpenOnLoop(url, entry->open, std::move(loop), out) : s;
}

Status PrepareBackend(const std::string& text, int64_t wait_ms) {
  Status s = CheckWait(wait_ms);
  Url url;
  const BackendEntry* entry = nullptr;
  if (s.ok()) s = ParseAndFind(text, &url, &entry);
  return s.ok() ? entry->prepare(url, wait_ms) : s;
}

}  // namespace dlock
