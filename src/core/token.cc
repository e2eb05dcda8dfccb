#include "core/token.h"

#include "core/text.h"

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <random>

namespace dlock {

Status NewOwnerToken(std::string* out) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return Status::Internal("RAND_bytes failed: no randomness for the owner token (OpenSSL error " +
                            std::to_string(ERR_get_error()) + ")");
  }
  *out = HexBytes(bytes, sizeof bytes);
  return Status::Ok();
}

std::string WaiterId(const std::string& owner_value) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(owner_value.data()), owner_value.size(), digest);
  return HexBytes(digest, 8);
}

uint64_t RandomBetween(uint64_t lo, uint64_t hi) {
  if (hi <= lo) return lo;
  thread_local std::mt19937_64 gen([] {
    uint64_t seed = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&seed), sizeof seed) != 1) {
      seed = std::random_device{}();
    }
    return seed;
  }());
  return std::uniform_int_distribution<uint64_t>(lo, hi)(gen);
}

}  // namespace dlock
