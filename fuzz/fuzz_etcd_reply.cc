// etcd gateway answers: any text, read the way the etcd backend reads every answer (an error,
// a transaction, a range (its first key, and every key), a lease grant, keepalive and time to
// live), and fed in two pieces to the watch stream's line reader.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "etcd/gateway.h"

using namespace dlock::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Json answer;
  if (ParseObject(text, &answer)) {
    (void)ReadError(answer);
    TxnAnswer txn;
    (void)ReadTxn(answer, &txn);
    KeyValue kv;
    bool found = false;
    (void)ReadRange(answer, &kv, &found);
    std::vector<KeyValue> kvs;
    int64_t revision = 0;
    (void)ReadRangeAll(answer, &kvs, &revision);
    int64_t lease = 0, ttl = 0;
    (void)ReadGrant(answer, &lease, &ttl);
    (void)ReadKeepAlive(answer, &ttl);
    std::vector<std::string> keys;
    (void)ReadTimeToLive(answer, &ttl, &keys);
  }
  // A stream's chunks end anywhere: split the input at its first byte's value.
  const size_t cut = size == 0 ? 0 : data[0] % size;
  std::string buffer = text.substr(0, cut);
  std::vector<WatchMessage> messages;
  if (TakeWatchLines(&buffer, &messages).ok()) {
    buffer += text.substr(cut);
    (void)TakeWatchLines(&buffer, &messages);
  }
  return 0;
}
