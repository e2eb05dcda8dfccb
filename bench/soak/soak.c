/* The soak benchmark's lock holder (bench/soak/run drives it), through the public C API only.
 *
 *   dlock_soak URL LOCKS LEASE_MS HEARTBEAT_MS
 *
 * Opens ONE client, acquires LOCKS locks named soak/0 .. soak/<LOCKS-1> (one try each; all must
 * succeed), each with heartbeats and an on_lost callback, then holds them and answers commands,
 * one per line, on stdin:
 *   check   prints "check valid=V invalid=I min_remaining_ms=M max_remaining_ms=X", one
 *           "invalid NAME" line per lock dlock_lock_is_valid() calls invalid, then "check_end".
 *   close   dlock_client_close (which releases everything still held), then dlock_release of
 *           every handle (it only frees them now: DLOCK_NOT_HELD); prints
 *           "closed close_ms=C release_ok=A release_not_held=B release_other=D".
 *   exit    (or end of input) closes the client if that was not done yet, and exits 0.
 * Everything it reports goes to stdout, one line per event, flushed at once:
 *   "ready pid=P locks=N acquire_ms=A"       all held, heartbeats running
 *   "lost NAME TOKEN UNIX_MS"                 on_lost ran (UNIX_MS: CLOCK_REALTIME, ms)
 * Errors go to stderr; exit status 2 when an acquire or the open fails. */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER; /* one writer on stdout at a time */
static long g_lost;                                           /* under g_out_mu */

static long long unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Runs on the client's loop thread: short, one line out. */
static void on_lost(const char *name, uint64_t token, void *arg) {
  (void)arg;
  long long t = unix_ms();
  pthread_mutex_lock(&g_out_mu);
  g_lost++;
  printf("lost %s %" PRIu64 " %lld\n", name, token, t);
  fflush(stdout);
  pthread_mutex_unlock(&g_out_mu);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g_out_mu);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&g_out_mu);
  va_end(ap);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: dlock_soak URL LOCKS LEASE_MS HEARTBEAT_MS\n");
    return 2;
  }
  const char *url = argv[1];
  int nlocks = atoi(argv[2]);
  uint64_t lease_ms = strtoull(argv[3], NULL, 10);
  uint64_t heartbeat_ms = strtoull(argv[4], NULL, 10);
  if (nlocks < 1) {
    fprintf(stderr, "dlock_soak: LOCKS must be >= 1\n");
    return 2;
  }

  dlock_client *c;
  if (dlock_client_open(url, &c) != DLOCK_OK) {
    fprintf(stderr, "dlock_soak: open %s: %s\n", url, dlock_last_error());
    return 2;
  }
  dlock_options *o = dlock_options_new();
  if (o == NULL || dlock_options_set_lease_ms(o, lease_ms) != DLOCK_OK ||
      dlock_options_set_heartbeat_ms(o, heartbeat_ms) != DLOCK_OK ||
      dlock_options_set_owner(o, "soak") != DLOCK_OK ||
      dlock_options_set_on_lost(o, on_lost, NULL) != DLOCK_OK) {
    fprintf(stderr, "dlock_soak: options: %s\n", dlock_last_error());
    return 2;
  }

  dlock_lock **held = calloc((size_t)nlocks, sizeof *held);
  if (held == NULL) {
    fprintf(stderr, "dlock_soak: out of memory\n");
    return 2;
  }
  char name[64];
  double t0 = mono_ms();
  for (int i = 0; i < nlocks; i++) {
    snprintf(name, sizeof name, "soak/%d", i);
    dlock_status s = dlock_acquire(c, name, o, &held[i]);
    if (s != DLOCK_OK) {
      fprintf(stderr, "dlock_soak: acquire %s: %s: %s\n", name, dlock_status_str(s),
              dlock_last_error());
      return 2;
    }
  }
  double t1 = mono_ms();
  say("ready pid=%ld locks=%d acquire_ms=%.1f\n", (long)getpid(), nlocks, t1 - t0);

  int closed = 0;
  char line[128];
  while (fgets(line, sizeof line, stdin) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (strcmp(line, "check") == 0) {
      if (closed) {
        say("check_end\n");
        continue;
      }
      int valid = 0, invalid = 0;
      int64_t min_rem = INT64_MAX, max_rem = 0;
      for (int i = 0; i < nlocks; i++) {
        if (dlock_lock_is_valid(held[i])) {
          valid++;
          int64_t r = dlock_lock_remaining_ms(held[i]);
          if (r < min_rem) min_rem = r;
          if (r > max_rem) max_rem = r;
        } else {
          invalid++;
          say("invalid %s\n", dlock_lock_name(held[i]));
        }
      }
      if (valid == 0) min_rem = 0;
      say("check valid=%d invalid=%d min_remaining_ms=%" PRId64 " max_remaining_ms=%" PRId64
          "\ncheck_end\n",
          valid, invalid, min_rem, max_rem);
    } else if (strcmp(line, "close") == 0 && !closed) {
      double c0 = mono_ms();
      dlock_client_close(c);
      double c1 = mono_ms();
      closed = 1;
      int ok = 0, not_held = 0, other = 0;
      for (int i = 0; i < nlocks; i++) {
        dlock_status s = dlock_release(held[i]);
        if (s == DLOCK_OK) ok++;
        else if (s == DLOCK_NOT_HELD) not_held++;
        else other++;
      }
      say("closed close_ms=%.1f release_ok=%d release_not_held=%d release_other=%d\n", c1 - c0,
          ok, not_held, other);
    } else if (strcmp(line, "exit") == 0) {
      break;
    }
  }
  if (!closed) {
    dlock_client_close(c);
    for (int i = 0; i < nlocks; i++) (void)dlock_release(held[i]);
  }
  free(held);
  dlock_options_free(o);
  return 0;
}
