#include "support/pty.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <fstream>
#include <thread>

extern char** environ;

namespace dlock_test {

namespace {

int CodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

PtyJob::PtyJob(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               bool background) {
  master_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  char slave[128];
  if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0 ||
      ptsname_r(master_, slave, sizeof slave) != 0) {
    error_ = std::string("pseudo-terminal: ") + strerror(errno);
    return;
  }
  fcntl(master_, F_SETFL, fcntl(master_, F_GETFL) | O_NONBLOCK);
  // Everything the children use is made before fork: after it, async-signal-safe calls only.
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& add : env) {
      if (entry.compare(0, add.find('=') + 1, add, 0, add.find('=') + 1) == 0) replaced = true;
    }
    if (!replaced) entries.push_back(entry);
  }
  entries.insert(entries.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  for (std::string& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + strerror(errno);
    return;
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t parent = getpid();
  leader_ = fork();
  if (leader_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(120);
    if (setsid() < 0) _exit(121);
    const int tty = open(slave, O_RDWR);  // the session's controlling terminal
    if (tty < 0 || ioctl(tty, TIOCSCTTY, 0) != 0) _exit(122);
    dup2(tty, 0);
    dup2(tty, 1);
    dup2(tty, 2);
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != report[1]) close(fd);
    }
    const pid_t job = fork();
    if (job == 0) {
      setpgid(0, 0);
      if (!background) tcsetpgrp(0, getpid());  // SIGTTOU is blocked
      close(report[1]);
      struct sigaction dfl;
      memset(&dfl, 0, sizeof dfl);
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    if (job < 0) _exit(123);
    setpgid(job, job);
    if (!background) tcsetpgrp(0, job);
    if (write(report[1], &job, sizeof job) != sizeof job) _exit(124);
    close(report[1]);
    int status;
    while (waitpid(job, &status, 0) < 0) {
      if (errno != EINTR) _exit(125);
    }
    _exit(CodeOf(status));
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(report[1]);
  if (leader_ < 0) {
    error_ = std::string("fork: ") + strerror(errno);
    close(report[0]);
    return;
  }
  pid_t job = -1;
  struct pollfd p = {report[0], POLLIN, 0};
  if (poll(&p, 1, 20000) == 1 && read(report[0], &job, sizeof job) == sizeof job) {
    job_ = job;
  } else {
    error_ = "the session's leader did not start the job";
  }
  close(report[0]);
}

PtyJob::~PtyJob() {
  if (leader_ > 0) {
    int status;
    // The job is the leader's child: while the leader has not been reaped, it has not reaped
    // the job and exited, so job_ still names the job.
    if (job_ > 0 && exit_code_ < 0 && waitpid(leader_, &status, WNOHANG) == 0) kill(job_, SIGKILL);
    if (exit_code_ < 0) {
      kill(leader_, SIGKILL);
      while (waitpid(leader_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  if (master_ >= 0) close(master_);
}

void PtyJob::Type(const std::string& bytes) {
  if (master_ >= 0 && write(master_, bytes.data(), bytes.size()) < 0) {
    error_ = std::string("typing: ") + strerror(errno);
  }
}

int PtyJob::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_ >= 0 || leader_ <= 0) return exit_code_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Drain();
    int status;
    const pid_t r = waitpid(leader_, &status, WNOHANG);
    if (r == leader_) {
      exit_code_ = CodeOf(status);
      Drain();
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void PtyJob::Drain() {
  char buf[4096];
  ssize_t n;
  while (master_ >= 0 && (n = read(master_, buf, sizeof buf)) > 0) captured_.append(buf, (size_t)n);
}

std::string PtyJob::output() {
  Drain();
  return captured_;
}

namespace {

// The fields of /proc/PID/stat after "(comm)": [0] is the state (field 3).
std::vector<std::string> StatFieldsAfterComm(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::vector<std::string> fields;
  if (!std::getline(f, line)) return fields;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return fields;
  size_t at = paren + 1;
  while (at < line.size()) {
    while (at < line.size() && line[at] == ' ') ++at;
    const size_t end = line.find(' ', at);
    if (at < line.size()) fields.push_back(line.substr(at, end == std::string::npos ? end : end - at));
    if (end == std::string::npos) break;
    at = end;
  }
  return fields;
}

}  // namespace

char ProcessState(pid_t pid) {
  const std::vector<std::string> f = StatFieldsAfterComm(pid);
  return f.empty() || f[0].empty() ? 0 : f[0][0];
}

long StatField(pid_t pid, int index) {
  const std::vector<std::string> f = StatFieldsAfterComm(pid);
  if (index < 3 || (size_t)(index - 3) >= f.size()) return -1;
  return strtol(f[(size_t)(index - 3)].c_str(), nullptr, 10);
}

bool AsleepInNanosleep(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/wchan");
  std::string wchan;
  std::getline(f, wchan);
  return ProcessState(pid) == 'S' &&
         (wchan.find("nanosleep") != std::string::npos || wchan.empty() || wchan == "0");
}

std::vector<pid_t> LiveGroupMembers(pid_t pgid) {
  std::vector<pid_t> members;
  DIR* d = opendir("/proc");
  if (!d) return members;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    const std::vector<std::string> f = StatFieldsAfterComm((pid_t)pid);
    if (f.size() > 2 && f[0] != "Z" && f[0] != "X" && strtol(f[2].c_str(), nullptr, 10) == pgid) {
      members.push_back((pid_t)pid);
    }
  }
  closedir(d);
  return members;
}

}  // namespace dlock_test
