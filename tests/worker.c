/* A separate process for the multi-process tests of every backend, using only the public C ABI.
 *   worker URL NAME hold LEASE_MS [OWNER [KIND]]
 *                                          acquire (labelled OWNER; KIND "shared", "permits=N"
 *                                          or "exclusive"), print "ACQUIRED <token>", then hold
 *                                          it (heartbeats renew it) until killed
 *   worker URL NAME permits N ROUNDS FILE  ROUNDS times: take one of N permits (wait forever),
 *                                          count itself in as a current holder in FILE (under
 *                                          flock: "<current> <most ever>"), hold 2 ms, count
 *                                          itself out, release
 *   worker URL NAME increment N FILE       N times: acquire (wait forever), append "<token>" to
 *                                          FILE and add one to the counter in FILE.count, release
 *   worker URL NAME fenced N FILE [SECS]   until N increments were accepted (and SECS seconds
 *                                          passed, when given): acquire, add one to
 *                                          the counter in FILE as a fenced resource would (under
 *                                          flock, refused unless the token is above the last
 *                                          one it accepted), release. Rides out a failover:
 *                                          failed calls are counted and retried for up to 60 s.
 *                                          Prints "DONE accepted=A refused=R errors=E lost=L"
 *                                          (L: releases answered DLOCK_NOT_HELD: a loss reported).
 * Exit status 0 on success; errors go to stderr. */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>
#include <inttypes.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what, dlock_status s) {
  fprintf(stderr, "worker: %s: %s: %s\n", what, dlock_status_str(s), dlock_last_error());
  return 1;
}

static long read_count(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = 0;
    fclose(f);
  }
  return v;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The resource: "<count> <last token>" in FILE, changed under flock; a write from a token not
 * above the last accepted one is refused, as a fenced storage system would. 1 when accepted. */
static int fenced_increment(const char *path, uint64_t token) {
  FILE *f = fopen(path, "a+");
  if (!f) return 0;
  flock(fileno(f), LOCK_EX);
  long count = 0;
  uint64_t last = 0;
  rewind(f);
  if (fscanf(f, "%ld %" SCNu64, &count, &last) != 2) count = 0, last = 0;
  int accepted = token > last;
  if (accepted) {
    if (ftruncate(fileno(f), 0) != 0) accepted = 0;
    fprintf(f, "%ld %" PRIu64 "\n", count + 1, token);
    fflush(f);
  }
  flock(fileno(f), LOCK_UN);
  fclose(f);
  return accepted;
}

static int fenced(dlock_client *c, dlock_options *o, const char *name, long n, const char *path,
                  double min_seconds) {
  long accepted = 0, refused = 0, errors = 0, lost = 0;
  dlock_options_set_wait_ms(o, 2000);
  dlock_options_set_lease_ms(o, 3000);
  dlock_options_set_retry_ms(o, 5, 50);
  const double min_end = now_s() + min_seconds, give_up = now_s() + 60 + min_seconds;
  while (accepted < n || now_s() < min_end) {
    if (now_s() > give_up) {
      fprintf(stderr, "worker: gave up after 60 s: accepted=%ld errors=%ld, last: %s\n", accepted,
              errors, dlock_last_error());
      return 1;
    }
    dlock_lock *l;
    dlock_status s = dlock_acquire(c, name, o, &l);
    if (s == DLOCK_NOT_ACQUIRED) continue;
    if (s != DLOCK_OK) {
      ++errors;
      struct timespec pause_ms = {0, 50000000};
      nanosleep(&pause_ms, NULL);
      continue;
    }
    if (fenced_increment(path, dlock_lock_fencing_token(l))) {
      ++accepted;
    } else {
      ++refused;
    }
    s = dlock_release(l);
    if (s == DLOCK_NOT_HELD) ++lost;
    else if (s != DLOCK_OK) ++errors;
  }
  printf("DONE accepted=%ld refused=%ld errors=%ld lost=%ld\n", accepted, refused, errors, lost);
  return 0;
}

/* Adds delta to the current holders in FILE ("<current> <most ever>", under flock); returns the
 * new current count. */
static long count_holders(const char *path, long delta) {
  FILE *f = fopen(path, "a+");
  if (!f) return -1;
  flock(fileno(f), LOCK_EX);
  long current = 0, most = 0;
  rewind(f);
  if (fscanf(f, "%ld %ld", &current, &most) != 2) current = 0, most = 0;
  current += delta;
  if (current > most) most = current;
  if (ftruncate(fileno(f), 0) == 0) {
    fprintf(f, "%ld %ld\n", current, most);
    fflush(f);
  }
  flock(fileno(f), LOCK_UN);
  fclose(f);
  return current;
}

