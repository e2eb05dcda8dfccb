/* dlock benchmarks, through the public C ABI, side by side with raw hiredis.
 *
 *   dlock_bench uncontended PORT SECONDS ROUNDS
 *       One thread. Per round, for SECONDS each: dlock_acquire + dlock_release on one name;
 *       raw hiredis SET NX PX + EVALSHA compare-and-delete; and (diagnostic) raw hiredis
 *       running dlock's own acquire/release scripts; dlock with a shared hold (DLOCK_SHARED);
 *       (diagnostic) raw hiredis acquiring with MULTI/EXEC instead of a script.
 *       Medians over ROUNDS.
 *   dlock_bench contended PORT SECONDS PROCS [fair|unfair]
 *       PROCS forked processes loop acquire(wait_ms=-1) + release on one name for SECONDS,
 *       waiting fairly (the default: in line, handed the lock) or not (dlock_options_set_fair).
 *       Attempts per acquisition, and the wait of every acquisition (p50, p99, max).
 *   dlock_bench readers PORT SECONDS READERS HOLD_US
 *       READERS processes loop shared acquire + hold HOLD_US + release on one name, beside one
 *       process doing the same with the exclusive hold: acquisitions per second of each, their
 *       attempts, and their waits (p50, p99, max).
 *   dlock_bench heartbeat PORT LOCKS LEASE_MS HOLD_S
 *       One client acquires LOCKS distinct locks (heartbeat = lease/3) and holds them for
 *       HOLD_S: background-thread and whole-process CPU, RSS per lock, bytes on the wire, and
 *       proof that leases were renewed.
 *   dlock_bench routing PORT SECONDS ROUNDS
 *       The client's cost of cluster routing. PORT is a cluster-enabled redis-server that is
 *       the cluster's only master (it serves all 16384 slots). One thread, alternating per
 *       round: dlock_acquire + dlock_release through redis-cluster://127.0.0.1:PORT, and the
 *       same through redis://127.0.0.1:PORT (the very same node, no routing). Medians over ROUNDS.
 *   dlock_bench tls PORT SECONDS ROUNDS URL
 *       The client's cost of TLS. URL (rediss://...) names the TLS port of the redis-server
 *       whose plain port is PORT. One thread, alternating per round: dlock_acquire +
 *       dlock_release through URL and through redis://127.0.0.1:PORT. Medians over ROUNDS.
 *   dlock_bench cycles PORT CYCLES [URL]
 *       One acquire+release to connect, then CYCLES more, nothing else: for counting system
 *       calls with strace (the difference of two CYCLES cancels connecting and closing).
 *
 * heartbeat takes a URL too, after HOLD_S: its client then talks to URL (say, the TLS port of
 * the same server) while PORT still serves the monitoring connection.
 *
 * Each mode prints key=value lines on stdout (bench/run turns them into a table). It talks to
 * an existing redis-server on 127.0.0.1:PORT that nothing else uses. Timings are reported,
 * never asserted; a wrong reply (a lock not acquired, a release refused) is a fatal error. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlock/dlock.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked (glibc's netinet/tcp.h has not) */
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef DLOCK_LUA_DIR
#error "DLOCK_LUA_DIR must name the source tree's lua/ directory"
#endif

static int g_port;
static const char *g_url; /* the dlock client's URL when not redis://127.0.0.1:PORT */

/* ----- small helpers ------------------------------------------------------------------------ */

/* A client of the server on g_port through scheme ("redis", "redis-cluster"). */
static dlock_client *open_scheme(const char *scheme) {
  char url[64];
  snprintf(url, sizeof url, "%s://127.0.0.1:%d", scheme, g_port);
  dlock_client *c;
  check(dlock_client_open(url, &c), "dlock_client_open");
  return c;
}

static dlock_client *open_client(void) {
  if (g_url == NULL) return open_scheme("redis");
  dlock_client *c;
  check(dlock_client_open(g_url, &c), "dlock_client_open");
  return c;
}

static redisContext *raw_connect(void) {
  redisContext *r = redisConnect("127.0.0.1", g_port);
  if (r == NULL || r->err) die("cannot connect to redis on port %d", g_port);
  return r;
}

/* One command; dies on I/O errors and error replies. The caller frees the reply. */
static redisReply *raw_cmd(redisContext *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(r, fmt, ap);
  va_end(ap);
  if (rep == NULL) die("redis: %s", r->errstr);
  if (rep->type == REDIS_REPLY_ERROR) die("redis: %s", rep->str);
  return rep;
}

/* A number from INFO <section>, on the line starting with key (e.g. "used_cpu_user:" or
 * "cmdstat_evalsha:calls="); 0 when absent (a command never called has no line). */
static double info_number(redisContext *r, const char *section, const char *key) {
  redisReply *rep = raw_cmd(r, "INFO %s", section);
  double v = 0;
  size_t klen = strlen(key);
  for (const char *line = rep->str; line != NULL && *line != '\0';) {
    if (strncmp(line, key, klen) == 0) {
      v = strtod(line + klen, NULL);
      break;
    }
    line = strchr(line, '\n');
    if (line != NULL) line++;
  }
  freeReplyObject(rep);
  return v;
}

/* CPU seconds the redis-server process has used. */
static double server_cpu_s(redisContext *mon) {
  return info_number(mon, "cpu", "used_cpu_user:") + info_number(mon, "cpu", "used_cpu_sys:");
}

/* CPU seconds this whole process (all threads) has used; *switches gets its context switches
 * (voluntary + involuntary), i.e. how often one of its threads went to sleep or was preempted. */
