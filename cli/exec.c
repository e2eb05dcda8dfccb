/* dlock exec [options] NAME [NAME...] -- CMD [ARG...]: run CMD while holding the lock (or
 * every one of several: all or none).
 *
 * The processes. dlock forks a guard (guard.c), then CMD; both are dlock's children, in one
 * process group whose leader (and id) is the guard's pid:
 *
 *   dlock ──┬── guard   (leader of CMD's group; never execs)
 *           └── CMD ── CMD's children (stay in the group unless they leave it)
 *
 * dlock stays CMD's parent, so it reaps CMD and reports CMD's own status exactly as before
 * (128+N on signal N), and it sees CMD stop and continue (WUNTRACED, WCONTINUED). The guard
 * kills the group when dlock dies, or is stopped while the lease runs out; it writes one byte
 * back first, so that dlock can tell its kill from anyone else's. CMD also keeps
 * PR_SET_PDEATHSIG (SIGKILL) of its own.
 *
 * While CMD runs the library renews the lease; dlock watches the lock and acts before a lease
 * could run out on the server with CMD still running:
 *   - a loss the server reports (the key is gone or someone else holds it): SIGTERM to CMD at
 *     once, SIGKILL kill-grace later (--on-lost=kill: SIGKILL at once; ignore: nothing);
 *   - renewals that keep failing: SIGTERM when only kill-grace is left of the local deadline,
 *     SIGKILL at the deadline (the library's, which is drift earlier than the server's).
 * Either way dlock exits 70 and says so. Otherwise it releases the lock when CMD exits and exits
 * with CMD's status (128+N when CMD died of signal N).
 *
 * With --on-release-request SIG, the lock listens for release requests (dlock request-release):
 * each one heard sends SIG to CMD's group, with a line on stderr. Nothing more: CMD decides
 * whether to let go, and the lock is released when it exits, as always.
 *
 * Job control. With a controlling terminal, dlock acts as a shell does for a job: CMD's group
 * gets the terminal when dlock is in the foreground; when CMD stops (Ctrl-Z, SIGTTIN, SIGSTOP),
 * dlock takes the terminal back and stops itself (SIGSTOP), so its heartbeats stop and the
 * lease lapses on the server unless it is continued in time. On SIGCONT (fg, bg) it continues
 * CMD only while the lock is still valid; otherwise it SIGKILLs the stopped group and exits 70.
 * Without a terminal (cron, CI, services), dlock keeps running when CMD stops and keeps the
 * lock for at most --stopped-grace; then it SIGKILLs the group, releases and exits 70.
 *
 * CMD gets descriptors 0, 1, 2 and those dlock inherited, nothing dlock opened (the library's
 * sockets and pipes): the child closes the rest before execve. Its environment is dlock's
 * without DLOCK_URL and DLOCK_URL_FILE, with DLOCK_NAME, DLOCK_FENCING_TOKEN, DLOCK_LEASE_MS,
 * DLOCK_NAMES and DLOCK_FENCING_TOKENS.
 *
 * Several names (exec only): taken all or none by take_locks (acquire.c), in bytewise order so
 * that `exec a b` and `exec b a` never deadlock, --wait bounding the whole acquire. Every rule
 * above applies to each of them: the loss of any one is a loss (the message names it), the
 * guard's deadline is the earliest of their deadlines, a release request for any one is passed
 * on, and all are released together (dlock_release_many) when CMD exits. DLOCK_NAME and
 * DLOCK_FENCING_TOKEN are the first name's (as given); DLOCK_NAMES and DLOCK_FENCING_TOKENS
 * list every name and token, one per line, in the order given.
 *
 * --status-file PATH gets dlock's own outcome, one line (status_file.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* ----- finding CMD and its environment ---------------------------------------------------- */

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

/* The locks CMD runs under: names[k] (as given) held by locks[k], k < n, n >= 1. */
typedef struct lockset {
  const char *const *names;
  dlock_lock **locks;
  size_t n;
  int64_t held_since; /* monotonic ms when the first was taken: several names' --max-hold */
  const char *what;   /* "lock 'a'", or "locks 'a', 'b'", for messages */
} lockset;

static bool all_valid(const lockset *ls) {
  for (size_t k = 0; k < ls->n; ++k) {
    if (!dlock_lock_is_valid(ls->locks[k])) return false;
  }
  return true;
}

/* The least time left before one of the locks' local deadlines, and whose (which may be NULL). */
static int64_t least_remaining(const lockset *ls, size_t *which) {
  size_t least = 0;
  int64_t remaining = dlock_lock_remaining_ms(ls->locks[0]);
  for (size_t k = 1; k < ls->n; ++k) {
    const int64_t r = dlock_lock_remaining_ms(ls->locks[k]);
    if (r < remaining) {
      remaining = r;
      least = k;
    }
  }
  if (which) *which = least;
  return remaining;
}

