// Redis Cluster's key → hash slot mapping (the cluster spec's HASH_SLOT): CRC16 (XMODEM) of the
// key's hash tag, modulo 16384. The tag is what lies between the first '{' and the first '}'
// after it, when that is not empty; otherwise the whole key.
#ifndef DLOCK_REDIS_WIRE_KEY_SLOT_H_
#define DLOCK_REDIS_WIRE_KEY_SLOT_H_

#include <cstdint>
#include <string_view>

namespace dlock::redis {

constexpr int kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
uint16_t Crc16(std::string_view data);
// The hash slot of key, 0..16383.
int KeySlot(std::string_view key);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_KEY_SLOT_H_