static double process_cpu_s(long *switches) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *switches = ru.ru_nvcsw + ru.ru_nivcsw;
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds (utime + stime from /proc/self/task/TID/stat) used by every thread but the main
 * one. With one dlock client open, that is the client's background (libevent) thread. */
static double other_threads_cpu_s(int *threads) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) die("opendir /proc/self/task: %s", strerror(errno));
  long main_tid = (long)getpid();
  unsigned long long ticks = 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long tid = strtol(e->d_name, NULL, 10);
    if (tid <= 0 || tid == main_tid) continue;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue; /* the thread just exited */
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* Fields after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime (fields 3..15 of proc(5)). comm may hold spaces: skip to the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                            &st) != 2) {
      die("cannot parse %s", path);
    }
    ticks += ut + st;
    n++;
  }
  closedir(d);
  if (threads != NULL) *threads = n;
  return (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* What this process's TCP connections open now have carried so far: payload bytes sent (and
 * acknowledged) and received, and segments, from TCP_INFO of every socket in /proc/self/fd.
 * Over TLS the payload is the TLS records: the bytes on the wire but for TCP/IP headers. */
typedef struct {
  double bytes_out, bytes_in, segs_out, segs_in;
} wire_count;

static wire_count tcp_totals(void) {
  wire_count w = {0, 0, 0, 0};
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) die("opendir /proc/self/fd: %s", strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int fd = (int)strtol(e->d_name, NULL, 10);
    if (fd == dirfd(d) || e->d_name[0] == '.') continue;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue; /* not a TCP socket */
    w.bytes_out += (double)ti.tcpi_bytes_acked, w.bytes_in += (double)ti.tcpi_bytes_received;
    w.segs_out += (double)ti.tcpi_segs_out, w.segs_in += (double)ti.tcpi_segs_in;
  }
  closedir(d);
  return w;
}

/* A fresh 128-bit token per cycle for the raw client, like dlock's owner token. */
static void raw_token(char out[33]) {
  static uint64_t s;
  if (s == 0) s = ((uint64_t)getpid() << 32) ^ (uint64_t)(now_s() * 1e9) ^ 0x9e3779b97f4a7c15ull;
  uint64_t w[2];
  for (int i = 0; i < 2; i++) { /* xorshift64* */
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    w[i] = s * 0x2545f4914f6cdd1dull;
  }
  snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, w[0], w[1]);
}

/* Loads a script (a string, or a file under DLOCK_LUA_DIR) and returns its SHA1 (static). */
static const char *load_script(redisContext *r, const char *body, const char *file) {
  char *text = NULL;
  if (file != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", DLOCK_LUA_DIR, file);
    FILE *f = fopen(path, "r");
    if (f == NULL) die("cannot open %s: %s", path, strerror(errno));
    text = calloc(1, 1 << 16);
    if (text == NULL || fread(text, 1, (1 << 16) - 1, f) == 0) die("cannot read %s", path);
    fclose(f);
    body = text;
  }
  redisReply *rep = raw_cmd(r, "SCRIPT LOAD %s", body);
  char *sha = strdup(rep->str);
  freeReplyObject(rep);
  free(text);
  return sha;
}

/* ----- 1. uncontended ------------------------------------------------------------------------ */

/* The raw client's release: delete the key only if it still holds our token. */
static const char kCompareAndDelete[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

typedef struct {
  dlock_client *c;     /* dlock variant */
  redisContext *r;     /* raw variants */
  const char *cad_sha; /* compare-and-delete */
  const char *acq_sha, *rel_sha; /* dlock's lua/acquire.lua and lua/release.lua */
  dlock_options *shared;         /* kind DLOCK_SHARED */
} unc_ctx;

/* Each runs acquire+release cycles until the monotonic clock passes `until`; returns cycles. */
typedef long (*cycle_fn)(unc_ctx *x, double until);

static long dlock_cycles(unc_ctx *x, double until) {
  long n = 0;
  do {
    dlock_lock *l;
    check(dlock_acquire(x->c, "bench:uncontended", NULL, &l), "dlock_acquire");
    check(dlock_release(l), "dlock_release");
    n++;
  } while (now_s() < until);
  return n;
}

/* Two names at once, all or none, then both released: one call each way on one Redis. */
static long dlock_many_cycles(unc_ctx *x, double until) {
  static const char *const names[] = {"bench:uncontended:a", "bench:uncontended:b"};
  long n = 0;
  do {
    dlock_lock *l[2];
    check(dlock_acquire_many(x->c, names, 2, NULL, l), "dlock_acquire_many");
    check(dlock_release_many(l, 2), "dlock_release_many");
    n++;
  } while (now_s() < until);
  return n;
}

/* The same two names one at a time, as a caller without acquire_many takes them. */
static long dlock_two_cycles(unc_ctx *x, double until) {
  long n = 0;
  do {
    dlock_lock *a, *b;
    check(dlock_acquire(x->c, "bench:uncontended:a", NULL, &a), "dlock_acquire a");
    check(dlock_acquire(x->c, "bench:uncontended:b", NULL, &b), "dlock_acquire b");
    check(dlock_release(b), "dlock_release b");
    check(dlock_release(a), "dlock_release a");
    n++;
  } while (now_s() < until);
  return n;
}

/* The same as dlock_cycles with a shared hold: what a reader pays. */
static long dlock_shared_cycles(unc_ctx *x, double until) {
  long n = 0;
  do {
    dlock_lock *l;
    check(dlock_acquire(x->c, "bench:uncontended:shared", x->shared, &l), "dlock_acquire shared");
    check(dlock_release(l), "dlock_release shared");
    n++;
  } while (now_s() < until);
  return n;
}

static long raw_cycles(unc_ctx *x, double until) {
  long n = 0;
  char token[33];
  do {
    raw_token(token);
    redisReply *rep = raw_cmd(x->r, "SET bench:raw %s NX PX 10000", token);
    if (rep->type != REDIS_REPLY_STATUS) die("raw SET NX did not acquire");
    freeReplyObject(rep);
    rep = raw_cmd(x->r, "EVALSHA %s 1 bench:raw %s", x->cad_sha, token);
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer != 1) die("raw release refused");
    freeReplyObject(rep);
    n++;
  } while (now_s() < until);
  return n;
}