/* The lock a loss is about: the one whose loss was reported first, else the first that is no
 * longer valid, else the one with the least time left. */
static size_t lost_one(const lockset *ls) {
  if (g_lost_reported && g_lost_index < ls->n) return g_lost_index;
  for (size_t k = 0; k < ls->n; ++k) {
    if (!dlock_lock_is_valid(ls->locks[k])) return k;
  }
  size_t k;
  least_remaining(ls, &k);
  return k;
}

/* Releases every lock now (CMD never ran): dlock_release for one, dlock_release_many for
 * several. */
static void release_all(lockset *ls) {
  if (ls->n == 1) {
    dlock_release(ls->locks[0]);
  } else {
    dlock_release_many(ls->locks, ls->n);
  }
}

/* The environment CMD gets: ours without DLOCK_URL and DLOCK_URL_FILE (the backend's address
 * and password are dlock's, not CMD's), with DLOCK_NAME, DLOCK_FENCING_TOKEN, DLOCK_LEASE_MS,
 * DLOCK_NAMES and DLOCK_FENCING_TOKENS set (the last kSet entries, which free_environment
 * frees). */
enum { kSet = 5 };

static void free_environment(char **env) {
  if (!env) return;
  size_t n = 0;
  while (env[n]) ++n;
  for (size_t i = n >= kSet ? n - kSet : 0; i < n; ++i) free(env[i]);
  free(env);
}

