/* Small helpers the C benchmarks share: a fatal error, a monotonic clock in seconds, a sleep that
 * survives signals, this process's resident memory, and the median of a sample. */
#ifndef DLOCK_BENCH_BENCH_UTIL_H_
#define DLOCK_BENCH_BENCH_UTIL_H_

#include <dlock/dlock.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* What die() prints first: the program's name, or its role (a program sets it in main). */
static const char *bench_who = "bench";

/* Prints "bench_who: message" and exits 1: a benchmark that cannot measure stops. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, unused));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", bench_who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static inline void check(dlock_status s, const char *what) {
  if (s != DLOCK_OK) die("%s: %s: %s", what, dlock_status_str(s), dlock_last_error());
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Resident set size of this process, in bytes; -1 when /proc/self/statm cannot be read. */
static inline long rss_bytes(void) {
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return -1;
  int read = fscanf(f, "%ld %ld", &size, &resident);
  fclose(f);
  return read == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v and returns its median. */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* CPU seconds of this process (every thread), user and system. */
static inline double own_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The q-quantile of sorted v (nearest rank). */
static inline double quantile(const double *sorted, int n, double q) {
  if (n == 0) return 0;
  int k = (int)(q * n + 0.999999) - 1;
  if (k < 0) k = 0;
  if (k >= n) k = n - 1;
  return sorted[k];
}

/* "a/b/c" of n figures, each with fmt. */
static inline void print_list(const char *key, const double *v, int n, const char *fmt) {
  printf("%s=", key);
  for (int i = 0; i < n; i++) {
    if (i > 0) putchar('/');
    printf(fmt, v[i]);
  }
  putchar('\n');
}

#endif /* DLOCK_BENCH_BENCH_UTIL_H_ */
