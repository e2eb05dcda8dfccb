/* The dlock command's parts: options (args.c), messages and JSON (output.c), an acquire that a
 * signal can interrupt (acquire.c), `exec` (exec.c, with the descriptors its children keep in
 * fds.c, its guard process in guard.c and --status-file in status_file.c) and `hold`,
 * `inspect`, `observe`, `break`, `request-release`, `prepare` (commands.c). Public ABI only:
 * this is a user's program of libdlock. */
#ifndef DLOCK_CLI_CLI_H_
#define DLOCK_CLI_CLI_H_

#include <dlock/dlock.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* For a call whose failure leaves nothing to do (its result is wanted: warn_unused_result).
 * Async-signal-safe. */
static inline void ignore_result(long result) { (void)result; }

/* CLOCK_MONOTONIC in ms. Async-signal-safe (the guard uses it too). */
static inline int64_t monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Exit codes: sysexits.h's where one fits (docs/cli.md, "Exit codes"). CMD's own status otherwise,
 * 128+N when CMD died of signal N. */
enum {
  EXIT_USAGE = 64,        /* EX_USAGE: bad command line, URL, lock name or option value */
  EXIT_BACKEND = 69,      /* EX_UNAVAILABLE: backend unreachable, refused credentials, errors */
  EXIT_LOST = 70,         /* the lock was lost (or about to be) while CMD ran or was held */
  EXIT_OSERR = 71,        /* EX_OSERR: fork, pipe or memory failed here */
  EXIT_NOT_ACQUIRED = 75, /* EX_TEMPFAIL: not acquired within --wait */
  EXIT_NOT_CONFIRMED = 1, /* break: the operator did not confirm; nothing was done */
  EXIT_NOBODY_HOLDS = 1,  /* request-release: nobody holds the name; nobody was asked */
  EXIT_CANNOT_EXECUTE = 126,
  EXIT_NOT_FOUND = 127
};

typedef enum { ON_LOST_TERM, ON_LOST_KILL, ON_LOST_IGNORE } on_lost_action;
typedef enum { QUIET = 0, NORMAL = 1, VERBOSE = 2 } verbosity;

/* What the command line said, with its defaults filled in. */
typedef struct cli_options {
  const char *url;       /* --url, --url-file, else DLOCK_URL, DLOCK_URL_FILE, else redis://127.0.0.1:6379 */
  char *url_copy;        /* --url's value, copied before it is hidden in argv; or the file's */
  const char *url_file;  /* --url-file PATH */
  bool url_given;        /* --url */
  int64_t lease_ms;      /* --lease, default 10 s; 0 = no expiry */
  int64_t wait_ms;       /* --wait, default -1 = no limit (hold, exec); 0 = one try */
  int64_t kill_grace_ms; /* --kill-grace, default a quarter of the lease */
  bool wait_given, kill_grace_given;
  bool shared;       /* --shared */
  uint32_t permits;  /* --permits N, 0 = off */
  uint32_t take;     /* --take K: permits one acquire takes at once; 0 = not given (1) */
  const char *owner; /* --owner, default "HOST:PID" */
  const char *value; /* --value: stored with the hold, shown by inspect; NULL = none */
  const char *command; /* the command running (exec, elect), for its messages */
  on_lost_action on_lost;
  int64_t max_hold_ms;      /* exec --max-hold: CMD is stopped once the lock was held this long,
                               and its renewals stop (dlock_options_set_max_hold_ms); 0 = none */
  int64_t min_hold_ms;      /* --min-hold: the name stays taken at least this long; 0 = none */
  int64_t lock_delay_ms;    /* --lock-delay: closed this long after an unclean end; 0 = none */
  int64_t stopped_grace_ms; /* exec --stopped-grace: how long a stopped CMD may keep the lock
                               without a terminal (default 10 s) */
  const char *status_file;  /* exec --status-file PATH: dlock's own outcome, one line */
  const char *metrics_textfile; /* exec --metrics-textfile PATH: the run's metrics, at the end */
  const char *reason;       /* break, request-release --reason R: told to the holders */
  int release_request_signal; /* exec, elect --on-release-request SIG: sent to CMD's group when
                                 someone asks the holder to let go; 0 = not listened for */
  bool yes, now;            /* break --yes (no confirmation), --now (free the name at once) */
  verbosity verbosity;
  bool json;
  bool help, version;
} cli_options;

