#include "support/child_process.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace dlock_test {

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string FindOnPath(const std::string& name, const char* override_env) {
  if (const char* env = getenv(override_env); env && *env) return env;
  const char* path = getenv("PATH");
  std::stringstream ss(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

pid_t SpawnChild(const std::vector<std::string>& args, const std::string& out_path,
                 std::string* why) {
  // Everything the child needs is prepared here: between fork and exec a multithreaded process
  // may only call async-signal-safe functions.
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || devnull < 0) {
    *why = "cannot open " + out_path + " or /dev/null: " + strerror(errno);
    if (out >= 0) close(out);
    if (devnull >= 0) close(devnull);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the thread that started us
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(devnull, 0);
    dup2(out, 1);
    dup2(out, 2);
    // Do not keep the test's sockets open (a closed client must look closed to its server).
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      long max = sysconf(_SC_OPEN_MAX);
      if (max < 0 || max > 65536) max = 65536;
      for (int fd = 3; fd < max; ++fd) close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  int saved_errno = errno;
  close(out);
  close(devnull);
  if (pid < 0) *why = std::string("fork failed: ") + strerror(saved_errno);
  return pid;
}

void ReapChild(pid_t* pid, int first_signal, int grace_ms) {
  if (*pid <= 0) return;
  kill(*pid, first_signal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (;;) {
    pid_t r = waitpid(*pid, nullptr, WNOHANG);
    if (r == *pid || (r < 0 && errno != EINTR)) {
      *pid = -1;
      return;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(*pid, SIGKILL);
  while (waitpid(*pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  *pid = -1;
}

std::string ReadTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped (status " + std::to_string(status) + ")";
}

}  // namespace dlock_test
