// The dlock.hpp calls of a translation unit built with -fno-exceptions (hpp_noexceptions.cc).
#ifndef DLOCK_TESTS_HPP_NOEXCEPTIONS_H_
#define DLOCK_TESTS_HPP_NOEXCEPTIONS_H_

#include <string>

namespace hpp_noexceptions {

// Whether that unit was really built without exceptions (DLOCK_HPP_EXCEPTIONS == 0).
bool BuiltWithoutExceptions();
// Uses the std::error_code overloads (acquire_many and LockGroup's release among them), Mutex
// and SharedMutex with the standard's lock types against the Redis at url; "" if all went as
// expected, else what did not.
std::string Run(const std::string& url);

}  // namespace hpp_noexceptions

#endif  // DLOCK_TESTS_HPP_NOEXCEPTIONS_H_