/* One command's name, the options it takes (bits of CLI_OPT_*) and its entry point. words are
 * the non-option arguments (exec: NAME; cmd is what followed "--"). */
enum {
  CLI_OPT_URL = 1 << 0,
  CLI_OPT_LEASE = 1 << 1,
  CLI_OPT_WAIT = 1 << 2,
  CLI_OPT_KIND = 1 << 3, /* --shared, --permits, --take */
  CLI_OPT_OWNER = 1 << 4,
  CLI_OPT_ON_LOST = 1 << 5, /* --on-lost, --kill-grace */
  CLI_OPT_JSON = 1 << 6,
  CLI_OPT_VERBOSITY = 1 << 7, /* --quiet, --verbose */
  CLI_OPT_EXEC = 1 << 8,      /* exec's own: --stopped-grace, --status-file */
  CLI_OPT_BREAK = 1 << 9,     /* break's own: --yes, --now */
  CLI_OPT_RULES = 1 << 10,    /* job rules: --min-hold, --lock-delay */
  CLI_OPT_REASON = 1 << 11,   /* break, request-release: --reason */
  CLI_OPT_RELEASE_REQUEST = 1 << 12 /* exec, elect: --on-release-request */
};

/* args.c */
typedef enum {
  STOP_NEVER,      /* every word is collected; "--" makes the rest words (names may start with -) */
  STOP_AT_DASHES,  /* stops at "--" (exec: CMD follows) */
  STOP_AT_WORD     /* stops before the first word (the global options before a command) */
} parse_stop;
/* Parses argv[0..argc) into o, collecting non-option words into words (room for argc). Returns
 * the index where it stopped (argc when it read everything), or -1 after printing one line
 * naming what was wrong. `command` names the command in messages (NULL before one). */
int parse_options(const char *command, unsigned allowed, int argc, char **argv, parse_stop stop,
                  cli_options *o, char **words, int *nwords);
/* "250", "250ms", "2s", "1.5s", "3m"; a bare number is milliseconds. "-1" only when
 * allow_forever. Returns 0 and sets *ms; -1 when it is not a duration, -2 when it is longer
 * than the library accepts. */
int parse_duration(const char *text, bool allow_forever, int64_t *ms);
/* "TERM", "SIGTERM", "term", "15": a signal to send CMD. Returns the signal's number, or 0
 * when text names none (or a stop signal: a stopped CMD would keep the lock). */
int parse_signal(const char *text);
/* "SIGTERM" for 15, "signal 40" for a number without a name; a static buffer for the latter. */
const char *signal_name(int sig);
/* Fills in the defaults that depend on other options (the kill grace on the lease, the owner
 * label) and checks combinations. Returns 0, or -1 after printing what was wrong. */
int finish_options(const char *command, cli_options *o);
/* The defaults, before any option is read. */
void default_options(cli_options *o);
/* Frees what the options own: the URL's copy, wiped first (it may hold a password). */
void free_options(cli_options *o);
/* The URL from --url, --url-file, DLOCK_URL or DLOCK_URL_FILE (finish_options calls it). A
 * file's content is never printed. Returns 0, or -1 after saying what was wrong. */
int resolve_url(const char *command, cli_options *o);

