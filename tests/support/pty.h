// A process started as an interactive shell's job on a terminal of its own: a new pseudo-terminal,
// a new session whose controlling terminal it is, a leader standing in for the shell, and the
// job in its own process group, in the foreground (the terminal's signals reach it: Ctrl-Z,
// Ctrl-C) or in the background (reading the terminal stops it with SIGTTIN).
//
//   PtyJob job({dlock, "exec", "x", "--", "sh", "-c", "..."}, {"DLOCK_URL=..."}, /*background=*/false);
//   ASSERT_TRUE(job.started()) << job.error();
//   job.Type("\x1a");                      // Ctrl-Z: SIGTSTP to the terminal's foreground group
//   EXPECT_EQ(job.Wait(20s), 130) << job.output();
//
// The leader (the session's leader, like a login shell) makes the job's group the foreground
// one or not, reaps the job and exits with its code; it does not follow the job's stops. The
// job gets the test's environment plus env, and the terminal as stdin, stdout and stderr. Both
// are SIGKILLed by pid and reaped when the PtyJob goes, and the leader dies with the thread
// that started it (PR_SET_PDEATHSIG).
#ifndef DLOCK_TESTS_SUPPORT_PTY_H_
#define DLOCK_TESTS_SUPPORT_PTY_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dlock_test {

class PtyJob {
 public:
  PtyJob(const std::vector<std::string>& argv, const std::vector<std::string>& env, bool background);
  ~PtyJob();
  PtyJob(const PtyJob&) = delete;
  PtyJob& operator=(const PtyJob&) = delete;

  bool started() const { return job_ > 0; }
  const std::string& error() const { return error_; }
  pid_t pid() const { return job_; }        // the job (-1 when it did not start)
  pid_t leader() const { return leader_; }  // the session's leader
  // Writes bytes to the terminal, as typed: "\x1a" is Ctrl-Z, "\x03" Ctrl-C.
  void Type(const std::string& bytes);
  // Waits up to timeout for the job to end: its exit code, 128 + N when signal N killed it, or
  // -1 when it still runs.
  int Wait(std::chrono::milliseconds timeout);
  // What the job wrote to the terminal so far (with the terminal's echo of what was typed).
  std::string output();

 private:
  void Drain();
  int master_ = -1;
  pid_t leader_ = -1;
  pid_t job_ = -1;
  int exit_code_ = -1;
  std::string error_;
  std::string captured_;
};

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z'...), or 0 when there is no such process.
char ProcessState(pid_t pid);
// Field `index` (1-based, as proc(5) counts: 5 = pgrp, 8 = tpgid) of /proc/PID/stat; -1 if none.
long StatField(pid_t pid, int index);
// Whether pid waits in nanosleep (sleep(1) past its start-up, which opens and closes files):
// state 'S' and a wchan naming nanosleep (state 'S' alone where the kernel hides wchan).
bool AsleepInNanosleep(pid_t pid);
// The processes whose process group is pgid and which are not zombies.
std::vector<pid_t> LiveGroupMembers(pid_t pgid);

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_PTY_H_
