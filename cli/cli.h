/* The dlock command's parts: options (args.c), messages and JSON (output.c), an acquire that a
 * signal can interrupt (acquire.c), `exec` (exec.c) and `hold`, `inspect`, `prepare`
 * (commands.c). Public ABI only: this is a user's program of libdlock. */
#ifndef DLOCK_CLI_CLI_H_
#define DLOCK_CLI_CLI_H_

#include <dlock/dlock.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: sysexits.h's where one fits (docs/cli.md, "Exit codes"). CMD's own status otherwise,
 * 128+N when CMD died of signal N. */
enum {
  EXIT_USAGE = 64,        /* EX_USAGE: bad command line, URL, lock name or option value */
  EXIT_BACKEND = 69,      /* EX_UNAVAILABLE: backend unreachable, refused credentials, errors */
  EXIT_LOST = 70,         /* the lock was lost (or about to be) while CMD ran or was held */
  EXIT_OSERR = 71,        /* EX_OSERR: fork, pipe or memory failed here */
  EXIT_NOT_ACQUIRED = 75, /* EX_TEMPFAIL: not acquired within --wait */
  EXIT_CANNOT_EXECUTE = 126,
  EXIT_NOT_FOUND = 127
};

typedef enum { ON_LOST_TERM, ON_LOST_KILL, ON_LOST_IGNORE } on_lost_action;
typedef enum { QUIET = 0, NORMAL = 1, VERBOSE = 2 } verbosity;

/* What the command line said, with its defaults filled in. */
typedef struct cli_options {
  const char *url;       /* --url, else DLOCK_URL, else redis://127.0.0.1:6379 */
  int64_t lease_ms;      /* --lease, default 10 s; 0 = no expiry */
  int64_t wait_ms;       /* --wait, default -1 = no limit (hold, exec); 0 = one try */
  int64_t kill_grace_ms; /* --kill-grace, default a quarter of the lease */
  bool wait_given, kill_grace_given;
  bool shared;       /* --shared */
  uint32_t permits;  /* --permits N, 0 = off */
  const char *owner; /* --owner, default "HOST:PID" */
  on_lost_action on_lost;
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
  CLI_OPT_KIND = 1 << 3, /* --shared, --permits */
  CLI_OPT_OWNER = 1 << 4,
  CLI_OPT_ON_LOST = 1 << 5, /* --on-lost, --kill-grace */
  CLI_OPT_JSON = 1 << 6,
  CLI_OPT_VERBOSITY = 1 << 7 /* --quiet, --verbose */
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
/* Fills in the defaults that depend on other options (the kill grace on the lease, the owner
 * label) and checks combinations. Returns 0, or -1 after printing what was wrong. */
int finish_options(const char *command, cli_options *o);
/* The defaults, before any option is read. */
void default_options(cli_options *o);

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
/* s for a human on one line: in quotes (always, or only when it is empty or holds a quote,
 * backslash, control byte or invalid UTF-8), with those bytes as \xNN. */
void text_string(FILE *f, const char *s, bool quote_always);
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
/* A signal that stops a waiting or holding dlock (TERM, INT, HUP, QUIT). */
bool is_stop_signal(int sig);
/* The caught signals back to their defaults (a child, before exec). */
void signals_restore_defaults(void);
/* Pops what the queue holds; a LOST entry sets g_lost_reported and keeps its message. */
void drain_queue(dlock_queue *q);
extern bool g_lost_reported;
extern char g_lost_reason[512];

/* main.c: the usage of `command` (NULL: of dlock itself). */
void print_help(const char *command, FILE *f);

/* Commands. Each returns the process's exit code. */
int cmd_exec(cli_options *o, int argc, char **argv);
int cmd_hold(cli_options *o, int argc, char **argv);
int cmd_inspect(cli_options *o, int argc, char **argv);
int cmd_prepare(cli_options *o, int argc, char **argv);

#endif /* DLOCK_CLI_CLI_H_ */
