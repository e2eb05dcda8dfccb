/* The command line: options in GNU long form (--lease 10s or --lease=10s), durations, and the
 * defaults that follow from other options. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct option_spec {
  const char *name;
  char short_name; /* 0 = none */
  unsigned group;  /* CLI_OPT_*; 0 = every command takes it */
  bool takes_value;
} option_spec;

static const option_spec kOptions[] = {
    {"url", 0, CLI_OPT_URL, true},
    {"url-file", 0, CLI_OPT_URL, true},
    {"lease", 0, CLI_OPT_LEASE, true},
    {"wait", 0, CLI_OPT_WAIT, true},
    {"shared", 0, CLI_OPT_KIND, false},
    {"permits", 0, CLI_OPT_KIND, true},
    {"take", 0, CLI_OPT_KIND, true},
    {"owner", 0, CLI_OPT_OWNER, true},
    {"value", 0, CLI_OPT_OWNER, true},
    {"on-lost", 0, CLI_OPT_ON_LOST, true},
    {"kill-grace", 0, CLI_OPT_ON_LOST, true},
    {"stopped-grace", 0, CLI_OPT_EXEC, true},
    {"max-hold", 0, CLI_OPT_EXEC, true},
    {"min-hold", 0, CLI_OPT_RULES, true},
    {"lock-delay", 0, CLI_OPT_RULES, true},
    {"status-file", 0, CLI_OPT_EXEC, true},
    {"metrics-textfile", 0, CLI_OPT_EXEC, true},
    {"on-release-request", 0, CLI_OPT_RELEASE_REQUEST, true},
    {"reason", 0, CLI_OPT_REASON, true},
    {"yes", 'y', CLI_OPT_BREAK, false},
    {"now", 0, CLI_OPT_BREAK, false},
    {"json", 0, CLI_OPT_JSON, false},
    {"quiet", 'q', CLI_OPT_VERBOSITY, false},
    {"verbose", 'v', CLI_OPT_VERBOSITY, false},
    {"help", 'h', 0, false},
    {"version", 0, 0, false},
};

void default_options(cli_options *o) {
  memset(o, 0, sizeof *o);
  o->url = "redis://127.0.0.1:6379"; /* resolve_url: --url, --url-file, DLOCK_URL... */
  o->lease_ms = 10000;
  o->stopped_grace_ms = 10000;
  o->wait_ms = -1;
  o->on_lost = ON_LOST_TERM;
  o->verbosity = NORMAL;
}

/* A copy of a URL goes wiped: it may hold a password. */
static void free_url_copy(cli_options *o) {
  if (o->url_copy) explicit_bzero(o->url_copy, strlen(o->url_copy));
  free(o->url_copy);
  o->url_copy = NULL;
}

void free_options(cli_options *o) {
  free_url_copy(o);
  o->url = NULL;
}

int parse_duration(const char *text, bool allow_forever, int64_t *ms) {
  if (allow_forever && strcmp(text, "-1") == 0) {
    *ms = -1;
    return 0;
  }
  const char *p = text;
  uint64_t whole = 0;
  int digits = 0;
  for (; isdigit((unsigned char)*p); ++p, ++digits) {
    if (whole > UINT64_C(1000000000000)) return -2; /* far beyond any lease: stop before overflow */
    whole = whole * 10 + (uint64_t)(*p - '0');
  }
  if (digits == 0) return -1;
  uint64_t frac = 0, scale = 1;
  if (*p == '.') {
    ++p;
    int frac_digits = 0;
    for (; isdigit((unsigned char)*p); ++p, ++frac_digits) {
      if (frac_digits < 6) { /* microseconds of a minute are plenty */
        frac = frac * 10 + (uint64_t)(*p - '0');
        scale *= 10;
      }
    }
    if (frac_digits == 0) return -1;
  }
  uint64_t unit;
  if (*p == '\0' || strcmp(p, "ms") == 0) {
    if (scale != 1) return -1; /* fractions of a millisecond */
    unit = 1;
  } else if (strcmp(p, "s") == 0) {
    unit = 1000;
  } else if (strcmp(p, "m") == 0) {
    unit = 60000;
  } else {
    return -1;
  }
  const uint64_t limit = dlock_limit_value(DLOCK_LIMIT_LEASE_MS);
  if (whole > limit / unit) return -2;
  const uint64_t value = whole * unit + (frac * unit + scale / 2) / scale;
  if (value > limit) return -2;
  *ms = (int64_t)value;
  return 0;
}

