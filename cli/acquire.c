/* Signals through a self-pipe, opening the client, and an acquire a signal can interrupt: the
 * command waits in poll(2) on the completion queue's fd and the signal pipe, so a Ctrl-C while
 * `--wait -1` waits cancels the acquire and gives back whatever it won. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

bool g_lost_reported = false;
char g_lost_reason[512] = "";
size_t g_lost_index = 0;
uint64_t g_release_requests = 0;
char g_release_reason[DLOCK_MAX_REASON_BYTES + 1] = "";
size_t g_release_index = 0;

void lost_cause_text(const dlock_lock *lock, char *buf, size_t len) {
  const char *cause = dlock_lock_lost_cause(lock);
  snprintf(buf, len, "%s", cause ? cause : "");
}

const char *release_refusal(void) {
  static char text[600];
  snprintf(text, sizeof text, "refused: %s", dlock_last_error());
  return text;
}

static int g_signal_pipe[2] = {-1, -1};
static const int kCaught[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};

static void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = (unsigned char)sig;
  ignore_result(write(g_signal_pipe[1], &b, 1)); /* full: a burst of signals; one is enough */
  errno = saved;
}

int signals_install(void) {
  if (pipe2(g_signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < sizeof kCaught / sizeof kCaught[0]; ++i) {
    if (sigaction(kCaught[i], &sa, NULL) != 0) return -1;
  }
  signal(SIGPIPE, SIG_IGN); /* a vanished server is an error to report, not a death */
  return 0;
}

int signals_catch_tstp(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  /* With CMD's group in the terminal's foreground, dlock is in the background: under
   * `stty tostop` a message of its own would stop it (and its heartbeats) with SIGTTOU. */
  signal(SIGTTOU, SIG_IGN);
  return sigaction(SIGTSTP, &sa, NULL);
}

void signals_restore_defaults(void) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (size_t i = 0; i < sizeof kCaught / sizeof kCaught[0]; ++i) sigaction(kCaught[i], &dfl, NULL);
  sigaction(SIGPIPE, &dfl, NULL);
  sigaction(SIGTSTP, &dfl, NULL);
  sigaction(SIGTTOU, &dfl, NULL);
}

int signals_fd(void) { return g_signal_pipe[0]; }

int signals_next(void) {
  unsigned char b;
  return read(g_signal_pipe[0], &b, 1) == 1 ? b : 0;
}

bool is_stop_signal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

int open_client(const cli_options *o, const char *command, dlock_client **out) {
  dlock_status s = dlock_client_open(o->url, out);
  if (s == DLOCK_OK) {
    /* -v --json: the library's events as JSON lines on stderr (output.c). */
    if (o->verbosity == VERBOSE && o->json) (void)dlock_client_set_event_hook(*out, print_event_json, NULL);
    return 0;
  }
  /* The library's message names the server or the URL part that was wrong (redacted). */
  say_error(command, "%s", dlock_last_error());
  return exit_code_for(s);
}

/* A LOST entry was just popped: keep its message (dlock_last_error) for the report, and which
 * lock it was (its tag's index; 0 for a tag of no lock of ours). */
static void note_loss(uint64_t tag) {
  if (g_lost_reported) return;
  g_lost_reported = true;
  g_lost_index = TAG_KIND(tag) == LOST_TAG ? TAG_INDEX(tag) : 0;
  snprintf(g_lost_reason, sizeof g_lost_reason, "%s", dlock_last_error());
}

/* A RELEASE_REQUESTED entry was just popped: count it and keep its reason (dlock_last_error)
 * and its lock's index. */
static void note_release_request(uint64_t tag) {
  ++g_release_requests;
  g_release_index = TAG_INDEX(tag);
  snprintf(g_release_reason, sizeof g_release_reason, "%s", dlock_last_error());
}

void drain_queue(dlock_queue *q) {
  uint64_t tag;
  dlock_status status;
  dlock_lock *lock;
  int kind;
  while ((kind = dlock_queue_pop(q, &tag, &status, &lock)) > 0) {
    if (kind == DLOCK_QUEUE_LOST) note_loss(tag);
    if (kind == DLOCK_QUEUE_RELEASE_REQUESTED && TAG_KIND(tag) == RELEASE_REQUEST_TAG) {
      note_release_request(tag);
    }
    if (lock) dlock_release(lock); /* not ours to keep: a stray acquire's outcome */
  }
}

/* The heartbeat period: a third of the lease, and short enough that a healthy lock never gets
 * within the kill grace of its deadline (exec signals CMD there). */
static uint64_t heartbeat_for(const cli_options *o) {
  if (o->lease_ms <= 0) return 0;
  int64_t period = o->lease_ms / 3;
  const int64_t room = (o->lease_ms - o->kill_grace_ms) / 3;
  if (room < period) period = room;
  return period < 1 ? 1 : (uint64_t)period;
}

