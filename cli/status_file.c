/* exec --status-file PATH: dlock's own outcome, one line, written atomically (a temporary file
 * renamed over PATH): "waiting" before the acquire, "acquired TOKEN" while CMD runs, then one of
 * "cmd-exited N", "cmd-signalled N", "lost", "stopped", "not-acquired", "interrupted N",
 * "not-found", "not-executable", "backend-error", "os-error", "usage". And exec
 * --metrics-textfile PATH: the run's metrics when it ends, in node_exporter's textfile format
 * (Prometheus text), written the same way: one sample per lock name (several names: each with its
 * own fencing token, the other values the run's). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

run_record g_run;

/* Written to PATH.tmp.PID, then renamed over PATH, so that a reader sees the old content or
 * the new. option names the option in messages. */
static int write_atomically(const char *path, const char *data, size_t len, const char *option) {
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
    say_error("exec", "cannot write %s %s: out of memory", option, path);
    return -1;
  }
  int error = 0;
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    error = errno;
  } else {
    if (write(fd, data, len) != (ssize_t)len) error = errno ? errno : EIO;
    if (close(fd) != 0 && !error) error = errno;
    if (!error && rename(tmp, path) != 0) error = errno;
    if (error) unlink(tmp);
  }
  free(tmp);
  if (error) {
    say_error("exec", "cannot write %s %s: %s", option, path, strerror(error));
    return -1;
  }
  return 0;
}

int write_status(const cli_options *o, const char *fmt, ...) {
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (len < 0) len = 0;
  if ((size_t)len > sizeof line - 2) len = (int)sizeof line - 2;
  /* The word, for --metrics-textfile's outcome. */
  snprintf(g_run.outcome, sizeof g_run.outcome, "%.*s", (int)strcspn(line, " "), line);
  if (!o->status_file) return 0;
  line[len++] = '\n';
  return write_atomically(o->status_file, line, (size_t)len, "--status-file");
}

/* s as a Prometheus label value: backslash, quote and newline escaped, bytes that are not
 * UTF-8 replaced (json_string's rule: its escapes are a subset of what we need). */
static void label_value(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    if (*p == '\\' || *p == '"') {
      fputc('\\', f);
      fputc(*p, f);
    } else if (*p == '\n') {
      fputs("\\n", f);
    } else if (*p < 0x20 || *p == 0x7f) {
      fputc('?', f);  /* a control byte has no place in a label */
    } else {
      fputc(*p, f);
    }
  }
}

/* Whether g_run.names[k] was given before (a usage error's duplicate: one series per name). */
static bool named_before(size_t k) {
  for (size_t e = 0; e < k; ++e) {
    if (strcmp(g_run.names[e], g_run.names[k]) == 0) return true;
  }
  return false;
}

/* One family: its HELP and TYPE, then a sample per lock name (value, or each[k] for the lock
 * at k when each is not NULL). */
static void metric(FILE *f, const char *name, const char *type, const char *help,
                   const char *extra_label, const char *extra_value, double value, const uint64_t *each) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  for (size_t k = 0; k < g_run.nnames; ++k) {
    if (named_before(k)) continue;
    fprintf(f, "%s{name=\"", name);
    label_value(f, g_run.names[k]);
    fputc('"', f);
    if (extra_label) {
      fprintf(f, ",%s=\"", extra_label);
      label_value(f, extra_value);
      fputc('"', f);
    }
    const double v = each ? (double)each[k] : value;
    /* Whole numbers (a fencing token: up to 2^53 - 1, exact) in full; times to the ms. */
    fprintf(f, v == (double)(int64_t)v ? "} %.0f\n" : "} %.3f\n", v);
  }
}

int write_metrics_textfile(const cli_options *o, int code) {
  if (!o->metrics_textfile || g_run.nnames == 0) return 0;
  const int64_t end = g_run.ended_ms ? g_run.ended_ms : monotonic_ms();
  const double waited = ((g_run.acquired_ms ? g_run.acquired_ms : end) - g_run.started_ms) / 1000.0;
  const double held = g_run.acquired_ms ? (end - g_run.acquired_ms) / 1000.0 : 0;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) {
    say_error("exec", "cannot write --metrics-textfile %s: out of memory", o->metrics_textfile);
    return -1;
  }
  /* Several names (exec a b -- CMD): a sample per name, the same values but each fencing token. */
  const bool success = strcmp(g_run.outcome, "cmd-exited") == 0 && code == 0;
  metric(f, "dlock_exec_success", "gauge", "1 when the last run took the lock, held it to the end and CMD exited 0.",
         NULL, NULL, success ? 1 : 0, NULL);
  metric(f, "dlock_exec_outcome", "gauge",
         "The last run's outcome, as --status-file words it (cmd-exited, lost, not-acquired, ...).",
         "outcome", g_run.outcome[0] ? g_run.outcome : "unknown", 1, NULL);
  metric(f, "dlock_exec_exit_code", "gauge", "dlock's exit status for the last run.", NULL, NULL, code, NULL);
  metric(f, "dlock_exec_wait_seconds", "gauge", "How long the last run waited for the lock.", NULL, NULL, waited,
         NULL);
  metric(f, "dlock_exec_hold_seconds", "gauge", "How long the last run held the lock (0 when it did not).",
         NULL, NULL, held, NULL);
  metric(f, "dlock_exec_fencing_token", "gauge", "The last run's fencing token (0 when it did not acquire).",
         NULL, NULL, 0, g_run.fencing_tokens);
  metric(f, "dlock_exec_end_timestamp_seconds", "gauge", "When the last run ended, in seconds since the epoch.",
         NULL, NULL, (double)now.tv_sec + now.tv_nsec / 1e9, NULL);
  if (fclose(f) != 0 || text == NULL) {
    free(text);
    say_error("exec", "cannot write --metrics-textfile %s: out of memory", o->metrics_textfile);
    return -1;
  }
  const int r = write_atomically(o->metrics_textfile, text, len, "--metrics-textfile");
  free(text);
  return r;
}

void write_failure_status(const cli_options *o, int code) {
  switch (code) {
    case EXIT_USAGE: write_status(o, "usage"); break;
    case EXIT_BACKEND: write_status(o, "backend-error"); break;
    case EXIT_LOST: write_status(o, "lost"); break;
    case EXIT_NOT_ACQUIRED: write_status(o, "not-acquired"); break;
    case EXIT_CANNOT_EXECUTE: write_status(o, "not-executable"); break;
    case EXIT_NOT_FOUND: write_status(o, "not-found"); break;
    default:
      if (code > 128) write_status(o, "interrupted %d", code - 128);
      else write_status(o, "os-error");
  }
}
