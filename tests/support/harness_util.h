// Small helpers the test harness shares (support/ and its own tests). One definition each, so
// that the unity builds of the test programs (CMakeLists.txt: DLOCK_TEST_UNITY) see no twins.
#ifndef DLOCK_TESTS_SUPPORT_HARNESS_UTIL_H_
#define DLOCK_TESTS_SUPPORT_HARNESS_UTIL_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

namespace dlock_test {

inline void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// How many times needle occurs in text (overlapping occurrences too).
inline int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A libcurl CURLOPT_WRITEFUNCTION that appends the body to the std::string in arg.
inline size_t AppendToString(char* data, size_t size, size_t n, void* arg) {
  static_cast<std::string*>(arg)->append(data, size * n);
  return size * n;
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_HARNESS_UTIL_H_