/* Diagnostic: the same two round trips, but running dlock's scripts with the keys dlock names
 * for a single exclusive try and its release (fencing counter, TIME, PUBLISH on release). The gap to raw_cycles is server-side script cost; the gap from here to
 * dlock_cycles is the library's client-side cost. */
static long raw_dlock_scripts_cycles(unc_ctx *x, double until) {
  long n = 0;
  char token[33];
  do {
    raw_token(token);
    redisReply *rep = raw_cmd(x->r,
                              "EVALSHA %s 3 dlock:{bench:rawscripts} dlock:{bench:rawscripts}:fence "
                              "dlock:{bench:rawscripts}:holds %s 10000 exclusive 0",
                              x->acq_sha, token);
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->integer != 1) {
      die("raw acquire.lua did not acquire");
    }
    freeReplyObject(rep);
    rep = raw_cmd(x->r,
                  "EVALSHA %s 2 dlock:{bench:rawscripts} dlock:{bench:rawscripts}:line %s "
                  "dlock:{bench:rawscripts}:released 0 exclusive",
                  x->rel_sha, token);
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer != 1) die("raw release.lua refused");
    freeReplyObject(rep);
    n++;
  } while (now_s() < until);
  return n;
}

/* Diagnostic: the MULTI hypothesis of issue 17, raw. One round trip of MULTI; SET NX PX GET;
 * INCR fence; TIME; PTTL; EXISTS holds; EXEC (what an exclusive acquire must learn: won or not,
 * a counter and a clock for the token, the holder's lease, shared holds in the way), then
 * dlock's release.lua. The ceiling of a fenced acquire without Lua. */
static long raw_multi_cycles(unc_ctx *x, double until) {
  long n = 0;
  char token[33];
  do {
    raw_token(token);
    redisAppendCommand(x->r, "MULTI");
    redisAppendCommand(x->r, "SET dlock:{bench:rawmulti} %s NX PX 10000 GET", token);
    redisAppendCommand(x->r, "INCR dlock:{bench:rawmulti}:fence");
    redisAppendCommand(x->r, "TIME");
    redisAppendCommand(x->r, "PTTL dlock:{bench:rawmulti}");
    redisAppendCommand(x->r, "EXISTS dlock:{bench:rawmulti}:holds");
    redisAppendCommand(x->r, "EXEC");
    for (int i = 0; i < 7; i++) {
      redisReply *rep;
      if (redisGetReply(x->r, (void **)&rep) != REDIS_OK) die("redis: %s", x->r->errstr);
      if (i == 6 && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 5 ||
                     rep->element[0]->type != REDIS_REPLY_NIL)) {
        die("raw MULTI did not acquire");
      }
      freeReplyObject(rep);
    }
    redisReply *rep = raw_cmd(x->r,
                              "EVALSHA %s 2 dlock:{bench:rawmulti} dlock:{bench:rawmulti}:line %s "
                              "dlock:{bench:rawmulti}:released 0 exclusive",
                              x->rel_sha, token);
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer != 1) die("raw release.lua refused");
    freeReplyObject(rep);
    n++;
  } while (now_s() < until);
  return n;
}

typedef struct {
  double rate;          /* cycles/s */
  double client_cpu_us; /* this process, all threads, per cycle */
  double bg_cpu_us;     /* non-main threads (dlock's loop thread), per cycle */
  double server_cpu_us; /* redis-server, per cycle */
  double switches;      /* context switches of this process's threads, per cycle */
  wire_count wire;      /* this process's TCP traffic, per cycle */
} unc_sample;

static unc_sample measure(cycle_fn fn, unc_ctx *x, double secs, redisContext *mon) {
  long sw0, sw1;
  double srv0 = server_cpu_s(mon);
  wire_count w0 = tcp_totals(); /* after mon's INFO: mon is idle until after w1 */
  double cpu0 = process_cpu_s(&sw0), bg0 = other_threads_cpu_s(NULL);
  double t0 = now_s();
  long n = fn(x, t0 + secs);
  double t1 = now_s();
  double cpu1 = process_cpu_s(&sw1), bg1 = other_threads_cpu_s(NULL);
  wire_count w1 = tcp_totals();
  double srv1 = server_cpu_s(mon);
  double dn = (double)n;
  unc_sample s = {dn / (t1 - t0), (cpu1 - cpu0) * 1e6 / dn, (bg1 - bg0) * 1e6 / dn,
                  (srv1 - srv0) * 1e6 / dn, (double)(sw1 - sw0) / dn,
                  {(w1.bytes_out - w0.bytes_out) / dn, (w1.bytes_in - w0.bytes_in) / dn,
                   (w1.segs_out - w0.segs_out) / dn, (w1.segs_in - w0.segs_in) / dn}};
  return s;
}

