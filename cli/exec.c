/* dlock exec [options] NAME -- CMD [ARG...]: run CMD while holding the lock.
 *
 * CMD runs without a shell, in its own process group, with PR_SET_PDEATHSIG so that it dies if
 * dlock does. dlock forwards TERM, INT, HUP, QUIT, USR1 and USR2 to that group. While CMD runs
 * the library renews the lease; dlock watches the lock and acts before a lease could run out on
 * the server with CMD still running:
 *   - a loss the server reports (the key is gone or someone else holds it): SIGTERM to CMD at
 *     once, SIGKILL kill-grace later (--on-lost=kill: SIGKILL at once; ignore: nothing);
 *   - renewals that keep failing: SIGTERM when only kill-grace is left of the local deadline,
 *     SIGKILL at the deadline (the library's, which is drift earlier than the server's).
 * Either way dlock exits 70 and says so. Otherwise it releases the lock when CMD exits and exits
 * with CMD's status (128+N when CMD died of signal N). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool is_executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* CMD's path, found before the lock is taken (a typo must not hold a lock), as execvp would:
 * as given when it has a '/', else the first executable in PATH. NULL with *code = 127 when
 * there is none, 126 when it exists but cannot be run. */
static char *resolve_command(const char *cmd, int *code) {
  if (strchr(cmd, '/')) {
    if (is_executable_file(cmd)) return strdup(cmd);
    *code = access(cmd, F_OK) == 0 ? EXIT_CANNOT_EXECUTE : EXIT_NOT_FOUND;
    return NULL;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  *code = EXIT_NOT_FOUND;
  for (const char *dir = path;; ++dir) {
    const char *end = strchrnul(dir, ':');
    char *candidate = NULL;
    if (asprintf(&candidate, "%.*s%s%s", (int)(end - dir), dir, end == dir ? "" : "/", cmd) < 0) {
      return NULL;
    }
    if (is_executable_file(candidate)) return candidate;
    if (access(candidate, F_OK) == 0) *code = EXIT_CANNOT_EXECUTE;
    free(candidate);
    if (*end == '\0') return NULL;
    dir = end;
  }
}

/* The environment CMD gets: ours, with DLOCK_NAME, DLOCK_FENCING_TOKEN and DLOCK_LEASE_MS set
 * (the last three entries, which free_environment frees). */
static void free_environment(char **env) {
  if (!env) return;
  size_t n = 0;
  while (env[n]) ++n;
  for (size_t i = n >= 3 ? n - 3 : 0; i < n; ++i) free(env[i]);
  free(env);
}

static char **child_environment(const char *name, uint64_t token, int64_t lease_ms) {
  size_t n = 0;
  while (environ[n]) ++n;
  char **env = calloc(n + 4, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const char *e = environ[i];
    if (strncmp(e, "DLOCK_NAME=", 11) == 0 || strncmp(e, "DLOCK_FENCING_TOKEN=", 20) == 0 ||
        strncmp(e, "DLOCK_LEASE_MS=", 15) == 0) {
      continue;
    }
    env[k++] = environ[i];
  }
  if (asprintf(&env[k], "DLOCK_NAME=%s", name) < 0) env[k] = NULL;
  if (env[k] && asprintf(&env[k + 1], "DLOCK_FENCING_TOKEN=%" PRIu64, token) < 0) env[k + 1] = NULL;
  if (env[k + 1] && asprintf(&env[k + 2], "DLOCK_LEASE_MS=%" PRId64, lease_ms) < 0) env[k + 2] = NULL;
  if (!env[k + 2]) {
    free(env[k]);
    free(env[k + 1]);
    free(env);
    return NULL;
  }
  return env;
}

/* Starts CMD; returns its pid (also its process group), or -1 with *code set after saying why. */
static pid_t start_child(const char *path, char **argv, char **env, int *code) {
  int report[2]; /* the child's exec errno, if exec fails; closed by a successful exec */
  if (pipe2(report, O_CLOEXEC) != 0) {
    say_error("exec", "pipe: %s", strerror(errno));
    *code = EXIT_OSERR;
    return -1;
  }
  const pid_t parent = getpid();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old); /* no handler of ours runs in the child */
  const pid_t pid = fork();
  if (pid == 0) {
    /* Async-signal-safe calls only: the parent has other threads. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(EXIT_LOST); /* dlock died before prctl: do not run unguarded */
    signals_restore_defaults();
    sigprocmask(SIG_SETMASK, &old, NULL);
    execve(path, argv, env);
    const int e = errno;
    if (write(report[1], &e, sizeof e) < 0) {
    }
    _exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE);
  }
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    say_error("exec", "fork: %s", strerror(fork_errno));
    *code = EXIT_OSERR;
    return -1;
  }
  setpgid(pid, pid); /* also here, so no signal of ours can miss the group (EACCES after exec) */
  int child_errno = 0;
  ssize_t got;
  do {
    got = read(report[0], &child_errno, sizeof child_errno);
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == (ssize_t)sizeof child_errno) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    say_error("exec", "cannot run %s: %s", path, strerror(child_errno));
    *code = child_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE;
    return -1;
  }
  return pid;
}