/* The signals by name (Linux's), for --on-release-request and the messages about them. */
static const struct {
  const char *name;
  int number;
} kSignals[] = {
    {"HUP", SIGHUP},     {"INT", SIGINT},       {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},     {"IOT", SIGIOT},     {"BUS", SIGBUS},
    {"FPE", SIGFPE},     {"KILL", SIGKILL},     {"USR1", SIGUSR1},   {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
    {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD},   {"CONT", SIGCONT},   {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},   {"URG", SIGURG},
    {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
    {"WINCH", SIGWINCH}, {"IO", SIGIO},         {"POLL", SIGPOLL},   {"PWR", SIGPWR},
    {"SYS", SIGSYS},
};

static bool is_stopping(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

int parse_signal(const char *text) {
  int sig = 0;
  if (isdigit((unsigned char)text[0])) {
    char *end = NULL;
    errno = 0;
    const unsigned long v = strtoul(text, &end, 10);
    if (errno == 0 && *end == '\0' && v >= 1 && v <= (unsigned long)SIGRTMAX) sig = (int)v;
  } else {
    const char *name = strncasecmp(text, "SIG", 3) == 0 ? text + 3 : text;
    for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) {
      if (strcasecmp(name, kSignals[i].name) == 0) sig = kSignals[i].number;
    }
  }
  return is_stopping(sig) ? 0 : sig;
}

const char *signal_name(int sig) {
  static char text[32];
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) {
    if (kSignals[i].number == sig) {
      snprintf(text, sizeof text, "SIG%s", kSignals[i].name);
      return text;
    }
  }
  snprintf(text, sizeof text, "signal %d", sig);
  return text;
}

static const option_spec *find_option(const char *name, size_t len, char short_name) {
  for (size_t i = 0; i < sizeof kOptions / sizeof kOptions[0]; ++i) {
    const option_spec *s = &kOptions[i];
    if (short_name ? s->short_name == short_name
                   : strlen(s->name) == len && strncmp(s->name, name, len) == 0) {
      return s;
    }
  }
  return NULL;
}

static int bad_duration(const char *command, const char *option, const char *value, int why) {
  if (why == -2) {
    say_error(command, "--%s %s is longer than the longest lease dlock accepts (%" PRIu64 " ms)",
              option, value, dlock_limit_value(DLOCK_LIMIT_LEASE_MS));
  } else {
    say_error(command,
              "--%s '%s' is not a duration: a number with ms, s or m (a bare number is "
              "milliseconds), e.g. 30s%s",
              option, value, strcmp(option, "wait") == 0 ? ", or -1 for no limit" : "");
  }
  return -1;
}

/* --url's value in argv, which /proc/PID/cmdline shows to every user of the machine while
 * CMD runs: overwritten in place with what dlock's messages show of it (the password as
 * "***"), or with '*' when that is longer. The caller keeps a copy. */
static void hide_url_argument(char *value) {
  const size_t len = strlen(value);
  const char *shown = shown_url(value);
  const size_t n = strlen(shown);
  if (n > 0 && n <= len) {
    memmove(value, shown, n);
    memset(value + n, '\0', len - n);
  } else {
    memset(value, '*', len);
  }
}

/* Applies one option's value to o; -1 after saying what was wrong. */
static int apply(const char *command, const option_spec *s, const char *value, cli_options *o) {
  const char *n = s->name;
  int why;
  if (strcmp(n, "url") == 0) {
    char *copy = strdup(value);
    if (!copy) {
      say_error(command, "out of memory");
      return -1;
    }
    free_url_copy(o);
    o->url = o->url_copy = copy;
    o->url_given = true;
    hide_url_argument((char *)value); /* argv's own memory, writable */
  } else if (strcmp(n, "url-file") == 0) {
    o->url_file = value;
  } else if (strcmp(n, "stopped-grace") == 0) {
    if ((why = parse_duration(value, false, &o->stopped_grace_ms)) != 0) {
      return bad_duration(command, n, value, why);
    }
  } else if (strcmp(n, "max-hold") == 0) {
    if ((why = parse_duration(value, false, &o->max_hold_ms)) != 0) return bad_duration(command, n, value, why);
    if (o->max_hold_ms == 0) {
      say_error(command, "--max-hold must be longer than 0 (leave it out for no maximum)");
      return -1;
    }
  } else if (strcmp(n, "min-hold") == 0) {
    if ((why = parse_duration(value, false, &o->min_hold_ms)) != 0) return bad_duration(command, n, value, why);
  } else if (strcmp(n, "lock-delay") == 0) {
    if ((why = parse_duration(value, false, &o->lock_delay_ms)) != 0) return bad_duration(command, n, value, why);
    if (o->lock_delay_ms > DLOCK_MAX_LOCK_DELAY_MS) {
      say_error(command, "--lock-delay %s is above its cap of 60s", value);
      return -1;
    }
  } else if (strcmp(n, "status-file") == 0) {
    if (!*value) {
      say_error(command, "--status-file needs a path");
      return -1;
    }
    o->status_file = value;
  } else if (strcmp(n, "metrics-textfile") == 0) {
    if (!*value) {
      say_error(command, "--metrics-textfile needs a path");
      return -1;
    }
    o->metrics_textfile = value;
  } else if (strcmp(n, "lease") == 0) {
    if ((why = parse_duration(value, false, &o->lease_ms)) != 0) return bad_duration(command, n, value, why);
  } else if (strcmp(n, "wait") == 0) {
    if ((why = parse_duration(value, true, &o->wait_ms)) != 0) return bad_duration(command, n, value, why);
    o->wait_given = true;
  } else if (strcmp(n, "kill-grace") == 0) {
    if ((why = parse_duration(value, false, &o->kill_grace_ms)) != 0) {
      return bad_duration(command, n, value, why);
    }
    o->kill_grace_given = true;
  } else if (strcmp(n, "shared") == 0) {
    o->shared = true;
  } else if (strcmp(n, "permits") == 0) {
    char *end = NULL;
    unsigned long long v = isdigit((unsigned char)value[0]) ? strtoull(value, &end, 10) : 0;
    if (!end || *end || v == 0 || v > UINT32_MAX) {
      say_error(command, "--permits '%s' is not a number of permits (1 to %u)", value, UINT32_MAX);
      return -1;
    }
    o->permits = (uint32_t)v;
  } else if (strcmp(n, "take") == 0) {
    char *end = NULL;
    unsigned long long v = isdigit((unsigned char)value[0]) ? strtoull(value, &end, 10) : 0;
    if (!end || *end || v == 0 || v > UINT32_MAX) {
      say_error(command, "--take '%s' is not a number of permits to take (1 to %u)", value, UINT32_MAX);
      return -1;
    }
    o->take = (uint32_t)v;
  } else if (strcmp(n, "owner") == 0) {
    o->owner = value;
  } else if (strcmp(n, "value") == 0) {
    if (strlen(value) > DLOCK_MAX_VALUE_BYTES) {
      say_error(command, "--value is %zu bytes, longer than %d", strlen(value), DLOCK_MAX_VALUE_BYTES);
      return -1;
    }
    o->value = value;
  } else if (strcmp(n, "on-lost") == 0) {
    if (strcmp(value, "term") == 0) o->on_lost = ON_LOST_TERM;
    else if (strcmp(value, "kill") == 0) o->on_lost = ON_LOST_KILL;
    else if (strcmp(value, "ignore") == 0) o->on_lost = ON_LOST_IGNORE;
    else {
      say_error(command, "--on-lost '%s' is not one of term, kill, ignore", value);
      return -1;
    }
  } else if (strcmp(n, "on-release-request") == 0) {
    o->release_request_signal = parse_signal(value);
    if (o->release_request_signal == 0) {
      say_error(command,
                "--on-release-request '%s' is not a signal to send CMD: a name (TERM, HUP, "
                "USR1, SIGTERM, ...) or a number from 1 to %d; not STOP, TSTP, TTIN or TTOU "
                "(a stopped CMD keeps the lock)",
                value, SIGRTMAX);
      return -1;
    }
  } else if (strcmp(n, "reason") == 0) {
    if (strlen(value) > DLOCK_MAX_REASON_BYTES) {
      say_error(command, "--reason is %zu bytes, longer than %d", strlen(value), DLOCK_MAX_REASON_BYTES);
      return -1;
    }
    o->reason = value;
  } else if (strcmp(n, "yes") == 0) {
    o->yes = true;
  } else if (strcmp(n, "now") == 0) {
    o->now = true;
  } else if (strcmp(n, "json") == 0) {
    o->json = true;
  } else if (strcmp(n, "quiet") == 0) {
    o->verbosity = QUIET;
  } else if (strcmp(n, "verbose") == 0) {
    o->verbosity = VERBOSE;
  } else if (strcmp(n, "help") == 0) {
    o->help = true;
  } else if (strcmp(n, "version") == 0) {
    o->version = true;
  }
  return 0;
}

int parse_options(const char *command, unsigned allowed, int argc, char **argv, parse_stop stop,
                  cli_options *o, char **words, int *nwords) {
  *nwords = 0;
  for (int i = 0; i < argc; ++i) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      if (stop == STOP_AT_DASHES || stop == STOP_AT_WORD) return i;
      while (++i < argc) words[(*nwords)++] = argv[i];
      return argc;
    }
    if (arg[0] != '-' || arg[1] == '\0') { /* a word; "-" alone is one too */
      if (stop == STOP_AT_WORD) return i;
      words[(*nwords)++] = argv[i];
      continue;
    }
    const option_spec *s;
    const char *value = NULL;
    if (arg[1] == '-') {
      const char *name = arg + 2;
      const char *eq = strchr(name, '=');
      s = find_option(name, eq ? (size_t)(eq - name) : strlen(name), 0);
      if (eq) value = eq + 1;
    } else {
      s = arg[2] == '\0' ? find_option(NULL, 0, arg[1]) : NULL;
    }
    const bool before_command_only = s && strcmp(s->name, "version") == 0;
    if (!s || (s->group && !(s->group & allowed)) || (before_command_only && command)) {
      if (command) {
        say_error(command, "unknown option '%s' (dlock %s --help lists them)", arg, command);
      } else {
        say_error(NULL, "unknown option '%s' before the command (dlock --help lists them)", arg);
      }
      return -1;
    }
    if (s->takes_value && !value) {
      if (i + 1 >= argc) {
        say_error(command, "--%s needs a value", s->name);
        return -1;
      }
      value = argv[++i];
    } else if (!s->takes_value && value) {
      say_error(command, "--%s takes no value", s->name);
      return -1;
    }
    if (apply(command, s, value, o) != 0) return -1;
  }
  return argc;
}

