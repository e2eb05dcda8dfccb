/* exec --status-file PATH: dlock's own outcome, one line, written atomically (a temporary file
 * renamed over PATH): "waiting" before the acquire, "acquired TOKEN" while CMD runs, then one of
 * "cmd-exited N", "cmd-signalled N", "lost", "stopped", "not-acquired", "interrupted N",
 * "not-found", "not-executable", "backend-error", "os-error", "usage". */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Written to PATH.tmp.PID, then renamed over PATH, so that a reader sees the old line or the
 * new one. */
int write_status(const cli_options *o, const char *fmt, ...) {
  if (!o->status_file) return 0;
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (len < 0) len = 0;
  if ((size_t)len > sizeof line - 2) len = (int)sizeof line - 2;
  line[len++] = '\n';
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", o->status_file, (long)getpid()) < 0) {
    say_error("exec", "cannot write --status-file %s: out of memory", o->status_file);
    return -1;
  }
  int error = 0;
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    error = errno;
  } else {
    if (write(fd, line, (size_t)len) != len) error = errno ? errno : EIO;
    if (close(fd) != 0 && !error) error = errno;
    if (!error && rename(tmp, o->status_file) != 0) error = errno;
    if (error) unlink(tmp);
  }
  free(tmp);
  if (error) {
    say_error("exec", "cannot write --status-file %s: %s", o->status_file, strerror(error));
    return -1;
  }
  return 0;
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
