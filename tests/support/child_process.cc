#include "support/child_process.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace dlock_test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The test's environment with `extra` ("NAME=value") added or replacing.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    bool replaced = false;
    for (const auto& x : extra) replaced |= name_of(x) == name_of(entry);
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv_in, const ChildOptions& options) {
  if (argv_in.empty()) {
    error_ = "no program to run";
    return;
  }
  // Everything the child needs is prepared here: between fork and exec a multithreaded process
  // may only call async-signal-safe functions.
  std::vector<std::string> args = argv_in;
  std::vector<std::string> env = MergedEnvironment(options.env);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int out_write = -1;
  if (options.log_path.empty()) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      out_fd_ = fds[0];
      out_write = fds[1];
    }
  } else {
    out_write = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  }
  if (devnull < 0 || out_write < 0) {
    error_ = "cannot open /dev/null, a pipe or " + options.log_path + ": " + strerror(errno);
    if (devnull >= 0) close(devnull);
    if (out_write >= 0) close(out_write);
    return;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the thread that started us
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(devnull, 0);
    dup2(out_write, 1);
    dup2(out_write, 2);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      long max = sysconf(_SC_OPEN_MAX);
      if (max < 0 || max > 65536) max = 65536;
      for (int fd = 3; fd < max; ++fd) close(fd);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(devnull);
  close(out_write);
  if (pid < 0) {
    error_ = std::string("fork failed: ") + strerror(fork_errno);
    return;
  }
  if (out_fd_ >= 0) fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  pid_ = pid;
  started_ = true;
}

ChildProcess::~ChildProcess() {
  Kill();
  if (out_fd_ >= 0) close(out_fd_);
}

bool ChildProcess::Reap(int options) {
  if (pid_ <= 0) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, options);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  exit_code_ = r == pid_ ? ExitCodeOf(status) : -1;  // r < 0: someone else reaped it
  pid_ = -1;
  return true;
}

int ChildProcess::Wait(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!Reap(WNOHANG)) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left <= milliseconds(0)) return -1;
    // Drain the capture meanwhile: a child blocked on a full pipe would never exit.
    if (out_fd_ >= 0) {
      ReadOutput(std::min(left, milliseconds(10)));
    } else {
      std::this_thread::sleep_for(std::min(left, milliseconds(5)));
    }
  }
  return exit_code_;
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  Reap(0);
}

void ChildProcess::Stop(int first_signal, milliseconds grace) {
  if (pid_ <= 0) return;
  kill(pid_, first_signal);
  kill(pid_, SIGCONT);  // a stopped child could not act on first_signal
  if (Wait(grace) == -1) Kill();
}

void ChildProcess::ReadOutput(milliseconds timeout) {
  if (out_fd_ < 0) return;
  pollfd p{out_fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return;
  char buf[4096];
  ssize_t n;
  while ((n = read(out_fd_, buf, sizeof buf)) > 0) captured_.append(buf, static_cast<size_t>(n));
  if (n == 0) {  // every writer is gone: nothing more will come
    close(out_fd_);
    out_fd_ = -1;
  }
}

std::string ChildProcess::output() {
  ReadOutput(milliseconds(0));
  return captured_;
}

std::string ChildProcess::AwaitLine(const std::string& prefix, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    for (size_t end; (end = captured_.find('\n', scanned_)) != std::string::npos;) {
      std::string line = captured_.substr(scanned_, end - scanned_);
      scanned_ = end + 1;
      if (line.rfind(prefix, 0) == 0) return line;
    }
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (out_fd_ < 0 || left <= milliseconds(0)) return "";
    ReadOutput(left);
  }
}

std::string DescribeExitCode(int code) {
  if (code < 0) return "still running (or reaped elsewhere)";
  if (code > 128) return "killed by signal " + std::to_string(code - 128) + " (or exit status " +
                         std::to_string(code) + ")";
  return "exited with status " + std::to_string(code);
}

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

std::string ReadTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

std::string MakeTempDir(const std::string& name, std::string* why) {
  std::string base = "/tmp";
  if (const char* t = getenv("TMPDIR"); t && *t && strlen(t) < 60) base = t;
  std::string tmpl = base + "/dlock-" + name + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    *why = "mkdtemp(" + tmpl + ") failed: " + strerror(errno);
    return "";
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(buf.data(), ec);
  return ec ? std::string(buf.data()) : abs.string();
}

}  // namespace dlock_test