/* Reads the URL from path (named by `what` in messages): one line, its trailing newline (and
 * any trailing white space) trimmed. Its content never appears in a message. */
static int read_url_file(const char *command, const char *what, const char *path, cli_options *o) {
  enum { kMax = 64 * 1024 };
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  char *buf = fd < 0 ? NULL : malloc(kMax + 1);
  size_t len = 0;
  int error = fd < 0 ? errno : buf ? 0 : ENOMEM;
  while (!error && len <= kMax) {
    const ssize_t got = read(fd, buf + len, kMax + 1 - len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) error = errno;
    if (got <= 0) break;
    len += (size_t)got;
  }
  if (fd >= 0) close(fd);
  const char *problem = NULL;
  if (error) {
    say_error(command, "cannot read %s %s: %s", what, path, strerror(error));
  } else if (len > kMax) {
    problem = "is larger than 64 KiB";
  } else {
    while (len > 0 && strchr(" \t\r\n", buf[len - 1])) --len;
    buf[len] = '\0';
    if (len == 0) problem = "is empty";
    else if (memchr(buf, '\n', len)) problem = "holds more than one line (one URL expected)";
    else if (strlen(buf) != len) problem = "holds a NUL byte";
  }
  if (error || problem) {
    if (problem) say_error(command, "%s %s %s", what, path, problem);
    if (buf) explicit_bzero(buf, kMax + 1);
    free(buf);
    return -1;
  }
  free_url_copy(o);
  o->url = o->url_copy = buf;
  return 0;
}

