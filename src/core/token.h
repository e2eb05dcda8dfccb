// Randomness: owner tokens (secret, unguessable) and retry jitter.
#ifndef DLOCK_CORE_TOKEN_H_
#define DLOCK_CORE_TOKEN_H_

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dlock {

// A fresh 128-bit owner token from OpenSSL's CSPRNG, as 32 lowercase hex characters. Served
// from a per-thread buffer of RAND_bytes output, each byte once; a forked child never reuses
// what its parent's buffer held (token.cc).
Status NewOwnerToken(std::string* out);

// A fair waiter's public id for an owner value: 16 hex characters of its SHA-256. Backends may
// publish it (the owner value is a secret: it authorises release).
std::string WaiterId(const std::string& owner_value);

// A uniformly random integer in [lo, hi], for jitter (not secret; per-thread generator).
uint64_t RandomBetween(uint64_t lo, uint64_t hi);

}  // namespace dlock

#endif  // DLOCK_CORE_TOKEN_H_
