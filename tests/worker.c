/* A separate process for the multi-process tests of every backend, using only the public C ABI.
 *   worker URL NAME hold LEASE_MS [OWNER [KIND]]
 *                                          acquire (labelled OWNER; KIND "shared", "permits=N"
 *                                          or "exclusive"), print "ACQUIRED <token>", then hold
 *                                          it (heartbeats renew it, every LEASE_MS/10) until
 *                                          killed
 *   worker URL NAME permits N ROUNDS FILE  ROUNDS times: take one of N permits (wait forever,
 *                                          lease 5 s, renewed by heartbeats), count itself in
 *                                          as a current holder in FILE, then wait (at most
 *                                          20 s) until min(N, workers still looping) hold at
 *                                          once: the holders MEET, so that N side by side does
 *                                          not depend on the schedule; then count itself out
 *                                          and release. FILE, changed under flock, is
 *                                          "<current> <most ever> <looping> <timeouts>
 *                                          <meetings>": the test writes "0 0 W 0 0" for its W
 *                                          workers before starting them. A worker leaves
 *                                          `looping` with its last count-out (or on an error);
 *                                          a wait that ran out adds one to `timeouts`; a change
 *                                          that makes the holders min(N, looping) adds one to
 *                                          `meetings`, which ends the wait of every holder then
 *                                          waiting (they leave together: one leaving alone
 *                                          could leave the others waiting for a count they
 *                                          just missed). No deadlock: holders wait holding
 *                                          their permits; while fewer than min(N, looping)
 *                                          hold, a permit is free (or about to be) and a
 *                                          looping worker without one takes it, or leaves
 *                                          `looping`, which lowers the count to reach.
 *   worker URL NAME increment N FILE       N times: acquire (wait forever), append "<token>" to
 *                                          FILE and add one to the counter in FILE.count, release
 *   worker URL NAME fenced N FILE [SECS [UNTIL]]
 *                                          until N increments were accepted (and SECS seconds
 *                                          passed, and the file UNTIL exists, when given: the
 *                                          test says when the run has shown what it needed to
 *                                          show, whatever the schedule): acquire, add one to
 *                                          the counter in FILE as a fenced resource would (under
 *                                          flock, refused unless the token is above the last
 *                                          one it accepted; each accepted one's time goes
 *                                          to FILE.times), release. Rides out a failover:
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
 * above the last accepted one is refused, as a fenced storage system would. 1 when accepted.
 * Each accepted write also appends the time it was made (CLOCK_MONOTONIC, µs: the same clock
 * in every process of the machine) to FILE.times, so that a test can find the gaps between
 * acquisitions. */
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
    char times_path[4096];
    snprintf(times_path, sizeof times_path, "%s.times", path);
    FILE *times = fopen(times_path, "a");
    if (times) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      fprintf(times, "%lld\n", (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000);
      fclose(times);
    }
  }
  flock(fileno(f), LOCK_UN);
  fclose(f);
  return accepted;
}