static int bench_uncontended(double secs, int rounds) {
  enum { kVariants = 7, kMaxRounds = 15 };
  static const char *const names[kVariants] = {"dlock", "raw", "rawscripts", "shared", "rawmulti", "many", "two"};
  const cycle_fn fns[kVariants] = {dlock_cycles, raw_cycles, raw_dlock_scripts_cycles,
                                   dlock_shared_cycles, raw_multi_cycles, dlock_many_cycles,
                                   dlock_two_cycles};
  if (rounds < 1 || rounds > kMaxRounds) die("rounds must be 1..%d", kMaxRounds);

  unc_ctx x = {0};
  x.c = open_client();
  x.shared = dlock_options_new();
  check(dlock_options_set_kind(x.shared, DLOCK_SHARED), "set_kind");
  x.r = raw_connect();
  redisContext *mon = raw_connect(); /* INFO only, outside the timed loops */
  x.cad_sha = load_script(x.r, kCompareAndDelete, NULL);
  x.acq_sha = load_script(x.r, NULL, "acquire.lua");
  x.rel_sha = load_script(x.r, NULL, "release.lua");

  /* Warm-up: connections, script cache, allocator, CPU frequency. */
  for (int v = 0; v < kVariants; v++) fns[v](&x, now_s() + 0.3);

  /* Alternate the variants within each round (reversing the order every other round), so
   * that drift and other load on the machine hit all of them alike. */
  double rate[kVariants][kMaxRounds], cli[kVariants][kMaxRounds], bg[kVariants][kMaxRounds],
      srv[kVariants][kMaxRounds], sw[kVariants][kMaxRounds];
  /* Paired per round (the machine's speed drifts; variants measured next to each other do not):
   * dlock/raw, rawscripts/raw, dlock/rawscripts, and the µs per cycle that dlock adds. */
  double ratio[kMaxRounds], scripts_ratio[kMaxRounds], lib_ratio[kMaxRounds],
      added_us[kMaxRounds], scripts_added_us[kMaxRounds], shared_ratio[kMaxRounds],
      multi_ratio[kMaxRounds], many_ratio[kMaxRounds], many_two_ratio[kMaxRounds];
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < kVariants; i++) {
      int v = r % 2 ? kVariants - 1 - i : i;
      unc_sample s = measure(fns[v], &x, secs, mon);
      rate[v][r] = s.rate, cli[v][r] = s.client_cpu_us, bg[v][r] = s.bg_cpu_us, srv[v][r] = s.server_cpu_us;
      sw[v][r] = s.switches;
    }
    ratio[r] = rate[0][r] / rate[1][r];
    scripts_ratio[r] = rate[2][r] / rate[1][r];
    lib_ratio[r] = rate[0][r] / rate[2][r];
    added_us[r] = 1e6 / rate[0][r] - 1e6 / rate[1][r];
    scripts_added_us[r] = 1e6 / rate[2][r] - 1e6 / rate[1][r];
    shared_ratio[r] = rate[3][r] / rate[0][r];
    multi_ratio[r] = rate[4][r] / rate[1][r];
    many_ratio[r] = rate[5][r] / rate[0][r];
    many_two_ratio[r] = rate[5][r] / rate[6][r];
  }
  printf("unc_seconds=%g\nunc_rounds=%d\n", secs, rounds);
  printf("unc_ratio_rounds=");
  for (int r = 0; r < rounds; r++) printf("%s%.2f", r ? "/" : "", ratio[r]);
  printf("\nunc_ratio=%.3f\n", median(ratio, rounds));
  printf("unc_scripts_ratio=%.3f\nunc_lib_ratio=%.3f\n", median(scripts_ratio, rounds),
         median(lib_ratio, rounds));
  printf("unc_shared_ratio_rounds=");
  for (int r = 0; r < rounds; r++) printf("%s%.2f", r ? "/" : "", shared_ratio[r]);
  printf("\nunc_shared_ratio=%.3f\n", median(shared_ratio, rounds));
  printf("unc_multi_ratio=%.3f\n", median(multi_ratio, rounds));
  printf("unc_many_ratio_rounds=");
  for (int r = 0; r < rounds; r++) printf("%s%.2f", r ? "/" : "", many_ratio[r]);
  printf("\nunc_many_ratio=%.3f\n", median(many_ratio, rounds));
  printf("unc_many_two_ratio=%.3f\n", median(many_two_ratio, rounds));
  printf("unc_added_us=%.1f\nunc_scripts_added_us=%.1f\n", median(added_us, rounds),
         median(scripts_added_us, rounds));
  for (int v = 0; v < kVariants; v++) {
    printf("unc_%s_rounds=", names[v]);
    for (int r = 0; r < rounds; r++) printf("%s%.0f", r ? "/" : "", rate[v][r]);
    printf("\n");
    printf("unc_%s_rate=%.1f\n", names[v], median(rate[v], rounds));
    printf("unc_%s_client_cpu_us=%.2f\n", names[v], median(cli[v], rounds));
    printf("unc_%s_bg_cpu_us=%.2f\n", names[v], median(bg[v], rounds));
    printf("unc_%s_server_cpu_us=%.2f\n", names[v], median(srv[v], rounds));
    printf("unc_%s_switches=%.2f\n", names[v], median(sw[v], rounds));
  }
  dlock_options_free(x.shared);
  dlock_client_close(x.c);
  redisFree(x.r);
  redisFree(mon);
  return 0;
}

/* ----- 2. contended -------------------------------------------------------------------------- */

/* One contending process: acquire (wait forever) + release, empty critical section, from the
 * moment the parent says go until `secs` later. Writes "acquisitions attempts_sum attempts_max". */
/* Each contender's waits (µs per acquire), in memory shared with the parent. */
enum { kMaxWaitSamples = 200000 };

