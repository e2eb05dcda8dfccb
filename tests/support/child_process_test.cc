// Tests of the process spawner itself: every test that starts a process relies on it.
#include "support/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

bool Exists(pid_t pid) { return kill(pid, 0) == 0; }

TEST(ChildProcessTest, CapturesOutputAndExitCode) {
  ChildProcess child({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(child.started()) << child.error();
  EXPECT_EQ(child.Wait(10s), 3);
  EXPECT_EQ(child.Wait(0ms), 3) << "the code is kept once reaped";
  EXPECT_EQ(child.pid(), -1);
  EXPECT_NE(child.output().find("out\n"), std::string::npos) << child.output();
  EXPECT_NE(child.output().find("err\n"), std::string::npos) << child.output();
}

TEST(ChildProcessTest, AddsToTheEnvironment) {
  setenv("DLOCK_SPAWN_INHERITED", "kept", 1);
  ChildProcess child({"/bin/sh", "-c", "echo \"$DLOCK_SPAWN_INHERITED $DLOCK_SPAWN_ADDED $HOME\""},
                     ChildOptions::Env({"DLOCK_SPAWN_ADDED=added", "HOME=/elsewhere"}));
  EXPECT_EQ(child.Wait(10s), 0);
  EXPECT_EQ(child.output(), "kept added /elsewhere\n");
  unsetenv("DLOCK_SPAWN_INHERITED");
}

TEST(ChildProcessTest, AwaitsALineThenKillsByPid) {
  ChildProcess child({"/bin/sh", "-c", "echo noise; echo 'READY 42'; exec sleep 60"});
  EXPECT_EQ(child.AwaitLine("READY ", 10s), "READY 42");
  EXPECT_EQ(child.AwaitLine("READY ", 100ms), "") << "each line is returned once";
  const pid_t pid = child.pid();
  EXPECT_EQ(child.Wait(100ms), -1) << "still running";
  EXPECT_TRUE(Exists(pid));
  child.Kill();
  EXPECT_EQ(child.Wait(0ms), 128 + SIGKILL);
  EXPECT_FALSE(Exists(pid)) << "killed and reaped";
}

TEST(ChildProcessTest, StopEndsAStoppedChildAndTheDestructorReaps) {
  pid_t pid = -1;
  {
    ChildProcess child({"/bin/sleep", "60"});
    pid = child.pid();
    child.Signal(SIGSTOP);
    child.Stop(SIGTERM, 5s);
    EXPECT_EQ(child.Wait(0ms), 128 + SIGTERM);
    ChildProcess forgotten({"/bin/sleep", "60"});
    pid = forgotten.pid();
  }
  EXPECT_FALSE(Exists(pid)) << "the destructor did not kill and reap it";
}

TEST(ChildProcessTest, WritesToALogFileAndReportsAMissingProgram) {
  char path[] = "/tmp/dlock-spawn-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ChildProcess child({"/bin/sh", "-c", "echo logged"}, ChildOptions::LogTo(path));
  EXPECT_EQ(child.Wait(10s), 0);
  EXPECT_EQ(child.output(), "") << "nothing is captured with a log file";
  EXPECT_EQ(ReadTail(path, 100), "logged\n");
  unlink(path);
  ChildProcess missing({"/nonexistent/program"});
  EXPECT_EQ(missing.Wait(10s), 127);
}

}  // namespace
}  // namespace dlock_test