static int fenced(dlock_client *c, dlock_options *o, const char *name, long n, const char *path,
                  double min_seconds, const char *until_file) {
  long accepted = 0, refused = 0, errors = 0, lost = 0;
  dlock_options_set_wait_ms(o, 2000);
  dlock_options_set_lease_ms(o, 3000);
  dlock_options_set_retry_ms(o, 5, 50);
  const double min_end = now_s() + min_seconds, give_up = now_s() + 60 + min_seconds;
  while (accepted < n || now_s() < min_end || (until_file && access(until_file, F_OK) != 0)) {
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

/* The permits mode's shared record in FILE (see the top of this file). */
struct holders {
  long current, most, looping, timeouts, meetings;
  long meetings_before; /* not stored: `meetings` before this change */
};
enum holders_op { kRead, kCountIn, kCountOut, kCountOutLast, kStopLooping, kTimedOut };

/* Under flock of FILE: reads the record, applies op and writes it back, into *out (when not
 * NULL) as it is after. A change that leaves min(permits, looping) holders, or more, holding
 * (current > 0) is a meeting: `meetings` counts them, and every holder waiting when one
 * happens has met. 0 on success, -1 when FILE is missing or malformed. */
static int with_holders(const char *path, long permits, enum holders_op op, struct holders *out) {
  FILE *f = fopen(path, "r+");
  if (!f) return -1;
  flock(fileno(f), LOCK_EX);
  struct holders h;
  int ok = fscanf(f, "%ld %ld %ld %ld %ld", &h.current, &h.most, &h.looping, &h.timeouts,
                  &h.meetings) == 5;
  h.meetings_before = ok ? h.meetings : 0;
  if (ok && op != kRead) {
    if (op == kCountIn) h.current++;
    if (op == kCountOut || op == kCountOutLast) h.current--;
    if (op == kCountOutLast || op == kStopLooping) h.looping--;
    if (op == kTimedOut) h.timeouts++;
    if (h.current > h.most) h.most = h.current;
    if (h.current > 0 && h.current >= (h.looping < permits ? h.looping : permits)) h.meetings++;
    rewind(f);
    ok = ftruncate(fileno(f), 0) == 0 &&
         fprintf(f, "%ld %ld %ld %ld %ld\n", h.current, h.most, h.looping, h.timeouts,
                 h.meetings) > 0 &&
         fflush(f) == 0;
  }
  flock(fileno(f), LOCK_UN);
  fclose(f);
  if (ok && out) *out = h;
  return ok ? 0 : -1;
}

static int semaphore_rounds(dlock_client *c, dlock_options *o, const char *name, long permits,
                            long rounds, const char *path) {
  dlock_status s;
  if (with_holders(path, permits, kRead, NULL) != 0) {
    fprintf(stderr, "worker: %s does not hold \"<current> <most> <looping> <timeouts> <meetings>\"\n",
            path);
    return 1;
  }
  if (rounds <= 0 || (s = dlock_options_set_permits(o, (uint32_t)permits)) != DLOCK_OK) {
    with_holders(path, permits, kStopLooping, NULL);
    return rounds <= 0 ? 0 : fail("permits", s);
  }
  dlock_options_set_wait_ms(o, -1);
  dlock_options_set_lease_ms(o, 5000); /* heartbeats (lease/3) renew it while the holders meet */
  dlock_options_set_retry_ms(o, 5, 50); /* backends without release notices poll */
  for (long i = 0; i < rounds; i++) {
    const int last = i == rounds - 1;
    dlock_lock *l;
    s = dlock_acquire(c, name, o, &l);
    if (s != DLOCK_OK) {
      with_holders(path, permits, kStopLooping, NULL); /* nobody waits for this one any more */
      return fail("acquire", s);
    }
    struct holders h;
    if (with_holders(path, permits, kCountIn, &h) != 0) {
      fprintf(stderr, "worker: %s: unreadable\n", path);
      dlock_release(l);
      return 1;
    }
    /* Meet: wait, holding the permit, for a meeting since this worker counted itself in (its
     * own count-in may have been it). */
    const long joined = h.meetings_before;
    const double give_up = now_s() + 20;
    while (h.meetings == joined) {
      if (now_s() > give_up) {
        with_holders(path, permits, kTimedOut, NULL);
        break;
      }
      struct timespec pause_ms = {0, 2000000};
      nanosleep(&pause_ms, NULL);
      if (with_holders(path, permits, kRead, &h) != 0) break;
    }
    with_holders(path, permits, last ? kCountOutLast : kCountOut, NULL);
    s = dlock_release(l);
    if (s != DLOCK_OK) {
      if (!last) with_holders(path, permits, kStopLooping, NULL);
      return fail("release", s);
    }
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
    const uint64_t lease_ms = strtoull(argv[4], NULL, 10);
    dlock_options_set_lease_ms(o, lease_ms);
    /* Renewed ten times a lease: it takes a stall of nine tenths of one, not two thirds, before
     * a holder alive is taken for dead on a busy machine. */
    if (lease_ms >= 20) dlock_options_set_heartbeat_ms(o, lease_ms / 10);
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
                      argc >= 7 ? strtod(argv[6], NULL) : 0, argc >= 8 ? argv[7] : NULL);
    dlock_options_free(o);
    dlock_client_close(c);
    return code;
  }
  fprintf(stderr, "worker: unknown mode %s\n", argv[3]);
  return 2;
}