static void contender(double secs, int fair, dlock_kind kind, int hold_us, const char *name, int index,
                      float *waits, int ready_fd, int go_fd, int result_fd) {
  dlock_client *c = open_client();
  dlock_options *o = dlock_options_new();
  check(dlock_options_set_wait_ms(o, -1), "set_wait_ms");
  check(dlock_options_set_fair(o, fair), "set_fair");
  check(dlock_options_set_kind(o, kind), "set_kind");
  dlock_lock *l;
  check(dlock_acquire(c, "bench:contended:warm", o, &l), "warm-up acquire"); /* opens a connection */
  check(dlock_release(l), "warm-up release");

  char b = 1, go;
  if (write(ready_fd, &b, 1) != 1) die("write ready");
  if (read(go_fd, &go, 1) != 0) die("expected EOF as the go signal");
  double end = now_s() + secs;
  long count = 0, attempts_sum = 0, attempts_max = 0;
  for (;;) {
    double asked = now_s();
    check(dlock_acquire(c, name, o, &l), "contended acquire");
    double got = now_s();
    if (hold_us > 0) sleep_s(hold_us / 1e6);
    int in_time = got < end;
    if (in_time) {
      long a = (long)dlock_lock_attempts(l);
      if (count < kMaxWaitSamples) waits[count] = (float)((got - asked) * 1e6);
      count++, attempts_sum += a;
      if (a > attempts_max) attempts_max = a;
    }
    check(dlock_release(l), "contended release");
    if (!in_time) break;
  }
  char line[96];
  int len = snprintf(line, sizeof line, "%d %ld %ld %ld\n", index, count, attempts_sum, attempts_max);
  if (write(result_fd, line, (size_t)len) != len) die("write result");
  dlock_options_free(o);
  dlock_client_close(c);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* What one run of contenders measured: each process's acquisitions and attempts, and its waits
 * (µs per acquisition) in memory shared with the parent (kMaxWaitSamples per process). */
typedef struct {
  int procs;
  long counts[64], attempts[64], attempts_max[64];
  float *waits;
  size_t wait_bytes;
} contenders;

/* Forks `procs` contenders on `name`, process i taking kinds[i], each holding hold_us, starts
 * them together, and collects what they measured. */
static void run_contenders(double secs, int procs, int fair, const dlock_kind *kinds, int hold_us,
                           const char *name, contenders *out) {
  if (procs < 2 || procs > 64) die("procs must be 2..64");
  memset(out, 0, sizeof *out);
  out->procs = procs;
  out->wait_bytes = sizeof(float) * kMaxWaitSamples * (size_t)procs;
  out->waits = mmap(NULL, out->wait_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (out->waits == MAP_FAILED) die("mmap: %s", strerror(errno));
  /* Fork before this process opens anything: no threads are copied into the children. */
  int ready[2], go[2], result[2];
  if (pipe(ready) || pipe(go) || pipe(result)) die("pipe: %s", strerror(errno));
  fflush(stdout);
  pid_t pids[64];
  for (int i = 0; i < procs; i++) {
    pids[i] = fork();
    if (pids[i] < 0) die("fork: %s", strerror(errno));
    if (pids[i] == 0) {
      close(ready[0]), close(go[1]), close(result[0]);
      contender(secs, fair, kinds[i], hold_us, name, i, out->waits + (size_t)i * kMaxWaitSamples,
                ready[1], go[0], result[1]);
      _exit(0);
    }
  }
  close(ready[1]), close(go[0]), close(result[1]);
  for (int i = 0; i < procs; i++) {
    char b;
    if (read(ready[0], &b, 1) != 1) die("a contender failed to start");
  }
  close(go[1]); /* EOF: every contender starts now */

  FILE *res = fdopen(result[0], "r");
  for (int i = 0; i < procs; i++) {
    long n, a, am;
    int index;
    if (fscanf(res, "%d %ld %ld %ld", &index, &n, &a, &am) != 4 || index < 0 || index >= procs) {
      die("a contender failed (see above)");
    }
    out->counts[index] = n, out->attempts[index] = a, out->attempts_max[index] = am;
  }
  fclose(res);
  for (int i = 0; i < procs; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("contender %d exited badly", i);
  }
}

typedef struct {
  long total, attempts, attempts_max, min, max;
  double p50, p99, wmax;
} contender_totals;

/* Totals over processes [from, to): acquisitions, attempts, and the waits' percentiles. */
static contender_totals sum_contenders(const contenders *c, int from, int to) {
  contender_totals t = {0, 0, 0, -1, 0, 0, 0, 0};
  float *all = malloc(c->wait_bytes);
  if (all == NULL) die("out of memory");
  long samples = 0;
  for (int i = from; i < to; i++) {
    long n = c->counts[i];
    t.total += n, t.attempts += c->attempts[i];
    if (c->attempts_max[i] > t.attempts_max) t.attempts_max = c->attempts_max[i];
    if (t.min < 0 || n < t.min) t.min = n;
    if (n > t.max) t.max = n;
    const float *mine = c->waits + (size_t)i * kMaxWaitSamples;
    for (long k = 0; k < kMaxWaitSamples && k < n; k++) all[samples++] = mine[k];
  }
  qsort(all, (size_t)samples, sizeof *all, cmp_float);
  if (samples > 0) t.p50 = all[samples / 2], t.p99 = all[(samples * 99) / 100], t.wmax = all[samples - 1];
  free(all);
  return t;
}

static int bench_contended(double secs, int procs, int fair) {
  dlock_kind kinds[64];
  for (int i = 0; i < 64; i++) kinds[i] = DLOCK_EXCLUSIVE;
  contenders c;
  run_contenders(secs, procs, fair, kinds, 0, "bench:contended", &c);
  contender_totals t = sum_contenders(&c, 0, procs);
  munmap(c.waits, c.wait_bytes);
  printf("con_procs=%d\ncon_seconds=%g\ncon_total=%ld\ncon_rate=%.1f\n", procs, secs, t.total,
         (double)t.total / secs);
  printf("con_min=%ld\ncon_max=%ld\ncon_attempts_mean=%.2f\ncon_attempts_max=%ld\n", t.min, t.max,
         t.total ? (double)t.attempts / (double)t.total : 0.0, t.attempts_max);
  printf("con_fair=%d\ncon_wait_p50_us=%.0f\ncon_wait_p99_us=%.0f\ncon_wait_max_us=%.0f\n", fair,
         t.p50, t.p99, t.wmax);
  return 0;
}

/* Readers and one writer on one name: process 0 takes the exclusive hold, the others shared
 * holds, each holding hold_us. Prints rw_* lines: acquisitions per second of each, their
 * attempts, and their waits. */
static int bench_readers(double secs, int readers, int hold_us) {
  dlock_kind kinds[64];
  kinds[0] = DLOCK_EXCLUSIVE;
  for (int i = 1; i < 64; i++) kinds[i] = DLOCK_SHARED;
  contenders c;
  run_contenders(secs, readers + 1, 1, kinds, hold_us, "bench:readers", &c);
  contender_totals w = sum_contenders(&c, 0, 1), r = sum_contenders(&c, 1, readers + 1);
  munmap(c.waits, c.wait_bytes);
  printf("rw_readers=%d\nrw_hold_us=%d\nrw_seconds=%g\n", readers, hold_us, secs);
  printf("rw_rate=%.1f\nrw_reader_rate=%.1f\nrw_writer_rate=%.1f\n", (double)(w.total + r.total) / secs,
         (double)r.total / secs, (double)w.total / secs);
  printf("rw_reader_min=%ld\nrw_reader_max=%ld\n", r.min, r.max);
  printf("rw_reader_attempts_mean=%.2f\nrw_writer_attempts_mean=%.2f\n",
         r.total ? (double)r.attempts / (double)r.total : 0.0, w.total ? (double)w.attempts / (double)w.total : 0.0);
  printf("rw_writer_wait_p50_us=%.0f\nrw_writer_wait_p99_us=%.0f\nrw_writer_wait_max_us=%.0f\n", w.p50, w.p99, w.wmax);
  printf("rw_reader_wait_p50_us=%.0f\nrw_reader_wait_p99_us=%.0f\nrw_reader_wait_max_us=%.0f\n", r.p50, r.p99, r.wmax);
  return 0;
}

/* ----- 3. heartbeat load --------------------------------------------------------------------- */

static int bench_heartbeat(int nlocks, uint64_t lease_ms, double hold_s) {
  if (nlocks < 1) die("locks must be >= 1");
  dlock_client *c = open_client();
  redisContext *mon = raw_connect();
  dlock_options *o = dlock_options_new();
  check(dlock_options_set_lease_ms(o, lease_ms), "set_lease_ms");

  /* Warm up the client (pooled connection, loop thread, allocator) so that only per-lock
   * memory shows in the RSS difference; the handle array is allocated and touched now too. */
  dlock_lock **held = malloc((size_t)nlocks * sizeof *held);
  if (held == NULL) die("out of memory");
  memset(held, 0, (size_t)nlocks * sizeof *held);
  for (int i = 0; i < 200; i++) {
    check(dlock_acquire(c, "bench:hb:warm", o, &held[0]), "warm-up acquire");
    check(dlock_release(held[0]), "warm-up release");
  }
  sleep_s(0.3); /* the loop thread has handled the warm-up's track/untrack */
  long rss0 = rss_bytes();

  char name[64];
  double t0 = now_s();
  for (int i = 0; i < nlocks; i++) {
    snprintf(name, sizeof name, "bench:hb:%d", i);
    check(dlock_acquire(c, name, o, &held[i]), "acquire");
  }
  double t_acquired = now_s();
  sleep_s(0.3); /* let the loop thread register them all for heartbeats */
  long rss1 = rss_bytes();

  /* Hold: only heartbeats talk to the server now, so EVALSHA calls = renewals. */
  int threads = 0;
  double evalsha0 = info_number(mon, "commandstats", "cmdstat_evalsha:calls=");
  double loads0 = info_number(mon, "commandstats", "cmdstat_script|load:calls=");
  double srv0 = server_cpu_s(mon);
  wire_count wire0 = tcp_totals(); /* after mon's INFO: mon is idle until after wire1 */
  long sw;
  double cpu0 = other_threads_cpu_s(&threads), proc0 = process_cpu_s(&sw);
  double w0 = now_s();
  sleep_s(t_acquired + hold_s - w0);
  double w1 = now_s();
  double cpu1 = other_threads_cpu_s(NULL), proc1 = process_cpu_s(&sw);
  wire_count wire1 = tcp_totals();
  double srv1 = server_cpu_s(mon);
  double evalsha1 = info_number(mon, "commandstats", "cmdstat_evalsha:calls=");
  double loads1 = info_number(mon, "commandstats", "cmdstat_script|load:calls=");
  long rss2 = rss_bytes();

  /* Renewed for real? Without renewals the first lock would have little or no TTL left. */
  redisReply *first = raw_cmd(mon, "PTTL dlock:{bench:hb:0}");
  double first_age = now_s() - t0;
  redisReply *last = raw_cmd(mon, "PTTL dlock:{bench:hb:%d}", nlocks - 1);
  int valid = 0;
  for (int i = 0; i < nlocks; i++) valid += dlock_lock_is_valid(held[i]);

  printf("hb_locks=%d\nhb_lease_ms=%" PRIu64 "\nhb_heartbeat_ms=%" PRIu64 "\n", nlocks, lease_ms,
         lease_ms / 3);
  printf("hb_acquire_rate=%.1f\n", (double)nlocks / (t_acquired - t0));
  printf("hb_hold_s=%.2f\nhb_threads=%d\n", w1 - w0, threads);
  printf("hb_bg_cpu_s=%.3f\nhb_bg_cpu_pct=%.3f\n", cpu1 - cpu0, (cpu1 - cpu0) * 100 / (w1 - w0));
  printf("hb_proc_cpu_s=%.3f\nhb_proc_cpu_pct=%.3f\n", proc1 - proc0, (proc1 - proc0) * 100 / (w1 - w0));
  printf("hb_server_cpu_pct=%.3f\n", (srv1 - srv0) * 100 / (w1 - w0));
  printf("hb_bytes_out=%.0f\nhb_bytes_in=%.0f\nhb_segments=%.0f\n", wire1.bytes_out - wire0.bytes_out,
         wire1.bytes_in - wire0.bytes_in, wire1.segs_out - wire0.segs_out + wire1.segs_in - wire0.segs_in);
  printf("hb_rss_before=%ld\nhb_rss_after=%ld\nhb_bytes_per_lock=%.1f\n", rss0, rss1,
         (double)(rss1 - rss0) / nlocks);
  printf("hb_bytes_per_lock_after_hold=%.1f\n", (double)(rss2 - rss0) / nlocks);
  /* EVALSHA calls: renewals, plus any retried after NOSCRIPT (then SCRIPT LOAD calls > 0). */
  printf("hb_renewals=%.0f\nhb_rounds=%.2f\nhb_script_loads=%.0f\n", evalsha1 - evalsha0,
         (evalsha1 - evalsha0) / nlocks, loads1 - loads0);
  printf("hb_first_pttl=%lld\nhb_first_age_s=%.1f\nhb_last_pttl=%lld\nhb_valid=%d\n",
         first->integer, first_age, last->integer, valid);
  freeReplyObject(first);
  freeReplyObject(last);

  /* Close releases everything still held (pipelined); the handles then only need freeing. */
  double c0 = now_s();
  dlock_client_close(c);
  double c1 = now_s();
  for (int i = 0; i < nlocks; i++) (void)dlock_release(held[i]);
  redisReply *left = raw_cmd(mon, "EXISTS dlock:{bench:hb:0} dlock:{bench:hb:%d}", nlocks - 1);
  printf("hb_close_ms=%.1f\nhb_left_after_close=%lld\n", (c1 - c0) * 1e3, left->integer);
  freeReplyObject(left);
  free(held);
  dlock_options_free(o);
  redisFree(mon);
  return 0;
}

/* ----- 4. two clients of one server: cluster routing, TLS ---------------------------------- */

/* The same uncontended cycle (dlock_cycles, same lock name, so the same server work) through two
 * clients of one server, alternating per round. What differs is only how the client reaches it.
 * Prints PREFIX_* lines: NAMES[0] against NAMES[1]. */
static void compare_clients(const char *prefix, const char *const names[2], dlock_client *clients[2],
                            redisContext *mon, double secs, int rounds) {
  enum { kVariants = 2, kMaxRounds = 31 };
  if (rounds < 1 || rounds > kMaxRounds) die("rounds must be 1..%d", kMaxRounds);
  unc_ctx x[kVariants] = {{0}, {0}};
  for (int v = 0; v < kVariants; v++) x[v].c = clients[v];
  for (int v = 0; v < kVariants; v++) dlock_cycles(&x[v], now_s() + 0.3); /* warm-up */

  double rate[kVariants][kMaxRounds], cli[kVariants][kMaxRounds], srv[kVariants][kMaxRounds],
      sw[kVariants][kMaxRounds], out[kVariants][kMaxRounds], in[kVariants][kMaxRounds],
      segs[kVariants][kMaxRounds];
  /* Paired per round: the ratio, and the µs per cycle (wall, client CPU, server CPU) added. */
  double ratio[kMaxRounds], added_us[kMaxRounds], cpu_added_us[kMaxRounds], srv_added_us[kMaxRounds];
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < kVariants; i++) {
      int v = r % 2 ? kVariants - 1 - i : i;
      unc_sample s = measure(dlock_cycles, &x[v], secs, mon);
      rate[v][r] = s.rate, cli[v][r] = s.client_cpu_us, srv[v][r] = s.server_cpu_us;
      sw[v][r] = s.switches, out[v][r] = s.wire.bytes_out, in[v][r] = s.wire.bytes_in;
      segs[v][r] = s.wire.segs_out + s.wire.segs_in;
    }
    ratio[r] = rate[0][r] / rate[1][r];
    added_us[r] = 1e6 / rate[0][r] - 1e6 / rate[1][r];
    cpu_added_us[r] = cli[0][r] - cli[1][r];
    srv_added_us[r] = srv[0][r] - srv[1][r];
  }
  printf("%s_seconds=%g\n%s_rounds=%d\n", prefix, secs, prefix, rounds);
  printf("%s_ratio_rounds=", prefix);
  for (int r = 0; r < rounds; r++) printf("%s%.2f", r ? "/" : "", ratio[r]);
  printf("\n%s_ratio=%.3f\n", prefix, median(ratio, rounds));
  printf("%s_added_us=%.2f\n%s_client_cpu_added_us=%.2f\n%s_server_cpu_added_us=%.2f\n", prefix,
         median(added_us, rounds), prefix, median(cpu_added_us, rounds), prefix,
         median(srv_added_us, rounds));
  for (int v = 0; v < kVariants; v++) {
    const char *n = names[v];
    printf("%s_%s_rounds=", prefix, n);
    for (int r = 0; r < rounds; r++) printf("%s%.0f", r ? "/" : "", rate[v][r]);
    printf("\n");
    printf("%s_%s_rate=%.1f\n", prefix, n, median(rate[v], rounds));
    printf("%s_%s_client_cpu_us=%.2f\n", prefix, n, median(cli[v], rounds));
    printf("%s_%s_server_cpu_us=%.2f\n", prefix, n, median(srv[v], rounds));
    printf("%s_%s_switches=%.2f\n", prefix, n, median(sw[v], rounds));
    printf("%s_%s_bytes_out=%.1f\n%s_%s_bytes_in=%.1f\n%s_%s_segments=%.2f\n", prefix, n,
           median(out[v], rounds), prefix, n, median(in[v], rounds), prefix, n,
           median(segs[v], rounds));
  }
}

