// Starting and stopping the real servers (redis-server, dynalite) that integration tests run.
#ifndef DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_
#define DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace dlock_test {

// A free TCP port on 127.0.0.1 (bind to port 0, read it back, close); -1 on failure.
int FreeTcpPort();

// The executable `name` on PATH, or the value of override_env when that is set; "" if none.
std::string FindOnPath(const std::string& name, const char* override_env);

// Forks and execs args[0] (a path) with stdin from /dev/null and stdout and stderr appended to
// out_path. The child dies with the thread that started it (even if the test is SIGKILLed) and
// inherits neither the test's file descriptors nor its signal mask. Its pid, or -1 and *why.
pid_t SpawnChild(const std::vector<std::string>& args, const std::string& out_path,
                 std::string* why);

// Sends first_signal, waits up to grace_ms for the child to exit, then SIGKILLs it; reaps it
// and sets *pid to -1. Nothing when *pid <= 0.
void ReapChild(pid_t* pid, int first_signal, int grace_ms);

// The last max_bytes of a file ("" if unreadable), for failure messages.
std::string ReadTail(const std::string& path, size_t max_bytes);

// "exited with status N" / "killed by signal N" for a waitpid status.
std::string DescribeWaitStatus(int status);

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_