int resolve_url(const char *command, cli_options *o) {
  if (o->url_given && o->url_file) {
    say_error(command, "--url and --url-file cannot be combined");
    return -1;
  }
  if (o->url_file) return read_url_file(command, "--url-file", o->url_file, o);
  if (o->url_given) return 0;
  const char *env_url = getenv("DLOCK_URL"), *env_file = getenv("DLOCK_URL_FILE");
  const bool has_url = env_url && *env_url, has_file = env_file && *env_file;
  if (has_url && has_file) {
    say_error(command, "DLOCK_URL and DLOCK_URL_FILE are both set: unset one, or give --url or --url-file");
    return -1;
  }
  if (has_url) o->url = env_url;
  if (has_file) return read_url_file(command, "DLOCK_URL_FILE", env_file, o);
  return 0;
}

int finish_options(const char *command, cli_options *o) {
  if (resolve_url(command, o) != 0) return -1;
  if (o->shared && o->permits) {
    say_error(command, "--shared and --permits cannot be combined: a semaphore's holds are "
                       "counted, not shared");
    return -1;
  }
  if (o->take && !o->permits) {
    say_error(command, "--take needs --permits: it takes K of a semaphore's N permits at once");
    return -1;
  }
  if (o->take > o->permits) {
    say_error(command, "--take %" PRIu32 " is more than --permits %" PRIu32 ": it could never be granted",
              o->take, o->permits);
    return -1;
  }
  if (o->kill_grace_given) {
    if (o->lease_ms > 0 && o->kill_grace_ms >= o->lease_ms) {
      say_error(command, "--kill-grace (%" PRId64 " ms) must be shorter than --lease (%" PRId64 " ms)",
                o->kill_grace_ms, o->lease_ms);
      return -1;
    }
  } else {
    o->kill_grace_ms = o->lease_ms / 4;
  }
  if (o->min_hold_ms > 0 && o->max_hold_ms > 0 && o->min_hold_ms > o->max_hold_ms) {
    say_error(command, "--min-hold (%" PRId64 " ms) is longer than --max-hold (%" PRId64 " ms)",
              o->min_hold_ms, o->max_hold_ms);
    return -1;
  }
  if (o->max_hold_ms > 0 && o->lease_ms == 0) {
    say_error(command, "--max-hold needs a lease: with --lease 0 the lock never expires, so nothing would end it");
    return -1;
  }
  if (!o->owner) {
    /* A label an operator can trace back with `dlock inspect`: this host and process. */
    static char label[320];
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown-host");
    snprintf(label, sizeof label, "%s:%ld", host, (long)getpid());
    o->owner = label;
  }
  return 0;
}