/* Cluster routing: redis-cluster:// and redis:// to a cluster-enabled server that is its
 * cluster's only master. Only the client differs: slot of the keys, the slot map's master, the
 * reply checked for a redirection. */
static int bench_routing(double secs, int rounds) {
  static const char *const names[2] = {"cluster", "single"};
  dlock_client *c[2] = {open_scheme("redis-cluster"), /* loads the slot map: fails unless a cluster node */
                        open_scheme("redis")};
  redisContext *mon = raw_connect(); /* INFO only, outside the timed loops */
  redisReply *info = raw_cmd(mon, "CLUSTER INFO");
  if (strstr(info->str, "cluster_state:ok") == NULL || strstr(info->str, "cluster_size:1\r") == NULL) {
    die("port %d is not the only master of a healthy cluster:\n%s", g_port, info->str);
  }
  freeReplyObject(info);
  compare_clients("rt", names, c, mon, secs, rounds);
  for (int v = 0; v < 2; v++) dlock_client_close(c[v]);
  redisFree(mon);
  return 0;
}

/* TLS: url (the server's TLS port) and redis://127.0.0.1:PORT (its plain port). Only the
 * client's transport differs: TLS records, encrypted, on both sides. */
static int bench_tls(double secs, int rounds, const char *url) {
  static const char *const names[2] = {"tls", "plain"};
  dlock_client *c[2];
  check(dlock_client_open(url, &c[0]), "dlock_client_open (TLS)");
  c[1] = open_scheme("redis");
  redisContext *mon = raw_connect();
  compare_clients("tls", names, c, mon, secs, rounds);
  for (int v = 0; v < 2; v++) dlock_client_close(c[v]);
  redisFree(mon);
  return 0;
}

