// tests/worker.c, run as a child process by the multi-process tests of every backend (its
// path comes from the build as DLOCK_TEST_WORKER).
#ifndef DLOCK_TESTS_WORKER_PROCESS_H_
#define DLOCK_TESTS_WORKER_PROCESS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/child_process.h"

namespace dlock_test {

// Starts `worker ARGS...` (see worker.c for the modes), its output captured.
inline std::unique_ptr<ChildProcess> StartWorker(std::vector<std::string> args) {
  args.insert(args.begin(), DLOCK_TEST_WORKER);
  return std::make_unique<ChildProcess>(args);
}

// The token a `hold` worker printed ("ACQUIRED <token>"); 0 when it did not within timeout.
inline uint64_t AwaitAcquired(ChildProcess& worker,
                              std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  std::string line = worker.AwaitLine("ACQUIRED ", timeout);
  return line.empty() ? 0 : std::stoull(line.substr(9));
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_WORKER_PROCESS_H_
