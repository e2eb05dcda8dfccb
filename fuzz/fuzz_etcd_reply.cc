// etcd gateway answers: any text, read the way the etcd backend reads every answer (an error,
// a transaction, a range (its first key, and every key), a lease grant, keepalive and time to
// live), and fed in two pieces to the watch stream's line reader.
//
// Asserted (a crash otherwise): an answer nested deeper than kMaxJsonDepth is never parsed; an
// error's words are capped at kMaxServerTextBytes (escaped: at most 4 bytes a byte, and "…")
// and carry no raw control byte.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/server_text.h"
#include "etcd/gateway.h"
#include "etcd/lock_protocol.h"

using namespace dlock::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Json answer;
  const bool parsed = ParseObject(text, &answer);
  if (!dlock::JsonDepthWithin(text) && parsed) __builtin_trap();
  if (parsed) {
    const GatewayError error = ReadError(answer);
    if (error.message.size() > 4 * dlock::kMaxServerTextBytes + 3) __builtin_trap();
    for (unsigned char c : error.message) {
      if (c < 0x20 || c == 0x7f) __builtin_trap();
    }
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
  // A request key's value, as a watch of puts hands it over (ID \n REASON).
  std::string id, reason;
  if (DecodeReleaseRequest(text, &id, &reason) && reason.size() > dlock::kMaxReasonBytes) __builtin_trap();
  for (const WatchMessage& m : messages) {
    for (const KeyValue& put : m.puts) {
      if (DecodeReleaseRequest(put.value, &id, &reason) && reason.size() > dlock::kMaxReasonBytes) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