/* o as the library's options for the lock at index (its queue tags), waiting up to wait_ms. */
static int set_options(const cli_options *o, const char *command, dlock_queue *q, size_t index,
                       int64_t wait_ms, dlock_options **out) {
  dlock_options *opts = dlock_options_new();
  if (!opts) {
    say_error(command, "out of memory");
    return EXIT_OSERR;
  }
  dlock_status s = dlock_options_set_lease_ms(opts, (uint64_t)o->lease_ms);
  if (s == DLOCK_OK) s = dlock_options_set_heartbeat_ms(opts, heartbeat_for(o));
  if (s == DLOCK_OK) s = dlock_options_set_wait_ms(opts, wait_ms);
  if (s == DLOCK_OK && o->max_hold_ms > 0) s = dlock_options_set_max_hold_ms(opts, (uint64_t)o->max_hold_ms);
  if (s == DLOCK_OK && o->min_hold_ms > 0) s = dlock_options_set_min_hold_ms(opts, (uint64_t)o->min_hold_ms);
  if (s == DLOCK_OK && o->lock_delay_ms > 0) s = dlock_options_set_lock_delay_ms(opts, (uint64_t)o->lock_delay_ms);
  if (s == DLOCK_OK && o->shared) s = dlock_options_set_kind(opts, DLOCK_SHARED);
  if (s == DLOCK_OK && o->permits) s = dlock_options_set_permits(opts, o->permits);
  if (s == DLOCK_OK && o->take) s = dlock_options_set_take(opts, o->take);
  if (s == DLOCK_OK) s = dlock_options_set_owner(opts, o->owner);
  if (s == DLOCK_OK && o->value) s = dlock_options_set_value(opts, o->value, strlen(o->value));
  if (s == DLOCK_OK) s = dlock_options_set_on_lost_queued(opts, q, LOCK_TAG(LOST_TAG, index));
  if (s == DLOCK_OK && o->release_request_signal > 0) {
    s = dlock_options_set_on_release_requested_queued(opts, q, LOCK_TAG(RELEASE_REQUEST_TAG, index));
  }
  if (s != DLOCK_OK) {
    say_error(command, "%s", dlock_last_error());
    dlock_options_free(opts);
    return exit_code_for(s);
  }
  *out = opts;
  return 0;
}

/* Acquires name (the lock at index) waiting up to wait_ms, interruptibly. Returns 0 with *out
 * held, or the exit code; a DLOCK_NOT_ACQUIRED is said (a note) unless not_acquired_said is
 * NULL, and then its message is copied there instead (len bytes) for the caller to say. */
static int acquire_interruptibly(const cli_options *o, const char *command, dlock_client *c,
                                 const char *name, size_t index, int64_t wait_ms, dlock_queue *q,
                                 dlock_lock **out, char *not_acquired_said, size_t len) {
  const uint64_t acquire_tag = LOCK_TAG(ACQUIRE_TAG, index);
  dlock_options *opts = NULL;
  int rc = set_options(o, command, q, index, wait_ms, &opts);
  if (rc != 0) return rc;
  dlock_status s = dlock_acquire_queued(c, name, opts, q, acquire_tag);
  dlock_options_free(opts); /* copied by the call */
  if (s != DLOCK_OK) {
    say_error(command, "%s", dlock_last_error());
    return exit_code_for(s);
  }
  say_verbose(o, command, "waiting for lock '%s' at %s", name, shown_url(o->url));
  int stop_signal = 0;
  for (;;) {
    struct pollfd fds[2] = {{.fd = dlock_queue_fd(q), .events = POLLIN},
                            {.fd = signals_fd(), .events = POLLIN}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      say_error(command, "poll: %s", strerror(errno));
      return EXIT_OSERR;
    }
    for (int sig; (sig = signals_next()) != 0;) {
      if (is_stop_signal(sig) && !stop_signal) {
        stop_signal = sig;
        dlock_acquire_cancel_queued(c, q, acquire_tag);
      }
    }
    uint64_t tag;
    dlock_status status;
    dlock_lock *lock = NULL;
    int kind;
    while ((kind = dlock_queue_pop(q, &tag, &status, &lock)) > 0) {
      if (kind == DLOCK_QUEUE_LOST) { /* lost before we looked: the caller sees it */
        note_loss(tag);
        continue;
      }
      if (kind == DLOCK_QUEUE_RELEASE_REQUESTED) { /* heard before we looked: likewise */
        if (TAG_KIND(tag) == RELEASE_REQUEST_TAG) note_release_request(tag);
        continue;
      }
      if (tag != acquire_tag) {
        if (lock) dlock_release(lock);
        continue;
      }
      if (stop_signal) { /* interrupted: give back what the acquire won, if anything */
        if (lock) dlock_release(lock);
        say_verbose(o, command, "interrupted by signal %d while waiting for lock '%s'",
                    stop_signal, name);
        return 128 + stop_signal;
      }
      if (status == DLOCK_OK) {
        *out = lock;
        say_verbose(o, command, "acquired lock '%s': fencing token %" PRIu64 ", lease %" PRId64 " ms",
                    name, dlock_lock_fencing_token(lock), o->lease_ms);
        return 0;
      }
      if (status == DLOCK_NOT_ACQUIRED) {
        if (not_acquired_said) {
          snprintf(not_acquired_said, len, "%s", dlock_last_error());
        } else {
          say_note(o, command, "%s", dlock_last_error());
        }
        return EXIT_NOT_ACQUIRED;
      }
      say_error(command, "%s", dlock_last_error());
      return exit_code_for(status);
    }
  }
}