/* One cycle to connect, then `cycles` more: what strace counts, less what the same run with
 * fewer cycles counts, is the cycles' own system calls. */
static int bench_cycles(long cycles) {
  dlock_client *c = open_client();
  for (long i = 0; i <= cycles; i++) {
    dlock_lock *l;
    check(dlock_acquire(c, "bench:cycles", NULL, &l), "dlock_acquire");
    check(dlock_release(l), "dlock_release");
  }
  dlock_client_close(c);
  return 0;
}

int main(int argc, char **argv) {
  bench_who = "dlock_bench";
  if (argc >= 3) g_port = atoi(argv[2]);
  if (argc == 5 && strcmp(argv[1], "uncontended") == 0) {
    return bench_uncontended(atof(argv[3]), atoi(argv[4]));
  }
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "contended") == 0) {
    int fair = argc == 6 ? strcmp(argv[5], "unfair") != 0 : 1;
    if (argc == 6 && fair && strcmp(argv[5], "fair") != 0) die("contended: fair or unfair");
    return bench_contended(atof(argv[3]), atoi(argv[4]), fair);
  }
  if (argc == 6 && strcmp(argv[1], "readers") == 0) {
    int readers = atoi(argv[4]);
    if (readers < 1 || readers > 63) die("readers must be 1..63");
    return bench_readers(atof(argv[3]), readers, atoi(argv[5]));
  }
  if ((argc == 6 || argc == 7) && strcmp(argv[1], "heartbeat") == 0) {
    if (argc == 7) g_url = argv[6];
    return bench_heartbeat(atoi(argv[3]), strtoull(argv[4], NULL, 10), atof(argv[5]));
  }
  if (argc == 5 && strcmp(argv[1], "routing") == 0) {
    return bench_routing(atof(argv[3]), atoi(argv[4]));
  }
  if (argc == 6 && strcmp(argv[1], "tls") == 0) {
    return bench_tls(atof(argv[3]), atoi(argv[4]), argv[5]);
  }
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "cycles") == 0) {
    if (argc == 5) g_url = argv[4];
    return bench_cycles(atol(argv[3]));
  }
  fprintf(stderr,
          "usage: dlock_bench uncontended PORT SECONDS ROUNDS\n"
          "       dlock_bench contended PORT SECONDS PROCS\n"
          "       dlock_bench readers PORT SECONDS READERS HOLD_US\n"
          "       dlock_bench heartbeat PORT LOCKS LEASE_MS HOLD_S [URL]\n"
          "       dlock_bench routing PORT SECONDS ROUNDS\n"
          "       dlock_bench tls PORT SECONDS ROUNDS URL\n"
          "       dlock_bench cycles PORT CYCLES [URL]\n");
  return 2;
}
