// The one way tests start a process: workers, servers (redis-server, dynalite), examples.
//
//   ChildProcess worker({path, url, "counter", "increment", "20", file});  // output captured
//   ASSERT_TRUE(worker.started()) << worker.error();
//   std::string line = worker.AwaitLine("ACQUIRED ", 10s);                  // "" on timeout
//   EXPECT_EQ(worker.Wait(60s), 0) << worker.output();                      // exit code
//
//   ChildProcess server({redis, "--port", "0"}, ChildOptions::LogTo(dir + "/server.log"));
//   server.Kill();                                                          // SIGKILL, reaped
//
// The child gets stdin from /dev/null, the test's environment plus ChildOptions::env, an empty
// signal mask and none of the test's file descriptors (a closed client must look closed to its
// server). It is SIGKILLed when the thread that started it dies (PR_SET_PDEATHSIG), so even a
// killed test leaves nothing running: start children on a thread that outlives them (normally
// the test's own). It is always reaped: by Wait, Kill, Stop, or the destructor (which kills it).
#ifndef DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_
#define DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dlock_test {

struct ChildOptions {
  // "NAME=value" entries added to the test's environment (replacing a variable of that name).
  std::vector<std::string> env;
  // stdout and stderr appended to this file; "" = both captured in memory (see output()).
  std::string log_path;

  static ChildOptions Env(std::vector<std::string> entries) {
    ChildOptions o;
    o.env = std::move(entries);
    return o;
  }
  static ChildOptions LogTo(std::string path) {
    ChildOptions o;
    o.log_path = std::move(path);
    return o;
  }
};

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv. On failure started() is false and error() says why.
  explicit ChildProcess(const std::vector<std::string>& argv, const ChildOptions& options = {});
  ~ChildProcess();  // Kill()
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return started_; }
  const std::string& error() const { return error_; }
  // The pid while it has not been reaped; -1 before it started and once it is reaped.
  pid_t pid() const { return pid_; }

  // Waits up to timeout for it to end and reaps it: its exit code, 128 + N when signal N killed
  // it (as a shell says), or -1 when it still runs (it is left running). A zero timeout polls.
  // After it ended, every call returns the same code.
  int Wait(std::chrono::milliseconds timeout);
  // Sends sig (SIGSTOP, SIGCONT, ...) and returns at once; nothing when it is not running.
  void Signal(int sig);
  // SIGKILL, then reaps it.
  void Kill();
  // first_signal, up to grace for it to exit, then SIGKILL; reaps it.
  void Stop(int first_signal, std::chrono::milliseconds grace);

  // What it wrote so far to stdout and stderr, when captured ("" with a log_path).
  std::string output();
  // Waits up to timeout for a whole captured line that starts with prefix: the line (without
  // its newline), or "" when none came (the child ended or the time ran out).
  std::string AwaitLine(const std::string& prefix, std::chrono::milliseconds timeout);

 private:
  void ReadOutput(std::chrono::milliseconds timeout);  // reads what arrives within timeout
  bool Reap(int options);                              // waitpid; true once reaped

  bool started_ = false;
  std::string error_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int out_fd_ = -1;  // the capture pipe's read end
  std::string captured_;
  size_t scanned_ = 0;  // AwaitLine has looked at captured_ up to here
};

// "exited with status N" / "killed by signal N" for an exit code from Wait(), for messages.
std::string DescribeExitCode(int code);

// A free TCP port on 127.0.0.1 (bind to port 0, read it back, close); -1 on failure.
int FreeTcpPort();

// The executable `name` on PATH, or the value of override_env when that is set; "" if none.
std::string FindOnPath(const std::string& name, const char* override_env);

// The last max_bytes of a file ("" if unreadable), for failure messages.
std::string ReadTail(const std::string& path, size_t max_bytes);

// A fresh private directory "$TMPDIR/dlock-<name>-XXXXXX" (absolute path), or "" and *why. A
// TMPDIR of 60 characters or more is passed over for /tmp: a unix socket's path in it must
// fit in sun_path (108 bytes).
std::string MakeTempDir(const std::string& name, std::string* why);

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_CHILD_PROCESS_H_