static int bytewise(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y); /* as unsigned char: std::string's order in dlock_acquire_many */
}

/* "'a', 'b', 'c'": the names for a message, in memory the caller frees (NULL: out of memory). */
char *quoted_names(const char *const *names, size_t n) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  for (size_t k = 0; k < n; ++k) fprintf(f, "%s'%s'", k ? ", " : "", names[k]);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* Several names: each in turn in bytewise order, each waiting for what is left of o->wait_ms
 * (one try at least), as dlock_acquire_many does, but through the queue so that a stop signal
 * can cancel the wait (dlock_acquire_many blocks, and cannot be cancelled). */
static int acquire_all(const cli_options *o, const char *command, dlock_client *c,
                       const char *const *names, size_t n, dlock_queue *q, dlock_lock **locks,
                       int64_t *first_held_ms) {
  const char **order = malloc(n * sizeof *order);
  if (!order) {
    say_error(command, "out of memory");
    return EXIT_OSERR;
  }
  memcpy(order, names, n * sizeof *order);
  qsort(order, n, sizeof *order, bytewise);
  const int64_t start = monotonic_ms();
  char why[1024] = "";
  int code = 0;
  for (size_t taken = 0; taken < n && code == 0; ++taken) {
    size_t index = 0; /* order[taken]'s place on the command line: the names are distinct */
    while (strcmp(names[index], order[taken]) != 0) ++index;
    int64_t wait = o->wait_ms;
    if (wait > 0) {
      wait = o->wait_ms - (monotonic_ms() - start);
      if (wait < 0) wait = 0;
    }
    code = acquire_interruptibly(o, command, c, names[index], index, wait, q, &locks[index], why, sizeof why);
    if (code == 0 && taken == 0 && first_held_ms) *first_held_ms = monotonic_ms();
  }
  free(order);
  if (code == 0) return 0;
  /* None, then: what was taken is given back (a NOT_HELD here is a hold lost meanwhile, which
   * is given back all the same). */
  bool gave_back = false;
  for (size_t k = 0; k < n; ++k) gave_back |= locks[k] != NULL;
  if (gave_back && dlock_release_many(locks, n) != DLOCK_OK) {
    say_verbose(o, command, "giving back what was taken: %s", dlock_last_error());
  }
  if (code == EXIT_NOT_ACQUIRED) {
    char *all = quoted_names(names, n);
    say_note(o, command, "%s; none of locks %s is held (all or none)", why, all ? all : "");
    free(all);
  }
  return code;
}

int take_lock(const cli_options *o, const char *command, const char *name, dlock_client **client,
              dlock_queue **q, dlock_lock **lock) {
  return take_locks(o, command, &name, 1, client, q, lock, NULL);
}

int take_locks(const cli_options *o, const char *command, const char *const *names, size_t n,
               dlock_client **client, dlock_queue **q, dlock_lock **locks, int64_t *first_held_ms) {
  for (size_t k = 0; k < n; ++k) locks[k] = NULL;
  if (signals_install() != 0) {
    say_error(command, "signals: %s", strerror(errno));
    return EXIT_OSERR;
  }
  int code = open_client(o, command, client);
  if (code != 0) return code;
  if (o->release_request_signal > 0 &&
      (dlock_client_capabilities(*client) & DLOCK_CAP_RELEASE_REQUEST) == 0) {
    /* As an acquire asking for them would be refused (DLOCK_EINVAL), said before it waits. */
    say_error(command, "--on-release-request: the backend at %s cannot deliver release requests "
                       "(no DLOCK_CAP_RELEASE_REQUEST)", shown_url(o->url));
    return EXIT_USAGE;
  }
  if (dlock_queue_new(q) != DLOCK_OK) {
    say_error(command, "%s", dlock_last_error());
    return EXIT_OSERR;
  }
  if (n == 1) {
    const int code = acquire_interruptibly(o, command, *client, names[0], 0, o->wait_ms, *q, locks, NULL, 0);
    if (code == 0 && first_held_ms) *first_held_ms = monotonic_ms();
    return code;
  }
  return acquire_all(o, command, *client, names, n, *q, locks, first_held_ms);
}
