// A user's program of dlock.hpp's Mutex and SharedMutex, built against the INSTALLED package
// with pkg-config and run against a throwaway Redis by scripts/test (check_install), twice:
// built as usual and with -fno-exceptions (so it uses the std::error_code overloads only).
//
//   mutex_consumer REDIS_URL      exit 0 when everything held as expected
#include <dlock/dlock.hpp>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <system_error>
#include <thread>

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc != 2) {
    std::fprintf(stderr, "usage: mutex_consumer REDIS_URL\n");
    return 64;
  }
  std::error_code ec;
  dlock::Client bad("bogus://x", ec);
  EXPECT(ec == DLOCK_EINVAL && ec.category().name() == std::string("dlock"));

  dlock::Client mine(argv[1], ec), theirs(argv[1], ec);
  EXPECT(!ec);
  dlock::Mutex accounts(mine, "install/accounts"), ledger(mine, "install/ledger");
  dlock::Mutex their_accounts(theirs, "install/accounts");
  uint64_t token = 0;
  {
    std::scoped_lock both(accounts, ledger);  // two names, std::lock's deadlock avoidance
    token = accounts.fencing_token();
    EXPECT(token > 0 && ledger.fencing_token() > 0);
    EXPECT(!their_accounts.try_lock());       // one try while we hold it
    auto started = std::chrono::steady_clock::now();
    EXPECT(!their_accounts.try_lock_for(300ms));  // a bounded wait runs out
    EXPECT(std::chrono::steady_clock::now() - started >= 250ms);
  }
  EXPECT(accounts.last_status() == DLOCK_OK && ledger.last_status() == DLOCK_OK);
  EXPECT(their_accounts.try_lock_for(1s));    // free again
  EXPECT(their_accounts.fencing_token() > token);
  their_accounts.unlock();

  dlock::SharedMutex reader(mine, "install/report"), other_reader(theirs, "install/report");
  dlock::Client third(argv[1], ec);
  EXPECT(!ec);
  dlock::SharedMutex writer(third, "install/report");
  {
    std::shared_lock<dlock::SharedMutex> a(reader), b(other_reader);  // two readers at once
    EXPECT(reader.fencing_token() > 0 && other_reader.fencing_token() > 0);
    EXPECT(!writer.try_lock());
  }
  {
    std::unique_lock<dlock::SharedMutex> writing(writer, 5s);
    EXPECT(writing.owns_lock());
    EXPECT(!reader.try_lock_shared());
  }
  std::printf("mutex_consumer: dlock %s, scoped_lock, try_lock_for, shared_lock: ok\n",
              dlock::version().c_str());
  return 0;
}