/* output.c */
extern const char *g_program; /* "dlock" */
/* "dlock: ..." (or "dlock COMMAND: ...") on stderr, one line. */
void say_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, unless --quiet. */
void say_note(const cli_options *o, const char *command, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Only with --verbose. */
void say_verbose(const cli_options *o, const char *command, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The URL with its password replaced by "***"; a static buffer, cut at 511 bytes. */
const char *shown_url(const char *url);
/* s as a JSON string literal (quotes included) on f: invalid UTF-8 becomes U+FFFD. */
void json_string(FILE *f, const char *s);
/* text_string into memory the caller frees (NULL when out of memory). */
char *text_string_dup(const char *s, bool quote_always);
/* s for a human on one line: in quotes (always, or only when it is empty or holds a quote,
 * backslash, control byte or invalid UTF-8), with those bytes as \xNN. */
void text_string(FILE *f, const char *s, bool quote_always);
/* A value stored with a hold (dlock_info_value): a JSON member `,"value":"..."` when it is text
 * (UTF-8 without NUL), `,"value_base64":"..."` otherwise, nothing when empty; or for a human,
 * `, value '...'` or `, value of N bytes (binary)`. */
void json_value(FILE *f, const void *data, size_t len);
void text_value(FILE *f, const void *data, size_t len);
/* A library event (dlock_client_set_event_hook) as one JSON line on stderr: {"event", "name",
 * "attempts", "elapsed_ms", "fencing_token", "status", "detail", "unix_ms"}. Any thread. */
void print_event_json(const dlock_event *e, void *arg);
/* What one exec or elect run did, for --metrics-textfile (status_file.c). Times: monotonic ms,
 * 0 = never. Several names (exec a b -- CMD): one sample per name, each with its own token. */
typedef struct run_record {
  char **names;             /* the lock names as given (argv's); NULL before they are known */
  size_t nnames;
  int64_t started_ms, acquired_ms, ended_ms;
  uint64_t *fencing_tokens; /* nnames of them once all were acquired; else NULL (0 each) */
  char outcome[32];         /* the last --status-file word */
} run_record;
extern run_record g_run;
/* Writes o->metrics_textfile (if set) for g_run ending with exit code `code`. 0, or -1 after
 * saying why. */
int write_metrics_textfile(const cli_options *o, int code);
/* The exit code for a failed library call (not for DLOCK_NOT_ACQUIRED's 75 at acquire). */
int exit_code_for(dlock_status s);

/* acquire.c */
/* Signals the command catches: they are written to a self-pipe the command polls. */
int signals_install(void);
int signals_fd(void);
/* The next caught signal, 0 when none is pending. */
int signals_next(void);
/* Opens the client, making the failure message and exit code; 0 on success. */
int open_client(const cli_options *o, const char *command, dlock_client **out);
/* Installs the signal handlers, opens the client and a queue, and acquires name per o,
 * interruptibly: a TERM, INT, HUP or QUIT while waiting cancels the wait (exit 128+N). Loss
 * reports go to the queue under LOST_TAG. Returns 0 with *lock held, or the exit code after
 * saying why; the caller closes *client and frees *q either way. */
#define ACQUIRE_TAG 1
#define LOST_TAG 2
int take_lock(const cli_options *o, const char *command, const char *name, dlock_client **client,
              dlock_queue **q, dlock_lock **lock);
/* Queue tags: the kind in the low byte (ACQUIRE_TAG, LOST_TAG, RELEASE_REQUEST_TAG), the lock's
 * index among several names above it (0 for one name: the tags are the kinds themselves). */
#define LOCK_TAG(kind, index) ((uint64_t)(kind) | ((uint64_t)(index) << 8))
#define TAG_KIND(tag) ((tag) & 0xff)
#define TAG_INDEX(tag) ((size_t)((tag) >> 8))
/* take_lock for n names, all or none (exec a b -- CMD), as dlock_acquire_many takes them: one
 * at a time in one fixed order (bytewise), whatever order they are given in, so that {a, b} and
 * {b, a} never wait on each other; o->wait_ms bounds the whole call; what was taken is given
 * back when a later name cannot be, or when a stop signal cancels the wait. Each name's options
 * are o's, its loss and release requests queued under LOCK_TAG(kind, k). On 0, locks[k] holds
 * names[k] and *first_held_ms (may be NULL) is when the first of them was taken (monotonic ms:
 * --max-hold runs from there); otherwise every locks[k] is NULL. n == 1 is take_lock. The
 * names were checked already: none empty, too long or given twice. */
int take_locks(const cli_options *o, const char *command, const char *const *names, size_t n,
               dlock_client **client, dlock_queue **q, dlock_lock **locks, int64_t *first_held_ms);
/* "'a', 'b'": names for a message, in memory the caller frees; NULL when out of memory. */
char *quoted_names(const char *const *names, size_t n);
/* A signal that stops a waiting or holding dlock (TERM, INT, HUP, QUIT). */
bool is_stop_signal(int sig);
/* SIGTSTP to the self-pipe too (exec, once CMD runs: it is passed on to CMD's group), and
 * SIGTTOU ignored (dlock writes from the background while CMD has the terminal). */
int signals_catch_tstp(void);
/* The caught signals back to their defaults (a child, before exec). */
void signals_restore_defaults(void);
/* Pops what the queue holds; a LOST entry sets g_lost_reported and keeps its message (and
 * its lock's index), a RELEASE_REQUESTED entry counts in g_release_requests and keeps its
 * reason (and its lock's index). */
void drain_queue(dlock_queue *q);
extern bool g_lost_reported;
extern char g_lost_reason[512];
extern size_t g_lost_index; /* the index (TAG_INDEX) of the lock whose loss came first */
#define RELEASE_REQUEST_TAG 3
extern uint64_t g_release_requests;                     /* heard so far */
extern char g_release_reason[DLOCK_MAX_REASON_BYTES + 1]; /* the last one's reason, "" = none */
extern size_t g_release_index; /* the index of the lock the last one asked for */
/* Why lock was lost, "CAUSE: details" (dlock_lock_lost_cause), into buf; "" while it is held
 * and valid. Read it before the release, which frees the lock. */
void lost_cause_text(const dlock_lock *lock, char *buf, size_t len);
/* A release's DLOCK_NOT_HELD, with its cause: "refused: " and the release's message. */
const char *release_refusal(void);

/* fds.c */
/* Notes the descriptors dlock inherited (main calls it first): CMD gets those, and 0, 1 and 2,
 * and no other. */
void note_inherited_fds(void);
/* The descriptors a child keeps: those dlock inherited and extra, ascending, in memory the
 * caller frees; *n of them. NULL (and *n = 0) when out of memory. */
int *fds_to_keep(int extra, size_t *n);
/* Closes every descriptor above 2 but those in keep (ascending). Async-signal-safe: for a
 * child of the multithreaded dlock, between fork and execve. max_fd bounds the fallback loop
 * when close_range(2) is missing (Linux before 5.9). */
void close_fds_except(const int *keep, size_t n, unsigned max_fd);
/* The max_fd for close_fds_except: the RLIMIT_NOFILE soft limit, at most 2^20. */
unsigned fallback_max_fd(void);

/* guard.c: runs exec's guard in the child of fork() that leads CMD's group; never returns.
 * sock is the guard's end of its socketpair with dlock (pid dlock): dlock sends it int64_t
 * deadlines (CLOCK_MONOTONIC ms), and the guard sends back one byte ('s' or 'h', see
 * guard_fire) before it kills the group. deadline is the first one, or GUARD_NO_DEADLINE to act
 * only on dlock's death; max_fd is fallback_max_fd()'s. */
enum { GUARD_NO_DEADLINE = -1 };
_Noreturn void guard_main(int sock, pid_t dlock, int64_t deadline, int64_t kill_grace_ms,
                          unsigned max_fd);

/* status_file.c */
/* Replaces --status-file's content with one line (fmt, a newline added), atomically; nothing
 * without --status-file. Returns 0, or -1 after saying why (the exit code stays what it was). */
int write_status(const cli_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The status word for an exit code of dlock's own, before CMD ran. */
void write_failure_status(const cli_options *o, int code);

/* main.c: the usage of `command` (NULL: of dlock itself). */
void print_help(const char *command, FILE *f);

/* Commands. Each returns the process's exit code. */
int cmd_exec(cli_options *o, int argc, char **argv);
int cmd_elect(cli_options *o, int argc, char **argv);
int cmd_observe(cli_options *o, int argc, char **argv);
int cmd_hold(cli_options *o, int argc, char **argv);
int cmd_inspect(cli_options *o, int argc, char **argv);
int cmd_prepare(cli_options *o, int argc, char **argv);
int cmd_break(cli_options *o, int argc, char **argv);
int cmd_request_release(cli_options *o, int argc, char **argv);

#endif /* DLOCK_CLI_CLI_H_ */
