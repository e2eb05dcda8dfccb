/* The descriptors a child of dlock keeps. CMD gets 0, 1, 2 and those dlock inherited, nothing
 * dlock opened (the library's sockets and pipes); the guard keeps only its socket. main() notes
 * what was inherited before anything else opens a descriptor; the children close the rest
 * between fork and execve (or, for the guard, before its loop). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"

static int *g_inherited; /* descriptors above 2 open when main() started, ascending */
static size_t g_ninherited;

static int compare_ints(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void note_fd(int fd) {
  int *more = realloc(g_inherited, (g_ninherited + 1) * sizeof *more);
  if (!more) return;
  g_inherited = more;
  g_inherited[g_ninherited++] = fd;
}

void note_inherited_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    const int self = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      char *end = NULL;
      const long fd = strtol(e->d_name, &end, 10);
      if (e->d_name[0] != '.' && *end == '\0' && fd > 2 && fd != self && fd <= INT32_MAX) note_fd((int)fd);
    }
    closedir(d);
  } else {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fcntl(fd, F_GETFD) >= 0) note_fd(fd);
    }
  }
  if (g_ninherited) qsort(g_inherited, g_ninherited, sizeof *g_inherited, compare_ints);
}

int *fds_to_keep(int extra, size_t *n) {
  *n = 0;
  int *keep = malloc((g_ninherited + 1) * sizeof *keep);
  if (!keep) return NULL;
  for (size_t i = 0; i < g_ninherited; ++i) keep[(*n)++] = g_inherited[i];
  keep[(*n)++] = extra;
  qsort(keep, *n, sizeof *keep, compare_ints);
  return keep;
}

/* Async-signal-safe: for a child of the multithreaded dlock, between fork and execve. */
void close_fds_except(const int *keep, size_t n, unsigned max_fd) {
  unsigned first = 3;
  for (size_t i = 0; i <= n; ++i) {
    if (i < n && (keep[i] < 0 || (unsigned)keep[i] < first)) continue;
    const unsigned last = i < n ? (unsigned)keep[i] - 1 : ~0U;
    if (last >= first && syscall(SYS_close_range, first, last, 0U) != 0) {
      for (unsigned fd = first; fd <= last && fd <= max_fd; ++fd) close((int)fd);
    }
    if (i < n) first = (unsigned)keep[i] + 1;
  }
}

unsigned fallback_max_fd(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > (1u << 20)) {
    return 1u << 20;
  }
  return (unsigned)r.rlim_cur;
}