static bool has_name(const char *entry, const char *name) {
  const size_t n = strlen(name);
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* "NAME=v0\nv1...": the values one per line (no newline after the last). */
static char *list_variable(const char *variable, const lockset *ls, bool tokens) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  fprintf(f, "%s=", variable);
  for (size_t k = 0; k < ls->n; ++k) {
    if (k) fputc('\n', f);
    if (tokens) {
      fprintf(f, "%" PRIu64, dlock_lock_fencing_token(ls->locks[k]));
    } else {
      fputs(ls->names[k], f);
    }
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

static char **child_environment(const lockset *ls, int64_t lease_ms) {
  static const char *const kDropped[] = {"DLOCK_NAME", "DLOCK_FENCING_TOKEN", "DLOCK_LEASE_MS",
                                         "DLOCK_NAMES", "DLOCK_FENCING_TOKENS",
                                         "DLOCK_URL", "DLOCK_URL_FILE"};
  size_t n = 0;
  while (environ[n]) ++n;
  char **env = calloc(n + kSet + 1, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    bool dropped = false;
    for (size_t d = 0; d < sizeof kDropped / sizeof kDropped[0]; ++d) dropped |= has_name(environ[i], kDropped[d]);
    if (!dropped) env[k++] = environ[i];
  }
  char **set = env + k;
  if (asprintf(&set[0], "DLOCK_NAME=%s", ls->names[0]) < 0) set[0] = NULL;
  if (asprintf(&set[1], "DLOCK_FENCING_TOKEN=%" PRIu64, dlock_lock_fencing_token(ls->locks[0])) < 0) set[1] = NULL;
  if (asprintf(&set[2], "DLOCK_LEASE_MS=%" PRId64, lease_ms) < 0) set[2] = NULL;
  set[3] = list_variable("DLOCK_NAMES", ls, false);
  set[4] = list_variable("DLOCK_FENCING_TOKENS", ls, true);
  bool complete = true;
  for (int i = 0; i < kSet; ++i) complete &= set[i] != NULL;
  if (!complete) {
    for (int i = 0; i < kSet; ++i) free(set[i]);
    free(env);
    return NULL;
  }
  return env;
}

/* ----- starting CMD ----------------------------------------------------------------------- */

typedef struct job {
  pid_t cmd;          /* CMD, dlock's child */
  pid_t group;        /* CMD's process group: the guard's pid; -1 before it started */
  int guard_sock;     /* dlock's end of the socketpair with the guard; -1 */
  int tty;            /* the controlling terminal, -1 without one */
  int64_t sent_deadline;
  char guard_fired;   /* the guard's byte: why it killed the group; 0 = it did not */
} job;

/* tcsetpgrp, also from a background group (as shells do: SIGTTOU blocked meanwhile). */
static void hand_terminal(int tty, pid_t group) {
  sigset_t ttou, old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  sigprocmask(SIG_BLOCK, &ttou, &old);
  ignore_result(tcsetpgrp(tty, group)); /* a terminal that went away: nothing to hand over */
  sigprocmask(SIG_SETMASK, &old, NULL);
}

static void guard_read(job *j) {
  char why;
  if (j->guard_sock >= 0 && !j->guard_fired && recv(j->guard_sock, &why, 1, MSG_DONTWAIT) == 1) {
    j->guard_fired = why;
  }
}

/* The lock's local deadline for the guard (CLOCK_MONOTONIC ms), or GUARD_NO_DEADLINE when the
 * guard is to act only on dlock's death (--on-lost ignore, --lease 0, a lock already lost). */
static int64_t guard_deadline(const cli_options *o, const lockset *ls) {
  if (o->on_lost == ON_LOST_IGNORE || o->lease_ms <= 0) return GUARD_NO_DEADLINE;
  const int64_t now = monotonic_ms(); /* before remaining: the sum can only be early, never late */
  const int64_t remaining = least_remaining(ls, NULL); /* several: the earliest deadline */
  if (remaining <= 0 || remaining == INT64_MAX) return GUARD_NO_DEADLINE;
  return now + remaining;
}

/* Sends the guard the lock's local deadline when it moved later (after a renewal). */
static void guard_update(job *j, const cli_options *o, const lockset *ls) {
  if (j->guard_sock < 0) return;
  const int64_t deadline = guard_deadline(o, ls);
  if (deadline == GUARD_NO_DEADLINE || deadline <= j->sent_deadline) return;
  if (send(j->guard_sock, &deadline, sizeof deadline, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof deadline) {
    j->sent_deadline = deadline;
  }
}

/* The guard is not needed any more (CMD was reaped): SIGKILL it by pid and reap it. What it
 * wrote before, if anything, is read first. Gives the terminal back to dlock's group. */
static void end_job(job *j) {
  guard_read(j);
  if (j->group > 0) {
    kill(j->group, SIGKILL);
    while (waitpid(j->group, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  if (j->guard_sock >= 0) close(j->guard_sock);
  j->guard_sock = -1;
  if (j->tty >= 0) {
    if (tcgetpgrp(j->tty) == j->group) hand_terminal(j->tty, getpgrp());
    close(j->tty);
    j->tty = -1;
  }
  j->group = -1;
}

/* Starts the guard and CMD (see the top of this file). Returns 0, or the exit code after
 * saying why (nothing is left running then). */
static int start_job(const cli_options *o, const lockset *ls, const char *path, char **argv, char **env,
                     job *j) {
  *j = (job){.cmd = -1, .group = -1, .guard_sock = -1, .tty = -1, .sent_deadline = 0};
  j->tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  const bool foreground = j->tty >= 0 && tcgetpgrp(j->tty) == getpgrp();
  int pair[2], report[2]; /* report: the child's exec errno, if exec fails; closed by exec */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    say_error(o->command, "socketpair: %s", strerror(errno));
    end_job(j);
    return EXIT_OSERR;
  }
  if (pipe2(report, O_CLOEXEC) != 0) {
    say_error(o->command, "pipe: %s", strerror(errno));
    close(pair[0]);
    close(pair[1]);
    end_job(j);
    return EXIT_OSERR;
  }
  /* What the child keeps: what dlock inherited, and the report pipe until exec. */
  size_t nkeep;
  int *keep = fds_to_keep(report[1], &nkeep);
  const unsigned max_fd = fallback_max_fd();
  const int64_t guard_grace = o->kill_grace_ms;
  /* The guard starts with the deadline: CMD never runs before the guard has one. */
  const int64_t first_deadline = guard_deadline(o, ls);
  j->sent_deadline = first_deadline;
  const pid_t parent = getpid();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old); /* no handler of ours runs in a child */

  const pid_t guard = fork();
  if (guard == 0) {
    setpgid(0, 0);
    guard_main(pair[1], parent, first_deadline, guard_grace, max_fd);
  }
  int fork_errno = errno;
  pid_t pid = -1;
  if (guard > 0) {
    setpgid(guard, guard); /* before CMD joins the group: it must exist */
    j->group = guard;
    pid = fork();
    if (pid == 0) {
      /* Async-signal-safe calls only: the parent has other threads. */
      setpgid(0, guard);
      if (foreground) tcsetpgrp(j->tty, guard); /* SIGTTOU is blocked */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(EXIT_LOST); /* dlock died before prctl: do not run unguarded */
      signals_restore_defaults();
      if (keep) close_fds_except(keep, nkeep, max_fd);
      sigprocmask(SIG_SETMASK, &old, NULL);
      execve(path, argv, env);
      const int e = errno;
      /* Should this fail, dlock still learns 126 or 127 from the exit status. */
      ignore_result(write(report[1], &e, sizeof e));
      _exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE);
    }
    fork_errno = errno;
    if (pid > 0) {
      setpgid(pid, guard); /* also here, so no signal of ours can miss the group (EACCES after exec) */
      if (foreground) tcsetpgrp(j->tty, guard);
    }
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  free(keep);
  close(pair[1]);
  close(report[1]);
  j->guard_sock = pair[0];
  if (guard < 0 || pid < 0) {
    close(report[0]);
    say_error(o->command, "fork: %s", strerror(fork_errno));
    end_job(j);
    return EXIT_OSERR;
  }
  j->cmd = pid;
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
    end_job(j);
    say_error(o->command, "cannot run %s: %s", path, strerror(child_errno));
    return child_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE;
  }
  return 0;
}

/* ----- watching CMD ----------------------------------------------------------------------- */

static void signal_group(const cli_options *o, pid_t group, int sig, const char *why) {
  say_verbose(o, o->command, "sending signal %d (%s) to CMD's process group %ld: %s", sig,
              strsignal(sig), (long)group, why);
  kill(-group, sig);
}

/* Release requests heard since the last look (dlock request-release NAME): --on-release-request's
 * signal to CMD's group, once per look, and one line on stderr (a JSON note under -v --json).
 * CMD decides: dlock keeps the lock until CMD exits, and releases it then as always. Not passed
 * on once CMD is being stopped anyway (a loss, --max-hold, --stopped-grace). */
static void forward_release_requests(const cli_options *o, const lockset *ls, pid_t group,
                                     uint64_t *seen, bool stopping) {
  if (o->release_request_signal <= 0 || g_release_requests == *seen) return;
  /* Several names: the lock the last request asked for. */
  const char *name = ls->names[g_release_index < ls->n ? g_release_index : 0];
  const uint64_t heard = g_release_requests - *seen;
  *seen = g_release_requests;
  char *reason = g_release_reason[0] ? text_string_dup(g_release_reason, true) : NULL;
  char count[48] = "";
  if (heard > 1) snprintf(count, sizeof count, " (%" PRIu64 " requests)", heard);
  char *line = NULL;
  int n;
  if (stopping) {
    n = asprintf(&line, "asked to let go of lock '%s'%s%s%s; not passed on: CMD is being stopped already",
                 name, count, reason ? ", reason " : "", reason ? reason : "");
  } else {
    n = asprintf(&line, "asked to let go of lock '%s'%s%s%s; sending %s to CMD, which decides (the lock is "
                 "released when CMD exits)",
                 name, count, reason ? ", reason " : "", reason ? reason : "",
                 signal_name(o->release_request_signal));
  }
  free(reason);
  if (n >= 0) {  /* said before it is sent: CMD's own output about it comes after */
    if (o->verbosity == VERBOSE && o->json) {
      say_verbose(o, o->command, "%s", line); /* a JSON note, as the other lines are then */
    } else {
      say_note(o, o->command, "%s", line);
    }
    free(line);
  }
  if (!stopping) kill(-group, o->release_request_signal);
}

static void wake_within(int64_t *wake, int64_t ms) {
  if (ms < 0) ms = 0;
  if (*wake < 0 || ms < *wake) *wake = ms;
}

/* CMD stopped, with a terminal: do as a shell's job does. Takes the terminal back and stops
 * dlock (its heartbeats stop with it); once continued, continues CMD (with the terminal, when
 * dlock is in the foreground) if the lock still holds, or SIGKILLs the stopped group. Returns
 * true when CMD was continued. */
static bool follow_stop(const cli_options *o, const lockset *ls, dlock_queue *q, job *j, int sig) {
  if (tcgetpgrp(j->tty) == j->group) hand_terminal(j->tty, getpgrp());
  say_verbose(o, o->command, "CMD stopped (%s): dlock stops too; the lock's lease runs out unless it is continued in time",
              strsignal(sig));
  kill(getpid(), SIGSTOP);
  /* Continued (fg or bg). */
  drain_queue(q);
  guard_read(j);
  const bool valid = !g_lost_reported && all_valid(ls) && !j->guard_fired;
  if (!valid && o->on_lost != ON_LOST_IGNORE) {
    say_error(o->command, "lock '%s' ran out while CMD was stopped; killing CMD", ls->names[lost_one(ls)]);
    kill(-j->group, SIGKILL);
    return false;
  }
  if (tcgetpgrp(j->tty) == getpgrp()) hand_terminal(j->tty, j->group);
  say_verbose(o, o->command, "continuing CMD");
  kill(-j->group, SIGCONT);
  return true;
}

/* Runs CMD under the locks until it exits; returns the exit code and writes the status file.
 * Releases the locks. */
static int supervise(const cli_options *o, lockset *ls, dlock_queue *q, job *j) {
  bool lost = false, about_to_lose = false, term_sent = false, kill_sent = false;
  bool cmd_stopped = false, stopped_out = false, max_hold_reached = false;
  /* For --max-hold: one lock was acquired just before; of several, the first was taken when
   * the acquire of the others began, and its --max-hold runs from then. */
  const int64_t started = ls->n > 1 ? ls->held_since : monotonic_ms();
  int64_t kill_at = -1;    /* monotonic ms of the SIGKILL that follows a SIGTERM */
  int64_t stopped_at = -1; /* when dlock saw CMD stop (without a terminal) */
  int64_t tick = -1;       /* how often the guard's deadline is brought up to date */
  if (o->lease_ms > 0 && o->on_lost != ON_LOST_IGNORE) {
    /* Well within a heartbeat period (a third of lease - kill-grace, or less): the guard hears
     * of a renewal long before its old deadline comes within the kill grace. */
    tick = (o->lease_ms - o->kill_grace_ms) / 4;
    tick = tick < 10 ? 10 : tick > 1000 ? 1000 : tick;
  }
  const pid_t group = j->group;
  uint64_t requests_seen = 0; /* g_release_requests already passed on */
  int status = 0;
  for (bool running = true; running;) {
    const int64_t now = monotonic_ms();
    int64_t wake = tick; /* ms until something must be checked; -1 = only on an event */
    guard_update(j, o, ls);
    if (!lost && !stopped_out && (g_lost_reported || !all_valid(ls))) {
      lost = true;
      const size_t k = lost_one(ls); /* of several, the loss of any one is a loss */
      const char *name = ls->names[k];
      /* "CAUSE: details" (dlock_lock_lost_cause: deleted, taken_over, refused, expired). */
      const char *cause = dlock_lock_lost_cause(ls->locks[k]);
      const char *reason = cause         ? cause
                           : g_lost_reported ? g_lost_reason
                                             : "its lease ran out before a renewal got through";
      if (o->on_lost == ON_LOST_IGNORE) {
        say_error(o->command, "lock '%s' was lost while CMD ran (--on-lost=ignore: CMD keeps running): %s", name, reason);
      } else {
        say_error(o->command, "lock '%s' was lost while CMD ran; stopping CMD: %s", name, reason);
      }
      if (o->on_lost == ON_LOST_KILL || (o->on_lost == ON_LOST_TERM && term_sent)) {
        if (!kill_sent) signal_group(o, group, SIGKILL, "the lock was lost");
        kill_sent = true;
      } else if (o->on_lost == ON_LOST_TERM) {
        signal_group(o, group, SIGTERM, "the lock was lost");
        term_sent = true;
        kill_at = now + o->kill_grace_ms;
      }
    } else if (o->max_hold_ms > 0 && !lost && !max_hold_reached && now - started >= o->max_hold_ms) {
      /* A job timeout across machines: stopped as for a loss. The library's heartbeats stop too,
       * so the lock ends with its lease even if this process hangs. */
      max_hold_reached = true;
      if (o->on_lost == ON_LOST_IGNORE) {
        say_error(o->command, "%s reached --max-hold (%" PRId64 " ms) while CMD ran (--on-lost=ignore: CMD keeps running, the lock ends with its lease)",
                  ls->what, o->max_hold_ms);
      } else {
        say_error(o->command, "%s reached --max-hold (%" PRId64 " ms) while CMD ran; stopping CMD", ls->what, o->max_hold_ms);
        if (o->on_lost == ON_LOST_KILL) {
          if (!kill_sent) signal_group(o, group, SIGKILL, "--max-hold was reached");
          kill_sent = true;
        } else if (!term_sent) {
          signal_group(o, group, SIGTERM, "--max-hold was reached");
          term_sent = true;
          /* The kill grace, or what is left of the lease if less: CMD never outlives the lock. */
          const int64_t left = least_remaining(ls, NULL);
          kill_at = now + (left < o->kill_grace_ms ? left : o->kill_grace_ms);
        }
      }
    } else if (!lost && !term_sent && !kill_sent && o->lease_ms > 0 && o->on_lost != ON_LOST_IGNORE) {
      size_t k;
      const int64_t remaining = least_remaining(ls, &k);
      if (remaining <= o->kill_grace_ms) {
        about_to_lose = true;
        say_error(o->command, "renewals of lock '%s' are failing, %" PRId64 " ms of its lease left; stopping CMD before it runs out", ls->names[k], remaining);
        if (o->on_lost == ON_LOST_KILL) {
          signal_group(o, group, SIGKILL, "the lease is about to run out");
          kill_sent = true;
        } else {
          signal_group(o, group, SIGTERM, "the lease is about to run out");
          term_sent = true;
          kill_at = now + remaining;
        }
      } else {
        wake_within(&wake, remaining - o->kill_grace_ms);
      }
    }
    if (o->max_hold_ms > 0 && !max_hold_reached) wake_within(&wake, o->max_hold_ms - (now - started));
    if (kill_at >= 0 && !kill_sent) {
      if (now >= kill_at) {
        signal_group(o, group, SIGKILL, "the kill grace is over");
        kill_sent = true;
      } else {
        wake_within(&wake, kill_at - now);
      }
    }
    if (cmd_stopped && j->tty < 0 && !kill_sent) { /* no terminal: at most --stopped-grace */
      if (now - stopped_at >= o->stopped_grace_ms) {
        say_error(o->command, "CMD stayed stopped for longer than --stopped-grace (%" PRId64 " ms); killing it and releasing %s",
                  o->stopped_grace_ms, ls->what);
        signal_group(o, group, SIGKILL, "stopped for longer than --stopped-grace");
        kill_sent = true;
        stopped_out = true;
      } else {
        wake_within(&wake, stopped_at + o->stopped_grace_ms - now);
      }
    }
    struct pollfd fds[2] = {{.fd = signals_fd(), .events = POLLIN},
                            {.fd = dlock_queue_fd(q), .events = POLLIN}};
    const int timeout = wake < 0 ? -1 : wake > 60000 ? 60000 : (int)wake + 1;
    if (poll(fds, 2, timeout) < 0 && errno != EINTR) {
      say_error(o->command, "poll: %s", strerror(errno));
    }
    for (int sig; (sig = signals_next()) != 0;) {
      if (sig == SIGCHLD) continue;
      signal_group(o, group, sig, "forwarded");
    }
    /* Reaped on every wake, not only on SIGCHLD: a wake-up for anything re-checks. */
    for (;;) {
      int st;
      const pid_t r = waitpid(j->cmd, &st, WNOHANG | WUNTRACED | WCONTINUED);
      if (r < 0 && errno == EINTR) continue;
      if (r != j->cmd) break;
      if (WIFSTOPPED(st)) {
        if (!cmd_stopped) stopped_at = monotonic_ms();
        cmd_stopped = true;
        if (j->tty < 0) {
          say_verbose(o, o->command, "CMD stopped (%s); it keeps the lock for at most --stopped-grace (%" PRId64 " ms)",
                      strsignal(WSTOPSIG(st)), o->stopped_grace_ms);
        } else if (!kill_sent) {
          drain_queue(q);
          if (follow_stop(o, ls, q, j, WSTOPSIG(st))) {
            cmd_stopped = false;
          } else {
            kill_sent = true;
            stopped_out = true;
          }
        }
      } else if (WIFCONTINUED(st)) {
        cmd_stopped = false;
      } else {
        status = st;
        running = false;
        break;
      }
    }
    drain_queue(q);
    if (running) {
      forward_release_requests(o, ls, group, &requests_seen,
                               lost || term_sent || kill_sent || max_hold_reached || stopped_out);
    }
  }
  if (j->tty >= 0 && tcgetpgrp(j->tty) == group) hand_terminal(j->tty, getpgrp());
  guard_read(j);
  if (j->guard_fired && !lost && !stopped_out && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
    /* Its kill, not CMD's own end: dlock was stopped while the lease ran out. */
    say_error(o->command, "CMD was killed by its guard: dlock was stopped while the lease of lock '%s' ran out",
              ls->names[lost_one(ls)]);
    lost = true;
  }
  const int cmd_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  say_verbose(o, o->command, "CMD exited with %d", cmd_code);
  if (lost || (stopped_out && !all_valid(ls))) {
    /* Best-effort cleanup in the background: the lease ends on the server within a drift of
     * now anyway, and dlock's exit must not wait on a server that stopped answering. */
    for (size_t k = 0; k < ls->n; ++k) dlock_release_async(ls->locks[k], NULL, NULL);
    write_status(o, !lost ? "stopped" : max_hold_reached ? "max-hold" : "lost");
    return EXIT_LOST;
  }
  /* The release frees the locks: their loss causes are read first. */
  char(*cause_before)[512] = calloc(ls->n, sizeof *cause_before);
  for (size_t k = 0; cause_before && k < ls->n; ++k) {
    lost_cause_text(ls->locks[k], cause_before[k], sizeof cause_before[k]);
  }
  const dlock_status s = ls->n == 1 ? dlock_release(ls->locks[0]) : dlock_release_many(ls->locks, ls->n);
  const char *outcome = stopped_out ? "stopped" : about_to_lose ? "lost" : max_hold_reached ? "max-hold" : NULL;
  if (!outcome && s == DLOCK_NOT_HELD) {
    /* Each lock that knew its cause is named with it; else the release's message names each. */
    bool named = false;
    for (size_t k = 0; cause_before && k < ls->n; ++k) {
      if (!cause_before[k][0]) continue;
      say_error(o->command, "lock '%s' was lost before CMD finished: %s", ls->names[k], cause_before[k]);
      named = true;
    }
    if (!named && ls->n == 1) {
      say_error(o->command, "lock '%s' was lost before CMD finished: %s", ls->names[0], release_refusal());
    } else if (!named) {
      say_error(o->command, "a lock of %s was lost before CMD finished: %s", ls->what + strlen("locks "),
                release_refusal());
    }
    outcome = "lost";
  }
  free(cause_before);
  if (outcome) {
    write_status(o, "%s", outcome);
    return EXIT_LOST;
  }
  if (s != DLOCK_OK && ls->n == 1) {
    say_note(o, o->command, "releasing lock '%s' failed, it stays held until its lease runs out: %s",
             ls->names[0], dlock_last_error());
  } else if (s != DLOCK_OK) {
    say_note(o, o->command, "releasing %s failed, each one not released stays held until its lease runs out: %s",
             ls->what, dlock_last_error());
  } else {
    say_verbose(o, o->command, "released %s", ls->what);
  }
  if (WIFEXITED(status)) {
    write_status(o, "cmd-exited %d", WEXITSTATUS(status));
  } else {
    write_status(o, "cmd-signalled %d", WTERMSIG(status));
  }
  return cmd_code;
}

/* Several names (exec): each one 1..DLOCK_MAX_NAME_BYTES bytes, without a newline (CMD gets them
 * one per line in DLOCK_NAMES), and none given twice. Checked before any is taken: a bad one
 * must not leave the others held. 0, or -1 after saying what was wrong. */
static int check_names(const char *command, char **names, int n) {
  for (int k = 0; k < n; ++k) {
    const size_t len = strnlen(names[k], DLOCK_MAX_NAME_BYTES + 1);
    char *shown = text_string_dup(names[k], true);
    int bad = 1;
    if (len == 0) {
      say_error(command, "lock NAME %d is empty", k + 1);
    } else if (len > DLOCK_MAX_NAME_BYTES) {
      say_error(command, "lock NAME %d is longer than %d bytes", k + 1, DLOCK_MAX_NAME_BYTES);
    } else if (strchr(names[k], '\n')) {
      say_error(command, "lock name %s holds a newline: with several names, CMD gets them one per line in DLOCK_NAMES",
                shown ? shown : "");
    } else {
      bad = 0;
      for (int e = 0; e < k && !bad; ++e) {
        if (strcmp(names[e], names[k]) != 0) continue;
        say_error(command, "lock %s is named twice (all or none of several distinct names)", shown ? shown : "");
        bad = 1;
      }
    }
    free(shown);
    if (bad) return -1;
  }
  return 0;
}

/* exec and elect: elect is exec with no wait limit (a campaign) and no shared kind, permits or
 * take (a leadership is exclusive), and one name. The names stay in g_run.names (argv's words) for
 * --metrics-textfile; run_and_record frees them. */
static int run_under_lock(cli_options *o, const char *command, unsigned groups, int argc, char **argv) {
  o->command = command;
  char **words = calloc((size_t)argc + 1, sizeof *words);
  int nwords = 0;
  if (!words) return EXIT_OSERR;
  const bool several = strcmp(command, "exec") == 0; /* may take several names */
  const char *names_usage = several ? "NAME [NAME...]" : "NAME";
  const int dashes = parse_options(command, groups, argc, argv, STOP_AT_DASHES, o, words, &nwords);
  int code = 0;
  if (dashes < 0) {
    code = EXIT_USAGE;
  } else if (o->help) {
    print_help(command, stdout);
  } else if (nwords == 0) {
    say_error(command, "no lock NAME (dlock %s [options] %s -- CMD [ARG...])", command, names_usage);
    code = EXIT_USAGE;
  } else if (dashes == argc) {
    say_error(command, "CMD must follow '--' (dlock %s [options] %s -- CMD [ARG...])", command, names_usage);
    code = EXIT_USAGE;
  } else if (nwords > 1 && !several) {
    say_error(command, "one lock NAME before '--', got %d words ('%s', '%s', ...)", nwords, words[0], words[1]);
    code = EXIT_USAGE;
  } else if (dashes + 1 >= argc) {
    say_error(command, "no CMD after '--' (dlock %s [options] %s -- CMD [ARG...])", command, names_usage);
    code = EXIT_USAGE;
  } else if (nwords > 1 && check_names(command, words, nwords) != 0) {
    code = EXIT_USAGE;
  } else if (finish_options(command, o) != 0) {
    code = EXIT_USAGE;
  }
  const size_t n = !several && nwords > 1 ? 1 : (size_t)nwords;
  g_run.names = words;
  g_run.nnames = n;
  g_run.started_ms = monotonic_ms();
  if (code != 0) write_failure_status(o, code);
  if (code != 0 || o->help) return code;

  char **cmd = argv + dashes + 1;
  char *path = resolve_command(cmd[0], &code);
  if (!path) {
    say_error(command, "%s: %s", cmd[0], code == EXIT_NOT_FOUND ? "command not found" : "not executable");
    write_failure_status(o, code);
    return code;
  }
  if (write_status(o, "waiting") != 0) {
    free(path);
    return EXIT_OSERR;
  }
  dlock_client *client = NULL;
  dlock_queue *q = NULL;
  char **env = NULL;
  job j;
  lockset ls = {.names = (const char *const *)words, .locks = calloc(n, sizeof(dlock_lock *)), .n = n};
  char *what = NULL, *listed = n > 1 ? quoted_names(ls.names, n) : NULL;
  g_run.fencing_tokens = calloc(n, sizeof *g_run.fencing_tokens);
  if (n == 1 ? asprintf(&what, "lock '%s'", words[0]) < 0 : !listed || asprintf(&what, "locks %s", listed) < 0) {
    what = NULL;
  }
  ls.what = what;
  if (!ls.locks || !what || !g_run.fencing_tokens) {
    say_error(command, "out of memory");
    code = EXIT_OSERR;
    write_failure_status(o, code);
  } else if ((code = take_locks(o, command, ls.names, n, &client, &q, ls.locks, &ls.held_since)) != 0) {
    write_failure_status(o, code);
  } else if (!(env = child_environment(&ls, o->lease_ms))) {
    say_error(command, "out of memory");
    code = EXIT_OSERR;
    write_failure_status(o, code);
    release_all(&ls);
  } else {
    g_run.acquired_ms = monotonic_ms();
    for (size_t k = 0; k < n; ++k) g_run.fencing_tokens[k] = dlock_lock_fencing_token(ls.locks[k]);
    /* Several names: the first one's token, as DLOCK_FENCING_TOKEN. */
    write_status(o, "acquired %" PRIu64, g_run.fencing_tokens[0]);
    if ((code = start_job(o, &ls, path, cmd, env, &j)) != 0) {
      write_failure_status(o, code);
      release_all(&ls);
    } else {
      signals_catch_tstp(); /* from now on, a TSTP to dlock stops CMD's group */
      code = supervise(o, &ls, q, &j);
      g_run.ended_ms = monotonic_ms();
      end_job(&j);
    }
  }
  dlock_client_close(client);
  dlock_queue_free(q);
  free_environment(env);
  free(path);
  free(ls.locks);
  free(what);
  free(listed);
  return code;
}

/* run_under_lock, then --metrics-textfile (a run that failed to start writes one too). */
static int run_and_record(cli_options *o, const char *command, unsigned groups, int argc, char **argv) {
  const int code = run_under_lock(o, command, groups, argc, argv);
  const bool written = o->help || write_metrics_textfile(o, code) == 0;
  free(g_run.names);
  free(g_run.fencing_tokens);
  g_run.names = NULL;
  g_run.fencing_tokens = NULL;
  g_run.nnames = 0;
  if (o->help) return code;
  return written || code != 0 ? code : EXIT_OSERR;
}

int cmd_exec(cli_options *o, int argc, char **argv) {
  return run_and_record(o, "exec", ~(unsigned)(CLI_OPT_BREAK | CLI_OPT_REASON), argc, argv);
}

/* --on-release-request fits a leader too: `dlock request-release NAME` asks it to step down,
 * its CMD decides, and dlock resigns when CMD exits. */
int cmd_elect(cli_options *o, int argc, char **argv) {
  o->wait_ms = -1;  /* a campaign waits until it leads */
  return run_and_record(o, "elect",
                        ~(unsigned)(CLI_OPT_KIND | CLI_OPT_WAIT | CLI_OPT_BREAK | CLI_OPT_REASON | CLI_OPT_RULES),
                        argc, argv);
}
