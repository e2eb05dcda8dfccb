// Owner tokens (src/core/token.cc): 128-bit CSPRNG output, served from a per-thread buffer.
// Every token is fresh: none repeats, across calls, threads and fork().
#include "core/token.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dlock {
namespace {

std::string Token() {
  std::string t;
  Status s = NewOwnerToken(&t);
  EXPECT_TRUE(s.ok()) << s.message();
  return t;
}

TEST(OwnerTokenTest, Is32LowercaseHexCharacters) {
  for (int i = 0; i < 100; ++i) {
    const std::string t = Token();
    ASSERT_EQ(t.size(), 32u);
    for (char c : t) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << t;
  }
}

TEST(OwnerTokenTest, AllDistinctOverManyCallsAndThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50000;  // many refills of each thread's buffer
  std::vector<std::vector<std::string>> made(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&made, t] {
      for (int i = 0; i < kPerThread; ++i) made[t].push_back(Token());
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> seen;
  for (const auto& v : made) seen.insert(v.begin(), v.end());
  EXPECT_EQ(seen.size(), size_t{kThreads} * kPerThread);
}

// The child of a fork starts with a copy of the parent's buffer: it must not hand out what the
// parent will. Without the fork check, the child's first token is the parent's next one.
void ExpectTokensDifferAcross(pid_t (*make_child)(), const char* how) {
  SCOPED_TRACE(how);
  constexpr int kEach = 40;  // more than one buffer's worth (16 tokens) on each side
  for (int round = 0; round < 3; ++round) {
    (void)Token();  // the parent's buffer is now part used: most of it is still to come
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = make_child();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      std::string all;
      for (int i = 0; i < kEach; ++i) {
        std::string t;
        if (!NewOwnerToken(&t).ok() || t.size() != 32) _exit(2);
        all += t;
      }
      _exit(write(fds[1], all.data(), all.size()) == static_cast<ssize_t>(all.size()) ? 0 : 3);
    }
    close(fds[1]);
    std::vector<std::string> parent;
    for (int i = 0; i < kEach; ++i) parent.push_back(Token());
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ASSERT_EQ(got.size(), size_t{32} * kEach);
    std::set<std::string> child;
    for (int i = 0; i < kEach; ++i) child.insert(got.substr(32 * static_cast<size_t>(i), 32));
    EXPECT_NE(got.substr(0, 32), parent[0]) << "the child's first token is the parent's next";
    EXPECT_EQ(child.size(), size_t{kEach});
    for (const auto& t : parent) EXPECT_EQ(child.count(t), 0u) << t << " made on both sides of " << how;
  }
}

TEST(OwnerTokenTest, DifferAcrossFork) { ExpectTokensDifferAcross(&fork, "fork()"); }

// A raw clone() system call, as _Fork() and some runtimes make children, runs no atfork handler:
// the check must not depend on one.
pid_t RawClone() { return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr)); }
TEST(OwnerTokenTest, DifferAcrossARawCloneSystemCall) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan's runtime needs its fork interceptor: a raw clone child may hang in it";
#endif
  ExpectTokensDifferAcross(&RawClone, "clone(2)");
}

}  // namespace
}  // namespace dlock