static void signal_group(const cli_options *o, pid_t group, int sig, const char *why) {
  say_verbose(o, "exec", "sending signal %d (%s) to CMD's process group %ld: %s", sig,
              strsignal(sig), (long)group, why);
  kill(-group, sig);
}

/* Runs CMD under the lock until it exits; returns the exit code. Releases the lock. */
static int supervise(const cli_options *o, const char *name, dlock_lock *lock, dlock_queue *q,
                     pid_t child) {
  bool lost = false, about_to_lose = false, term_sent = false, kill_sent = false;
  int64_t kill_at = -1; /* monotonic ms of the SIGKILL that follows a SIGTERM */
  int status = 0;
  for (bool running = true; running;) {
    const int64_t now = now_ms();
    int64_t wake = -1; /* ms until something must be checked; -1 = only on an event */
    if (!lost && (g_lost_reported || !dlock_lock_is_valid(lock))) {
      lost = true;
      const char *reason = g_lost_reported ? g_lost_reason : "its lease ran out before a renewal got through";
      if (o->on_lost == ON_LOST_IGNORE) {
        say_error("exec", "lock '%s' was lost while CMD ran (--on-lost=ignore: CMD keeps running): %s", name, reason);
      } else {
        say_error("exec", "lock '%s' was lost while CMD ran; stopping CMD: %s", name, reason);
      }
      if (o->on_lost == ON_LOST_KILL || (o->on_lost == ON_LOST_TERM && term_sent)) {
        if (!kill_sent) signal_group(o, child, SIGKILL, "the lock was lost");
        kill_sent = true;
      } else if (o->on_lost == ON_LOST_TERM) {
        signal_group(o, child, SIGTERM, "the lock was lost");
        term_sent = true;
        kill_at = now + o->kill_grace_ms;
      }
    } else if (!lost && !term_sent && !kill_sent && o->lease_ms > 0 && o->on_lost != ON_LOST_IGNORE) {
      const int64_t remaining = dlock_lock_remaining_ms(lock);
      if (remaining <= o->kill_grace_ms) {
        about_to_lose = true;
        say_error("exec", "renewals of lock '%s' are failing, %" PRId64 " ms of its lease left; stopping CMD before it runs out", name, remaining);
        if (o->on_lost == ON_LOST_KILL) {
          signal_group(o, child, SIGKILL, "the lease is about to run out");
          kill_sent = true;
        } else {
          signal_group(o, child, SIGTERM, "the lease is about to run out");
          term_sent = true;
          kill_at = now + remaining;
        }
      } else {
        wake = remaining - o->kill_grace_ms;
      }
    }
    if (kill_at >= 0 && !kill_sent) {
      if (now >= kill_at) {
        signal_group(o, child, SIGKILL, "the kill grace is over");
        kill_sent = true;
      } else if (wake < 0 || kill_at - now < wake) {
        wake = kill_at - now;
      }
    }
    struct pollfd fds[2] = {{.fd = signals_fd(), .events = POLLIN},
                            {.fd = dlock_queue_fd(q), .events = POLLIN}};
    const int timeout = wake < 0 ? -1 : wake > 60000 ? 60000 : (int)wake + 1;
    if (poll(fds, 2, timeout) < 0 && errno != EINTR) {
      say_error("exec", "poll: %s", strerror(errno));
    }
    for (int sig; (sig = signals_next()) != 0;) {
      if (sig == SIGCHLD) continue;
      signal_group(o, child, sig, "forwarded");
    }
    /* Reaped on every wake, not only on SIGCHLD: a wake-up for anything re-checks. */
    pid_t r;
    while ((r = waitpid(child, &status, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == child) running = false;
    drain_queue(q);
  }
  const int cmd_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  say_verbose(o, "exec", "CMD exited with %d", cmd_code);
  if (lost) {
    /* Best-effort cleanup in the background: the lease ends on the server within a drift of
     * now anyway, and dlock's exit must not wait on a server that stopped answering. */
    dlock_release_async(lock, NULL, NULL);
    return EXIT_LOST;
  }
  const dlock_status s = dlock_release(lock);
  if (about_to_lose) return EXIT_LOST;
  if (s == DLOCK_NOT_HELD) {
    say_error("exec", "lock '%s' was lost before CMD finished: %s", name, dlock_last_error());
    return EXIT_LOST;
  }
  if (s != DLOCK_OK) {
    say_note(o, "exec", "releasing lock '%s' failed, it stays held until its lease runs out: %s",
             name, dlock_last_error());
  } else {
    say_verbose(o, "exec", "released lock '%s'", name);
  }
  return cmd_code;
}

int cmd_exec(cli_options *o, int argc, char **argv) {
  char **words = calloc((size_t)argc + 1, sizeof *words);
  int nwords = 0;
  if (!words) return EXIT_OSERR;
  const int dashes = parse_options("exec", ~0u, argc, argv, STOP_AT_DASHES, o, words, &nwords);
  int code = 0;
  if (dashes < 0) {
    code = EXIT_USAGE;
  } else if (o->help) {
    print_help("exec", stdout);
  } else if (nwords == 0) {
    say_error("exec", "no lock NAME (dlock exec [options] NAME -- CMD [ARG...])");
    code = EXIT_USAGE;
  } else if (dashes == argc) {
    say_error("exec", "CMD must follow '--' (dlock exec [options] NAME -- CMD [ARG...])");
    code = EXIT_USAGE;
  } else if (nwords > 1) {
    say_error("exec", "one lock NAME before '--', got %d words ('%s', '%s', ...)", nwords, words[0], words[1]);
    code = EXIT_USAGE;
  } else if (dashes + 1 >= argc) {
    say_error("exec", "no CMD after '--' (dlock exec [options] NAME -- CMD [ARG...])");
    code = EXIT_USAGE;
  } else if (finish_options("exec", o) != 0) {
    code = EXIT_USAGE;
  }
  const char *name = words[0];
  free(words);
  if (code != 0 || o->help) return code;

  char **cmd = argv + dashes + 1;
  char *path = resolve_command(cmd[0], &code);
  if (!path) {
    say_error("exec", "%s: %s", cmd[0], code == EXIT_NOT_FOUND ? "command not found" : "not executable");
    return code;
  }
  dlock_client *client = NULL;
  dlock_queue *q = NULL;
  dlock_lock *lock = NULL;
  char **env = NULL;
  if ((code = take_lock(o, "exec", name, &client, &q, &lock)) != 0) {
  } else if (!(env = child_environment(name, dlock_lock_fencing_token(lock), o->lease_ms))) {
    say_error("exec", "out of memory");
    code = EXIT_OSERR;
    dlock_release(lock);
  } else {
    const pid_t child = start_child(path, cmd, env, &code);
    if (child < 0) {
      dlock_release(lock);
    } else {
      code = supervise(o, name, lock, q, child);
    }
  }
  dlock_client_close(client);
  dlock_queue_free(q);
  free_environment(env);
  free(path);
  return code;
}
