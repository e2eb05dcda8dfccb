#include "core/token.h"

#include "core/text.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <random>

namespace dlock {
namespace {

// Owner tokens come from a per-thread buffer of CSPRNG output, refilled kPoolBytes at a time:
// one RAND_bytes call serves 16 tokens. (RAND_bytes costs about 0.8 µs a call here, most of it
// not the bytes: OpenSSL 3 calls getpid() on every call to notice a fork, and takes its DRBG's
// locks.) Each byte is handed out once and wiped as it is taken.
//
// After fork() the child has a copy of the parent's buffers: what the parent will hand out
// next. A pthread_atfork child handler bumps a generation counter, and a buffer filled under
// an older generation is wiped and refilled before use, so the child never hands out a byte
// the parent may (its refill comes from OpenSSL's own fork-safe DRBG, reseeded in the child).
// Checking the counter is one relaxed atomic load, not a system call. (A child made by a raw
// clone() system call runs no atfork handler; fork(), vfork()+exec and posix_spawn are covered.)
constexpr size_t kPoolBytes = 256;

std::atomic<uint64_t> fork_generation{0};
void OnForkChild() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

struct TokenPool {
  unsigned char bytes[kPoolBytes];
  size_t used = kPoolBytes;  // bytes[used..] are fresh; empty at first
  uint64_t generation = 0;
  ~TokenPool() { OPENSSL_cleanse(bytes, sizeof bytes); }
};

// Fills out with n fresh random bytes from this thread's pool.
bool TakeRandom(unsigned char* out, size_t n) {
  // Registered once per process (a child inherits the registration); glibc unregisters the
  // handler when this library is unloaded.
  static const bool registered = pthread_atfork(nullptr, nullptr, &OnForkChild) == 0;
  thread_local TokenPool pool;
  const uint64_t generation = fork_generation.load(std::memory_order_relaxed);
  if (!registered) return RAND_bytes(out, static_cast<int>(n)) == 1;  // no pool without the handler
  if (pool.generation != generation) {
    // Made by fork(): the parent owns what is left of this buffer.
    OPENSSL_cleanse(pool.bytes, sizeof pool.bytes);
    pool.used = kPoolBytes;
    pool.generation = generation;
  }
  if (kPoolBytes - pool.used < n) {
    if (RAND_bytes(pool.bytes, static_cast<int>(kPoolBytes)) != 1) return false;
    pool.used = 0;
  }
  std::memcpy(out, pool.bytes + pool.used, n);
  OPENSSL_cleanse(pool.bytes + pool.used, n);
  pool.used += n;
  return true;
}

}  // namespace

Status NewOwnerToken(std::string* out) {
  unsigned char bytes[16];
  if (!TakeRandom(bytes, sizeof bytes)) {
    return Status::Internal("RAND_bytes failed: no randomness for the owner token (OpenSSL error " +
                            std::to_string(ERR_get_error()) + ")");
  }
  *out = HexBytes(bytes, sizeof bytes);
  OPENSSL_cleanse(bytes, sizeof bytes);
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
