/* The guard: a child of dlock that leads CMD's process group and never execs (see exec.c for
 * the processes). Being in CMD's group, kill(-group, SIGKILL) reaches it and every descendant of
 * CMD that stayed in the group. It makes two promises that dlock cannot make when it is dead or
 * stopped:
 *   - when dlock dies (even by SIGKILL), the guard kills the group at once: it sees its end of
 *     a socketpair with dlock close, and PR_SET_PDEATHSIG wakes it too;
 *   - dlock sends it each new local deadline of the lock (CLOCK_MONOTONIC ms) after renewals;
 *     the guard kills the group when only --kill-grace is left and dlock is stopped (SIGSTOP,
 *     or a job stopped with CMD), and in any case when the deadline itself lapses. So a stopped
 *     dlock, whose heartbeats stopped with it, cannot leave CMD running past the lease.
 * Before it kills the group the guard writes one byte back on the socketpair, so that dlock can
 * tell its kill from anyone else's.
 *
 * Everything here runs in a child forked from the multithreaded dlock that never execs:
 * async-signal-safe calls only (no stdio, no malloc). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static void on_guard_signal(int sig) { (void)sig; /* interrupts ppoll; the loop looks again */ }

/* Whether pid is stopped ('T', or 't' under a tracer), from /proc/PID/stat. */
static bool guard_sees_stopped(pid_t pid) {
  char path[32] = "/proc/";
  char digits[16];
  int n = 0;
  for (unsigned long v = (unsigned long)pid; n == 0 || v > 0; v /= 10) digits[n++] = (char)('0' + v % 10);
  size_t at = 6;
  while (n > 0) path[at++] = digits[--n];
  memcpy(path + at, "/stat", 6);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return false;
  const char *paren = NULL;
  for (ssize_t i = 0; i < got; ++i) {
    if (buf[i] == ')') paren = buf + i;
  }
  if (!paren || paren + 2 >= buf + got) return false;
  return paren[2] == 'T' || paren[2] == 't';
}

/* Kills CMD's whole group, the guard included, after telling dlock why ('d' dlock is gone and
 * nobody reads, 's' dlock is stopped and the lease nearly over, 'h' the deadline lapsed). */
static _Noreturn void guard_fire(int sock, char why) {
  /* Best effort: the kill comes anyway. */
  if (why != 'd') ignore_result(send(sock, &why, 1, MSG_DONTWAIT | MSG_NOSIGNAL));
  kill(-getpid(), SIGKILL); /* the group the guard leads: never dlock's, whatever happened */
  _exit(0);
}

_Noreturn void guard_main(int sock, pid_t dlock, int64_t deadline, int64_t kill_grace_ms,
                          unsigned max_fd) {
  prctl(PR_SET_PDEATHSIG, SIGUSR1); /* caught: the loop sees the new parent */
  /* Signals sent to CMD's group reach the guard too: it must survive them. The terminal's stop
   * signals are ignored (CMD stops, the guard keeps watch); the others only wake it. */
  struct sigaction wake, ign, dfl;
  memset(&wake, 0, sizeof wake);
  memset(&ign, 0, sizeof ign);
  memset(&dfl, 0, sizeof dfl);
  wake.sa_handler = on_guard_signal;
  ign.sa_handler = SIG_IGN;
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&wake.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
      sigaction(sig, &ign, NULL);
    } else if (sig == SIGCONT || sig == SIGCHLD || sig == SIGWINCH || sig == SIGURG || sig == SIGSEGV ||
               sig == SIGBUS || sig == SIGFPE || sig == SIGILL) {
      sigaction(sig, &dfl, NULL); /* harmless, or a fault of the guard's own */
    } else {
      sigaction(sig, &wake, NULL); /* fails harmlessly for the C library's own signals */
    }
  }
  /* None of dlock's descriptors: not its connections, not the terminal, not its output. */
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
  }
  const int keep[1] = {sock};
  close_fds_except(keep, 1, max_fd);
  sigset_t none;
  sigemptyset(&none);
  for (;;) {
    if (getppid() != dlock) guard_fire(sock, 'd');
    struct timespec ts, *timeout = NULL;
    if (deadline >= 0) {
      const int64_t now = monotonic_ms();
      if (now >= deadline) guard_fire(sock, 'h');
      int64_t next = deadline - kill_grace_ms;
      if (now >= next) { /* within the kill grace: is dlock there to act? */
        if (guard_sees_stopped(dlock)) guard_fire(sock, 's');
        next = now + 50 < deadline ? now + 50 : deadline;
      }
      ts.tv_sec = (time_t)((next - now) / 1000);
      ts.tv_nsec = (long)((next - now) % 1000) * 1000000L;
      timeout = &ts;
    }
    struct pollfd p = {.fd = sock, .events = POLLIN};
    const int ready = ppoll(&p, 1, timeout, &none); /* every signal blocked but here */
    if (ready < 0 && errno != EINTR) guard_fire(sock, 'h');
    if (ready <= 0) continue;
    int64_t message;
    const ssize_t got = recv(sock, &message, sizeof message, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got != (ssize_t)sizeof message) guard_fire(sock, 'd'); /* dlock closed it: it is gone */
    deadline = message;
  }
}