static int semaphore_rounds(dlock_client *c, dlock_options *o, const char *name, long permits,
                            long rounds, const char *path) {
  dlock_status s;
  if ((s = dlock_options_set_permits(o, (uint32_t)permits)) != DLOCK_OK) return fail("permits", s);
  dlock_options_set_wait_ms(o, -1);
  dlock_options_set_lease_ms(o, 5000);
  dlock_options_set_retry_ms(o, 5, 50); /* backends without release notices poll */
  for (long i = 0; i < rounds; i++) {
    dlock_lock *l;
    s = dlock_acquire(c, name, o, &l);
    if (s != DLOCK_OK) return fail("acquire", s);
    count_holders(path, +1);
    struct timespec pause_ms = {0, 2000000};
    nanosleep(&pause_ms, NULL);
    count_holders(path, -1);
    s = dlock_release(l);
    if (s != DLOCK_OK) return fail("release", s);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: worker URL NAME hold LEASE_MS [OWNER [KIND]] | increment N FILE | fenced N FILE [SECS]"
                    " | permits N ROUNDS FILE\n");
    return 2;
  }
  dlock_client *c;
  dlock_status s = dlock_client_open(argv[1], &c);
  if (s != DLOCK_OK) return fail("open", s);
  dlock_options *o = dlock_options_new();
  if (strcmp(argv[3], "hold") == 0) {
    dlock_options_set_lease_ms(o, strtoull(argv[4], NULL, 10));
    if (argc >= 6 && (s = dlock_options_set_owner(o, argv[5])) != DLOCK_OK) return fail("owner", s);
    if (argc >= 7 && strcmp(argv[6], "shared") == 0) s = dlock_options_set_kind(o, DLOCK_SHARED);
    if (argc >= 7 && strncmp(argv[6], "permits=", 8) == 0) {
      s = dlock_options_set_permits(o, (uint32_t)strtoul(argv[6] + 8, NULL, 10));
    }
    if (s != DLOCK_OK) return fail("kind", s);
    dlock_lock *l;
    s = dlock_acquire(c, argv[2], o, &l);
    if (s != DLOCK_OK) return fail("acquire", s);
    printf("ACQUIRED %" PRIu64 "\n", dlock_lock_fencing_token(l));
    fflush(stdout);
    for (;;) pause();
  }
  if (strcmp(argv[3], "increment") == 0 && argc >= 6) {
    long n = strtol(argv[4], NULL, 10);
    char count_path[4096];
    snprintf(count_path, sizeof count_path, "%s.count", argv[5]);
    dlock_options_set_wait_ms(o, -1);
    dlock_options_set_lease_ms(o, 5000);
    dlock_options_set_retry_ms(o, 5, 50);  /* backends without release notices poll */
    for (long i = 0; i < n; i++) {
      dlock_lock *l;
      s = dlock_acquire(c, argv[2], o, &l);
      if (s != DLOCK_OK) return fail("acquire", s);
      long v = read_count(count_path);  /* a read-modify-write that loses updates without the lock */
      FILE *log = fopen(argv[5], "a");
      fprintf(log, "%" PRIu64 "\n", dlock_lock_fencing_token(l));
      fclose(log);
      struct timespec pause_ms = {0, 1000000};  /* widen the window an unlocked writer would lose */
      nanosleep(&pause_ms, NULL);
      FILE *f = fopen(count_path, "w");
      fprintf(f, "%ld\n", v + 1);
      fclose(f);
      s = dlock_release(l);
      if (s != DLOCK_OK) return fail("release", s);
    }
    dlock_options_free(o);
    dlock_client_close(c);
    return 0;
  }
  if (strcmp(argv[3], "permits") == 0 && argc >= 7) {
    int code = semaphore_rounds(c, o, argv[2], strtol(argv[4], NULL, 10), strtol(argv[5], NULL, 10),
                                argv[6]);
    dlock_options_free(o);
    dlock_client_close(c);
    return code;
  }
  if (strcmp(argv[3], "fenced") == 0 && argc >= 6) {
    printf("OPEN\n");  /* a test may wait for every worker to be connected before a fault */
    fflush(stdout);
    int code = fenced(c, o, argv[2], strtol(argv[4], NULL, 10), argv[5],
                      argc >= 7 ? strtod(argv[6], NULL) : 0);
    dlock_options_free(o);
    dlock_client_close(c);
    return code;
  }
  fprintf(stderr, "worker: unknown mode %s\n", argv[3]);
  return 2;
}
