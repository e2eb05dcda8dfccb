#include "core/token.h"

#include "core/text.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>
#include <random>

namespace dlock {
namespace {

// Owner tokens come from a per-thread buffer of CSPRNG output, refilled kPoolBytes at a time:
// one RAND_bytes call serves 16 tokens. (RAND_bytes costs about 0.8 µs a call here, most of it
// not the bytes: OpenSSL 3 calls getpid() on every call to notice a fork, and takes its DRBG's
// locks.) Each byte is handed out once and wiped as it is taken.
//
// A forked child has a copy of the parent's buffers: what the parent will hand out next, so
// the child must never use them. Every buffer records the fork epoch it was filled in. The
// epoch lives in a page marked MADV_WIPEONFORK, which the kernel zeroes in any child, however
// it was made (fork, _Fork, a raw clone without CLONE_VM: none of which need run atfork
// handlers). A zero epoch means a new process: it takes a fresh one, and every buffer from
// before is wiped and refilled from OpenSSL's fork-safe DRBG. Checking is one relaxed load.
// Where the kernel lacks MADV_WIPEONFORK (before Linux 4.14), the check is getpid() instead.
constexpr size_t kPoolBytes = 256;

// Copied into a child, so the child's fresh epoch is above every epoch its parent handed out.
std::atomic<uint64_t> next_epoch{1};

std::atomic<uint64_t>* MapForkMarker() {
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return nullptr;
  void* p = mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (madvise(p, static_cast<size_t>(page), MADV_WIPEONFORK) != 0) {
    munmap(p, static_cast<size_t>(page));
    return nullptr;
  }
  return new (p) std::atomic<uint64_t>(0);  // zero bytes are the value 0, as a wiped page has
}

// This process's fork epoch: never 0, and different in every process descended by fork.
uint64_t ForkEpoch() {
  static std::atomic<uint64_t>* const marker = MapForkMarker();
  if (marker == nullptr) return static_cast<uint64_t>(getpid());
  uint64_t epoch = marker->load(std::memory_order_relaxed);
  if (epoch != 0) return epoch;
  const uint64_t fresh = next_epoch.fetch_add(1, std::memory_order_relaxed);
  // Another thread of this (new) process may have taken one first: then use its.
  return marker->compare_exchange_strong(epoch, fresh, std::memory_order_relaxed) ? fresh : epoch;
}

struct TokenPool {
  unsigned char bytes[kPoolBytes];
  size_t used = kPoolBytes;  // bytes[used..] are fresh; empty at first
  uint64_t epoch = 0;        // ForkEpoch() is never 0
  ~TokenPool() { OPENSSL_cleanse(bytes, sizeof bytes); }
};

// Fills out with n fresh random bytes from this thread's pool.
bool TakeRandom(unsigned char* out, size_t n) {
  thread_local TokenPool pool;
  const uint64_t epoch = ForkEpoch();
  if (pool.epoch != epoch) {
    // Filled before a fork: the parent owns what is left of this buffer.
    OPENSSL_cleanse(pool.bytes, sizeof pool.bytes);
    pool.used = kPoolBytes;
    pool.epoch = epoch;
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
