#include "conformance/backend.h"

namespace dlock_test {

const std::vector<BackendFactory>& AllBackends() {
  static const std::vector<BackendFactory> all = [] {
    std::vector<BackendFactory> v = {RedisTcpBackend(),
                                     RedisUnixBackend(),
                                     RedisTlsBackendFactory(),
                                     RedisTlsClientCertBackendFactory(),
                                     RedisClusterBackendFactory(),
                                     RedisSentinelBackendFactory(),
                                     Redlock3BackendFactory(),
                                     Redlock5BackendFactory()};
#ifdef DLOCK_CONFORMANCE_DYNAMODB
    v.push_back(DynamoDbBackend());
#endif
#ifdef DLOCK_CONFORMANCE_ETCD
    v.push_back(EtcdBackendFactory());
    v.push_back(EtcdMutexBackendFactory());
#endif
#ifdef DLOCK_CONFORMANCE_POSTGRES
    v.push_back(PostgresBackendFactory());
#endif
    return v;
  }();
  return all;
}

}  // namespace dlock_test
