/* The PostgreSQL benchmark's C side (bench/postgres/run drives it): dlock's postgres:// backend
 * through the public C API, side by side with what a PostgreSQL user would pick instead:
 * session advisory locks, `SELECT pg_try_advisory_lock(k)` + `SELECT pg_advisory_unlock(k)`
 * sent with PQexecParams on one libpq connection to the same server.
 *
 *   pg_bench prepare HOST:PORT
 *       dlock_backend_prepare for the three tables the other modes use (below), timed.
 *   pg_bench uncontended HOST:PORT SECONDS ROUNDS DIAG_SECONDS STATS_SECONDS DECAY_BLOCKS
 *       One thread, blocking calls. Each round starts with a VACUUM of the three tables (every
 *       cycle leaves dead rows, and they slow the next ones). Per round, for SECONDS each, in
 *       alternating order:
 *       dlock_acquire (wait 0, lease 10 s) + dlock_release on a logged table, on an unlogged
 *       one (unlogged=1), on the logged table of a database whose synchronous_commit is off,
 *       and the advisory-lock peer; with DIAG_SECONDS, dlock's own two SQL calls sent by hand
 *       with libpq on the unlogged table (the server's cost of dlock's protocol without dlock's
 *       client), as prepared statements (as dlock sends them) and as text each time (what
 *       preparing saves). Medians over ROUNDS; a ratio is the median of the per-round ratios. Then, with
 *       STATS_SECONDS, each variant once more alone, its backend's statistics flushed before
 *       and after (PostgreSQL 15 flushes a backend's at most once a second): WAL records,
 *       bytes and fsyncs, commits, and the time the server spent inside the lock table's
 *       plpgsql functions, per cycle (track_functions=pl, track_wal_io_timing=on), and the dead
 *       rows left in the tables. Then DECAY_BLOCKS blocks of STATS_SECONDS of dlock on the
 *       unlogged table after a VACUUM, none meanwhile: how the dead rows slow it.
 *   pg_bench free HOST:PORT logged|unlogged|peer SECONDS PROCS POLL_MS TAG
 *       PROCS processes (forked) and one lock name; each loops: acquire (dlock: wait -1; the
 *       peer: pg_try_advisory_lock, polled every POLL_MS until it answers true) -> a critical
 *       section (a counter in shared memory, checked for a second process inside) -> release,
 *       and at once acquire again, for SECONDS (counting starts 0.5 s in). A handoff is an
 *       acquisition by another process than the last holder. Also the latency of those
 *       handoffs: from the last holder's CLOCK_MONOTONIC read just before its release call
 *       (t0, in shared memory) to the new holder's acquire returning (t1).
 *   pg_bench handoff HOST:PORT logged|unlogged|peer HANDOFFS DELAY_MS PROCS POLL_MS TAG
 *       bench/etcd's handoff measure, with PROCS - 1 waiters: the holder waits until every
 *       other process has said it is about to block in its acquire, sleeps DELAY_MS plus up to
 *       POLL_MS (uniform: the release falls anywhere in a polling waiter's sleep), reads t0 and
 *       releases; the acquire that returns next, at t1, in another process, is a handoff of
 *       latency t1 - t0. The old holder asks again only once another process holds the lock
 *       (else it could take it straight back). Until HANDOFFS handoffs.
 *       Keys start with TAG_ (both modes).
 *   pg_bench cycles HOST:PORT logged|unlogged|async|peer|sql|prep N
 *       One cycle to connect, then N more, nothing else: for strace -c, perf and the like.
 *
 * The server: postgres://dlock@HOST:PORT, databases dlock and dlock_async (made by the run
 * script; dlock_async has synchronous_commit=off). BENCH_PG_PID, the postmaster's pid, lets
 * the bench sum the server's CPU (the postmaster and its children, /proc). Each mode prints
 * key=value lines on stdout. Timings are reported, never asserted; a wrong answer (a lock not
 * acquired, a refused release, a SQL error, two holders at once) is fatal. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlock/dlock.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bench_util.h"

/* ----- small helpers ------------------------------------------------------------------------ */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU seconds of the server: the postmaster (BENCH_PG_PID) and its children (every backend,
 * the WAL writer, the checkpointer...), those that exited included (the postmaster's cutime and
 * cstime), from /proc; 0 without BENCH_PG_PID. */
static long g_pg_pid;

static double server_cpu_s(void) {
  if (g_pg_pid <= 0) return 0;
  DIR *d = opendir("/proc");
  if (d == NULL) return 0;
  unsigned long long ticks = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (p == NULL) continue;
    char state;
    long ppid, cut, cst;
    unsigned long ut, st;
    if (sscanf(p + 2, "%c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %ld %ld", &state, &ppid, &ut, &st, &cut,
               &cst) != 6) {
      continue;
    }
    if (ppid == g_pg_pid) ticks += ut + st;
    if (atol(e->d_name) == g_pg_pid) ticks += ut + st + (unsigned long)cut + (unsigned long)cst; /* + reaped children */
  }
  closedir(d);
  return (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* ----- the server and its URLs ---------------------------------------------------------------- */

static char g_host[64], g_port[16];

static void parse_hostport(const char *hp) {
  const char *colon = strrchr(hp, ':');
  if (colon == NULL || colon == hp || (size_t)(colon - hp) >= sizeof g_host || strlen(colon + 1) >= sizeof g_port) {
    die("HOST:PORT expected, got '%s'", hp);
  }
  memcpy(g_host, hp, (size_t)(colon - hp));
  g_host[colon - hp] = '\0';
  strcpy(g_port, colon + 1);
}

/* The variants of a cycle: three dlock URLs, the advisory-lock peer, dlock's SQL by hand (as
 * text each time, and prepared as dlock sends it). */
enum { V_LOGGED = 0, V_UNLOGGED = 1, V_ASYNC = 2, V_PEER = 3, V_SQL = 4, V_PREP = 5, NVARIANTS = 6 };
static const char *const kVariant[NVARIANTS] = {"logged", "unlogged", "async", "peer", "sql", "prep"};
/* The table each dlock variant uses, and its database. */
static const char *const kTable[NVARIANTS] = {"bench_logged", "bench_unlogged", "bench_logged", NULL, "bench_unlogged",
                                              "bench_unlogged"};
static const char *const kDatabase[NVARIANTS] = {"dlock", "dlock", "dlock_async", "dlock", "dlock", "dlock"};

static void dlock_url(int v, char *out, size_t cap) {
  snprintf(out, cap, "postgres://dlock@%s:%s/%s?table=%s%s", g_host, g_port, kDatabase[v], kTable[v],
           v == V_UNLOGGED ? "&unlogged=1" : "");
}

static PGconn *pg_open(const char *database, const char *app) {
  char info[256];
  snprintf(info, sizeof info, "host=%s port=%s dbname=%s user=dlock sslmode=disable application_name=%s", g_host,
           g_port, database, app);
  PGconn *c = PQconnectdb(info);
  if (PQstatus(c) != CONNECTION_OK) die("connecting to %s: %s", info, PQerrorMessage(c));
  return c;
}

/* Runs sql with text parameters; dies on an error. */
static PGresult *pg_run(PGconn *c, const char *sql, int n, const char *const *values) {
  PGresult *r = PQexecParams(c, sql, n, NULL, values, NULL, NULL, 0);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) die("%s: %s", sql, PQerrorMessage(c));
  return r;
}

/* The first column of the only row is 't'. */
static int pg_true(PGconn *c, const char *sql, int n, const char *const *values) {
  PGresult *r = pg_run(c, sql, n, values);
  if (PQntuples(r) != 1 || PQnfields(r) < 1) die("%s: %d rows", sql, PQntuples(r));
  int t = PQgetvalue(r, 0, 0)[0] == 't';
  PQclear(r);
  return t;
}

/* ----- the peer: session advisory locks ------------------------------------------------------ */

static int peer_try(PGconn *c, const char *key) {
  const char *v[1] = {key};
  return pg_true(c, "SELECT pg_try_advisory_lock($1::bigint)", 1, v);
}

static void peer_unlock(PGconn *c, const char *key) {
  const char *v[1] = {key};
  if (!pg_true(c, "SELECT pg_advisory_unlock($1::bigint)", 1, v)) die("pg_advisory_unlock(%s): not held", key);
}

/* ----- dlock's two SQL calls, by hand ---------------------------------------------------------- */

/* The statements dlock's backend sends for a one-try acquire and a release
 * (src/postgres/lock_protocol.cc: StatementsFor, LockProtocol::Acquire; keep them in step), on
 * the unlogged table and the same lock name as dlock's unlogged variant (so that both scan the
 * same dead rows): as dlock does, each hold has a fresh owner value (dlock's: a random secret
 * token of 32 hex digits) and hold id (16 hex digits), a lease of 10 s, no value, not in line. */
static const char kSqlAcquire[] =
    "SELECT acquired, fencing_token, holder_ttl_ms, why FROM \"bench_unlogged_acquire\""
    "($1, $2, $3::\"char\", $4::integer, $5::integer, $6, $7::bigint, $8::bytea, $9::bigint, $10::boolean)";
static const char kSqlRelease[] = "SELECT \"bench_unlogged_release\"($1, $2, $3)";

typedef struct {
  char hold[17], owner[33];
  uint64_t n;
} sql_hold;

/* The first column of the only row of a prepared statement's answer is 't'. */
static int pg_true_prepared(PGconn *c, const char *stmt, int n, const char *const *values) {
  PGresult *r = PQexecPrepared(c, stmt, n, values, NULL, NULL, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) die("%s: %s", stmt, PQerrorMessage(c));
  int t = PQgetvalue(r, 0, 0)[0] == 't';
  PQclear(r);
  return t;
}

/* prepared: the statements named "acquire" and "release" on c (PQprepare), else the text. */
static void sql_acquire(PGconn *c, const char *name, sql_hold *h, int prepared) {
  uint64_t x = ++h->n * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
  snprintf(h->hold, sizeof h->hold, "%016" PRIx64, x);
  snprintf(h->owner, sizeof h->owner, "%016" PRIx64 "%016" PRIx64, x * 31 + 7, h->n);
  const char *v[10] = {name, h->hold, "x", "0", "1", h->owner, "10000", NULL, "0", "f"};
  if (!(prepared ? pg_true_prepared(c, "acquire", 10, v) : pg_true(c, kSqlAcquire, 10, v))) {
    die("by-hand acquire of %s refused", name);
  }
}

static void sql_release(PGconn *c, const char *name, const sql_hold *h, int prepared) {
  const char *v[3] = {name, h->hold, h->owner};
  if (!(prepared ? pg_true_prepared(c, "release", 3, v) : pg_true(c, kSqlRelease, 3, v))) {
    die("by-hand release of %s refused", name);
  }
}

static void sql_prepare(PGconn *c) {
  PGresult *r = PQprepare(c, "acquire", kSqlAcquire, 10, NULL);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) die("PQprepare: %s", PQerrorMessage(c));
  PQclear(r);
  r = PQprepare(c, "release", kSqlRelease, 3, NULL);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) die("PQprepare: %s", PQerrorMessage(c));
  PQclear(r);
}

/* VACUUM (plain) of a lock table: its dead rows slow the functions' scans of a name's rows. */
static void vacuum(PGconn *c, const char *table) {
  char sql[128];
  snprintf(sql, sizeof sql, "VACUUM %s", table);
  PGresult *r = PQexec(c, sql);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) die("%s: %s", sql, PQerrorMessage(c));
  PQclear(r);
}

/* ----- 0. prepare ------------------------------------------------------------------------------ */

static dlock_client *open_client(const char *url) {
  dlock_client *c;
  check(dlock_client_open(url, &c), url);
  return c;
}

static int bench_prepare(void) {
  static const int kPrepared[] = {V_LOGGED, V_UNLOGGED, V_ASYNC};
  for (size_t i = 0; i < sizeof kPrepared / sizeof kPrepared[0]; i++) {
    char url[256];
    dlock_url(kPrepared[i], url, sizeof url);
    double t = now_s();
    check(dlock_backend_prepare(url, 10000), url);
    printf("prepare_%s_ms=%.0f\n", kVariant[kPrepared[i]], (now_s() - t) * 1e3);
  }
  return 0;
}

/* ----- 1. uncontended ---------------------------------------------------------------------------- */

typedef struct {
  dlock_client *c[3]; /* by variant: logged, unlogged, async */
  dlock_options *opts;
  PGconn *peer, *sql;
  PGconn *maint[2]; /* VACUUM, statistics: databases dlock and dlock_async */
  sql_hold hold;
} contender;

typedef struct {
  double rate[64], cpu_us[64], acq_us[64], rel_us[64];
  double cycles, server_cpu_s;
} side_figures;

static const char kPeerKey[] = "4242";

/* The three lock tables, vacuumed: every round starts from them so. */
static void vacuum_all(contender *k) {
  vacuum(k->maint[0], "bench_logged");
  vacuum(k->maint[0], "bench_unlogged");
  vacuum(k->maint[1], "bench_logged");
}

/* One cycle of variant v; *t_mid gets the time between its two calls. */
static void cycle(contender *k, int v, double *t_mid) {
  dlock_lock *l = NULL;
  switch (v) {
    case V_PEER:
      if (!peer_try(k->peer, kPeerKey)) die("pg_try_advisory_lock: refused, uncontended");
      *t_mid = now_s();
      peer_unlock(k->peer, kPeerKey);
      return;
    case V_SQL:
    case V_PREP:
      sql_acquire(k->sql, "bench/uncontended", &k->hold, v == V_PREP);
      *t_mid = now_s();
      sql_release(k->sql, "bench/uncontended", &k->hold, v == V_PREP);
      return;
    default:
      check(dlock_acquire(k->c[v], "bench/uncontended", k->opts, &l), "dlock_acquire");
      *t_mid = now_s();
      check(dlock_release(l), "dlock_release");
      return;
  }
}

/* One round of variant v for `seconds`: cycles/s, client CPU per cycle (all threads), the mean
 * time of the acquire call and of the release call. */
static void run_round(contender *k, int v, double seconds, side_figures *f, int r) {
  double acq = 0, rel = 0, t, cpu0 = own_cpu_s(), srv0 = server_cpu_s();
  long n = 0;
  double t0 = now_s(), t_end = t0 + seconds;
  do {
    t = now_s();
    double t1;
    cycle(k, v, &t1);
    double t2 = now_s();
    acq += t1 - t, rel += t2 - t1, t = t2;
    n++;
  } while (t < t_end);
  double el = t - t0, cpu = own_cpu_s() - cpu0;
  f->rate[r] = n / el, f->cpu_us[r] = cpu * 1e6 / n, f->acq_us[r] = acq * 1e6 / n, f->rel_us[r] = rel * 1e6 / n;
  f->cycles += n;
  f->server_cpu_s += server_cpu_s() - srv0;
}

/* What the server's statistics say. PostgreSQL 15 keeps them per backend and flushes a
 * backend's at the end of a statement at most once a second (an idle one's up to 10 s later):
 * so each reading follows a pause of more than a second and then one cycle over the connection
 * measured, whose first statement flushes everything that connection had pending. */
typedef struct {
  double wal_records, wal_bytes, wal_sync, wal_sync_ms, wal_write, commits;
  double acq_calls, acq_ms, rel_calls, rel_ms;
} pgstats;

static double wal_lsn(PGconn *mon) {
  PGresult *r = pg_run(mon, "SELECT (pg_current_wal_insert_lsn() - '0/0')::float8", 0, NULL);
  double lsn = atof(PQgetvalue(r, 0, 0));
  PQclear(r);
  return lsn;
}

static void read_stats(PGconn *mon, int v, pgstats *s) {
  char acq[64] = "", rel[64] = "";
  if (kTable[v] != NULL) {
    snprintf(acq, sizeof acq, "%s_acquire", kTable[v]);
    snprintf(rel, sizeof rel, "%s_release", kTable[v]);
  }
  const char *values[2] = {acq, rel};
  PGresult *r = pg_run(mon,
                       "SELECT w.wal_records::float8, w.wal_bytes::float8, w.wal_sync::float8, w.wal_sync_time, "
                       "w.wal_write::float8, (SELECT sum(xact_commit)::float8 FROM pg_stat_database), "
                       "coalesce((SELECT calls::float8 FROM pg_stat_user_functions WHERE funcname = $1), 0), "
                       "coalesce((SELECT total_time FROM pg_stat_user_functions WHERE funcname = $1), 0), "
                       "coalesce((SELECT calls::float8 FROM pg_stat_user_functions WHERE funcname = $2), 0), "
                       "coalesce((SELECT total_time FROM pg_stat_user_functions WHERE funcname = $2), 0) "
                       "FROM pg_stat_wal w",
                       2, values);
  if (PQntuples(r) != 1 || PQnfields(r) != 10) die("pg_stat_wal: %d rows", PQntuples(r));
  double *out[10] = {&s->wal_records, &s->wal_bytes, &s->wal_sync, &s->wal_sync_ms, &s->wal_write,
                     &s->commits,     &s->acq_calls, &s->acq_ms,   &s->rel_calls,   &s->rel_ms};
  for (int i = 0; i < 10; i++) *out[i] = atof(PQgetvalue(r, 0, i));
  PQclear(r);
}

/* Each variant alone for `seconds`, its statistics flushed before and after; per cycle. */
static void stats_pass(contender *k, double seconds, int decay_blocks) {
  PGconn **mon = k->maint;
  static const double kSettle = 1.1; /* > PGSTAT_MIN_INTERVAL (1 s) */
  double t;
  /* Everything the rounds left pending, flushed now rather than in some variant's window. */
  vacuum_all(k);
  sleep_s(kSettle);
  for (int v = 0; v < NVARIANTS; v++) cycle(k, v, &t);
  for (int v = 0; v < NVARIANTS; v++) {
    PGconn *m = mon[v == V_ASYNC];
    pgstats a, b;
    sleep_s(kSettle);
    cycle(k, v, &t); /* flushes: its acquire is counted before, its release after */
    read_stats(m, v, &a);
    double lsn0 = wal_lsn(m);
    long n = 0;
    double t0 = now_s(), t_end = t0 + seconds;
    do {
      cycle(k, v, &t);
      n++;
    } while (now_s() < t_end);
    double el = now_s() - t0;
    double lsn1 = wal_lsn(m);
    sleep_s(kSettle);
    cycle(k, v, &t);
    read_stats(m, v, &b);
    const char *p = kVariant[v];
    double c = (double)n + 1; /* the pokes' release before, acquire after */
    double syncs = b.wal_sync - a.wal_sync;
    printf("st_%s_rate=%.0f\n", p, n / el);
    printf("st_%s_wal_bytes=%.0f\nst_%s_wal_records=%.2f\nst_%s_wal_fsyncs=%.3f\nst_%s_wal_writes=%.3f\n", p,
           (lsn1 - lsn0) / n, p, (b.wal_records - a.wal_records) / c, p, syncs / c, p, (b.wal_write - a.wal_write) / c);
    printf("st_%s_fsync_ms=%.3f\n", p, syncs > 0 ? (b.wal_sync_ms - a.wal_sync_ms) / syncs : 0.0);
    printf("st_%s_fsync_us_per_cycle=%.0f\n", p, (b.wal_sync_ms - a.wal_sync_ms) * 1e3 / c);
    printf("st_%s_commits=%.2f\n", p, (b.commits - a.commits) / c);
    double ac = b.acq_calls - a.acq_calls, rc = b.rel_calls - a.rel_calls;
    printf("st_%s_fn_acquire_us=%.0f\nst_%s_fn_release_us=%.0f\nst_%s_fn_calls=%.2f/%.2f\n", p,
           ac > 0 ? (b.acq_ms - a.acq_ms) * 1e3 / ac : 0.0, p, rc > 0 ? (b.rel_ms - a.rel_ms) * 1e3 / rc : 0.0, p,
           ac / c, rc / c);
  }
  /* The dead rows this pass left (autovacuum visits a database once a minute by default). */
  for (int d = 0; d < 2; d++) {
    PGresult *r = pg_run(mon[d], "SELECT relname, n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
                                 "WHERE relname IN ('bench_logged', 'bench_unlogged') ORDER BY relname", 0, NULL);
    for (int i = 0; i < PQntuples(r); i++) {
      printf("st_dead_%s%s=%s\nst_autovacuums_%s%s=%s\n", d ? "async_" : "", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
             d ? "async_" : "", PQgetvalue(r, i, 0), PQgetvalue(r, i, 2));
    }
    PQclear(r);
  }
  /* How the dead rows slow it: dlock on the unlogged table right after a VACUUM, then on, in
   * blocks of `seconds`, nothing vacuumed meanwhile. */
  if (decay_blocks > 0) {
    if (decay_blocks > 64) decay_blocks = 64;
    vacuum(mon[0], "bench_unlogged");
    side_figures f;
    memset(&f, 0, sizeof f);
    double cycles[64];
    for (int i = 0; i < decay_blocks; i++) {
      run_round(k, V_UNLOGGED, seconds, &f, i);
      cycles[i] = f.cycles;
    }
    print_list("decay_rates", f.rate, decay_blocks, "%.0f");
    print_list("decay_cycles", cycles, decay_blocks, "%.0f");
    printf("decay_blocks=%d\ndecay_first_us=%.0f\ndecay_last_us=%.0f\n", decay_blocks, 1e6 / f.rate[0],
           1e6 / f.rate[decay_blocks - 1]);
  }
}

static void contender_open(contender *k) {
  memset(k, 0, sizeof *k);
  for (int v = 0; v < 3; v++) {
    char url[256];
    dlock_url(v, url, sizeof url);
    k->c[v] = open_client(url);
  }
  k->opts = dlock_options_new();
  if (k->opts == NULL) die("out of memory");
  check(dlock_options_set_lease_ms(k->opts, 10000), "set_lease_ms");
  check(dlock_options_set_wait_ms(k->opts, 0), "set_wait_ms");
  k->peer = pg_open("dlock", "pg_bench_peer");
  k->sql = pg_open("dlock", "pg_bench_sql");
  sql_prepare(k->sql);
  k->maint[0] = pg_open("dlock", "pg_bench_monitor");
  k->maint[1] = pg_open("dlock_async", "pg_bench_monitor");
}


static void contender_close(contender *k) {
  PQfinish(k->peer);
  PQfinish(k->sql);
  PQfinish(k->maint[0]);
  PQfinish(k->maint[1]);
  dlock_options_free(k->opts);
  for (int v = 0; v < 3; v++) dlock_client_close(k->c[v]);
}

static int bench_uncontended(double seconds, int rounds, double diag_seconds, double stats_seconds, int decay_blocks) {
  if (rounds < 1 || rounds > 64) die("rounds must be 1..64");
  contender k;
  contender_open(&k);
  side_figures f[NVARIANTS];
  /* Warm-up: connections, the server's caches, plpgsql's plans in each backend. */
  memset(f, 0, sizeof f);
  for (int v = 0; v < NVARIANTS; v++) run_round(&k, v, 0.3, &f[v], 0);
  memset(f, 0, sizeof f);

  double ratio[3][64], lib[64], protocol[64], prep[64];
  for (int r = 0; r < rounds; r++) {
    vacuum_all(&k);
    for (int i = 0; i < NVARIANTS; i++) {
      int v = r % 2 == 0 ? i : NVARIANTS - 1 - i; /* alternating order */
      if (v >= V_SQL && diag_seconds <= 0) continue;
      run_round(&k, v, v >= V_SQL ? diag_seconds : seconds, &f[v], r);
    }
    for (int v = 0; v < 3; v++) ratio[v][r] = f[v].rate[r] / f[V_PEER].rate[r];
    if (diag_seconds > 0) {
      /* dlock prepares its statements: its client's share is measured against the prepared calls. */
      lib[r] = f[V_UNLOGGED].rate[r] / f[V_PREP].rate[r];
      protocol[r] = f[V_PREP].rate[r] / f[V_PEER].rate[r];
      prep[r] = f[V_PREP].rate[r] / f[V_SQL].rate[r];
    }
  }
  printf("unc_rounds=%d\nunc_seconds=%g\nunc_diag_seconds=%g\n", rounds, seconds, diag_seconds);
  for (int v = 0; v < 3; v++) {
    char key[64];
    snprintf(key, sizeof key, "unc_%s_ratio_rounds", kVariant[v]);
    print_list(key, ratio[v], rounds, "%.2f");
    printf("unc_%s_ratio=%.2f\n", kVariant[v], median(ratio[v], rounds));
  }
  if (diag_seconds > 0) {
    printf("unc_lib_ratio=%.2f\nunc_protocol_ratio=%.2f\nunc_prep_ratio=%.2f\n", median(lib, rounds),
           median(protocol, rounds), median(prep, rounds));
  }
  for (int v = 0; v < NVARIANTS; v++) {
    if (v >= V_SQL && diag_seconds <= 0) continue;
    const char *n = kVariant[v];
    char key[64];
    snprintf(key, sizeof key, "unc_%s_rounds", n);
    print_list(key, f[v].rate, rounds, "%.0f");
    printf("unc_%s_rate=%.1f\nunc_%s_cpu_us=%.0f\nunc_%s_acquire_us=%.0f\nunc_%s_release_us=%.0f\n", n,
           median(f[v].rate, rounds), n, median(f[v].cpu_us, rounds), n, median(f[v].acq_us, rounds), n,
           median(f[v].rel_us, rounds));
    printf("unc_%s_server_cpu_us=%.0f\n", n, f[v].server_cpu_s * 1e6 / f[v].cycles);
  }
  if (stats_seconds > 0) {
    printf("st_seconds=%g\n", stats_seconds);
    stats_pass(&k, stats_seconds, decay_blocks);
  }
  contender_close(&k);
  return 0;
}

/* ----- 2. contended ------------------------------------------------------------------------------ */

enum { MAXPROCS = 16, MAXLAT = 65536 };

typedef struct {
  long acquisitions; /* counted (acquired inside the window; handoff mode: the handoffs) */
  long handoffs;     /* of which from another process */
  double tries;      /* dlock: attempts of the counted acquires; peer: try calls */
  double cpu_s;      /* the process's CPU over its whole run */
  int nlat;
} proc_figures;

/* Shared by the processes (one anonymous shared mapping). */
typedef struct {
  int procs;
  int ready, go;          /* __atomic */
  int64_t t_count_ns, t_end_ns; /* free: the counted window */
  int target;             /* handoff: how many */
  int handoffs;           /* __atomic: handoff mode's count so far */
  int stop;               /* __atomic */
  int waiting;            /* __atomic: processes about to block in their acquire */
  int inside;             /* __atomic: 1 inside the critical section */
  long violations;        /* __atomic: two inside at once */
  volatile long counter;  /* the critical section's work */
  long total;             /* __atomic: every acquisition, counted or not */
  int last_holder;        /* __atomic: -1 none yet */
  int64_t t_release_ns;   /* __atomic: the last holder's t0, read just before its release call */
  proc_figures proc[MAXPROCS];
  double lat[MAXPROCS][MAXLAT]; /* each process's handoff latencies, seconds */
} board;

typedef struct {
  int side; /* V_LOGGED, V_UNLOGGED or V_PEER */
  double poll_s;
  dlock_client *c;
  dlock_options *wait_forever;
  dlock_lock *held;
  PGconn *pg;
  double tries;
} party;

static const char kContendedName[] = "bench/contended";
static const char kContendedKey[] = "4243";

static void take(party *p) {
  if (p->side == V_PEER) {
    for (;;) { /* the common loop: try, and sleep between tries */
      p->tries++;
      if (peer_try(p->pg, kContendedKey)) return;
      sleep_s(p->poll_s);
    }
  }
  check(dlock_acquire(p->c, kContendedName, p->wait_forever, &p->held), "dlock_acquire");
  p->tries += dlock_lock_attempts(p->held);
}

static void give(party *p) {
  if (p->side == V_PEER) {
    peer_unlock(p->pg, kContendedKey);
    return;
  }
  check(dlock_release(p->held), "dlock_release");
  p->held = NULL;
}

static int load(const int *x) { return __atomic_load_n(x, __ATOMIC_SEQ_CST); }

/* Right after an acquire returned at t1: the critical section (the counter, checked for a second
 * process inside), and the board's record of who holds it. Returns the last holder before this
 * one; *t0 gets its release's t0. */
static int critical_section(board *b, int me, int64_t *t0) {
  if (__atomic_exchange_n(&b->inside, 1, __ATOMIC_SEQ_CST) != 0) __atomic_add_fetch(&b->violations, 1, __ATOMIC_SEQ_CST);
  b->counter = b->counter + 1;
  int prev = load(&b->last_holder);
  *t0 = __atomic_load_n(&b->t_release_ns, __ATOMIC_SEQ_CST);
  __atomic_store_n(&b->last_holder, me, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&b->total, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&b->inside, 0, __ATOMIC_SEQ_CST);
  return prev;
}

/* free: acquire -> critical section -> release, again at once, until t_end. */
static void loop_free(board *b, int me, party *p) {
  proc_figures *f = &b->proc[me];
  while (now_ns() < b->t_end_ns) {
    double tries0 = p->tries;
    take(p);
    int64_t t1 = now_ns(), t0;
    int prev = critical_section(b, me, &t0);
    if (t1 >= b->t_count_ns && t1 < b->t_end_ns) {
      f->acquisitions++;
      f->tries += p->tries - tries0;
      if (prev >= 0 && prev != me) {
        f->handoffs++;
        if (f->nlat < MAXLAT) b->lat[me][f->nlat++] = (double)(t1 - t0) / 1e9;
      }
    }
    __atomic_store_n(&b->t_release_ns, now_ns(), __ATOMIC_SEQ_CST); /* t0 */
    give(p);
  }
}

/* handoff (bench/etcd's measure, with every other process waiting): the holder waits until all
 * the others have said they are about to block in their acquire, sleeps delay_s plus up to
 * jitter_s (so that the release falls at a random point of a polling waiter's sleep), reads t0
 * and releases; an acquire returning at t1 from another process is a handoff of latency t1 - t0.
 * The old holder asks again only once another process has the lock: else it could take it
 * straight back. Until target handoffs. */
static void loop_handoff(board *b, int me, party *p, double delay_s, double jitter_s) {
  proc_figures *f = &b->proc[me];
  unsigned seed = (unsigned)getpid();
  for (;;) {
    if (load(&b->stop)) return;
    __atomic_add_fetch(&b->waiting, 1, __ATOMIC_SEQ_CST);
    double tries0 = p->tries;
    take(p);
    int64_t t1 = now_ns(), t0;
    __atomic_sub_fetch(&b->waiting, 1, __ATOMIC_SEQ_CST);
    int prev = critical_section(b, me, &t0);
    if (load(&b->stop)) {
      give(p);
      return;
    }
    if (prev >= 0 && prev != me) {
      f->acquisitions++;
      f->handoffs++;
      f->tries += p->tries - tries0;
      if (f->nlat < MAXLAT) b->lat[me][f->nlat++] = (double)(t1 - t0) / 1e9;
      if (__atomic_add_fetch(&b->handoffs, 1, __ATOMIC_SEQ_CST) >= b->target) {
        __atomic_store_n(&b->stop, 1, __ATOMIC_SEQ_CST);
        give(p);
        return;
      }
    }
    while (load(&b->waiting) < b->procs - 1 && !load(&b->stop)) sleep_s(0.0001);
    sleep_s(delay_s + jitter_s * (double)rand_r(&seed) / RAND_MAX);
    __atomic_store_n(&b->t_release_ns, now_ns(), __ATOMIC_SEQ_CST); /* t0 */
    give(p);
    while (load(&b->last_holder) == me && !load(&b->stop)) sleep_s(0.0001);
  }
}

static void contend(board *b, int me, int side, double poll_s, int handoff, double delay_s, double jitter_s) {
  party p;
  memset(&p, 0, sizeof p);
  p.side = side, p.poll_s = poll_s;
  if (side == V_PEER) {
    p.pg = pg_open("dlock", "pg_bench_peer");
  } else {
    char url[256];
    dlock_url(side, url, sizeof url);
    p.c = open_client(url);
    p.wait_forever = dlock_options_new();
    if (p.wait_forever == NULL) die("out of memory");
    check(dlock_options_set_lease_ms(p.wait_forever, 10000), "set_lease_ms");
    check(dlock_options_set_wait_ms(p.wait_forever, -1), "set_wait_ms");
    /* Its pooled connection, before the start (its LISTEN connection comes with its first
     * wait: in the free loop's warm-up, in the handoff loop's first, uncounted, take). */
    char warm[64];
    snprintf(warm, sizeof warm, "bench/contended/warm/%d", me);
    dlock_lock *l;
    check(dlock_acquire(p.c, warm, NULL, &l), "warm-up acquire");
    check(dlock_release(l), "warm-up release");
  }
  __atomic_add_fetch(&b->ready, 1, __ATOMIC_SEQ_CST);
  while (!load(&b->go)) sleep_s(0.001);
  double cpu0 = own_cpu_s();
  if (handoff) {
    loop_handoff(b, me, &p, delay_s, jitter_s);
  } else {
    loop_free(b, me, &p);
  }
  b->proc[me].cpu_s = own_cpu_s() - cpu0;
  if (side == V_PEER) {
    PQfinish(p.pg);
  } else {
    dlock_options_free(p.wait_forever);
    dlock_client_close(p.c);
  }
}

/* mode "free": amount = seconds; mode "handoff": amount = handoffs. */
static int bench_contended(const char *side_name, const char *mode, double amount, double delay_ms, int procs,
                           double poll_ms, const char *tag) {
  int side = strcmp(side_name, "logged") == 0     ? V_LOGGED
             : strcmp(side_name, "unlogged") == 0 ? V_UNLOGGED
             : strcmp(side_name, "peer") == 0     ? V_PEER
                                                  : -1;
  if (side < 0) die("side must be logged, unlogged or peer");
  if (procs < 2 || procs > MAXPROCS) die("procs must be 2..%d", MAXPROCS);
  int handoff = strcmp(mode, "handoff") == 0;
  if (handoff && (amount < 1 || amount > MAXLAT)) die("handoffs must be 1..%d", MAXLAT);
  if (side != V_PEER) { /* from freshly vacuumed tables, as the uncontended rounds */
    PGconn *m = pg_open("dlock", "pg_bench_monitor");
    vacuum(m, kTable[side]);
    PQfinish(m);
  }
  board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) die("mmap: %s", strerror(errno));
  memset(b, 0, sizeof *b);
  b->procs = procs;
  b->last_holder = -1;
  b->target = handoff ? (int)amount : 0;
  /* The jitter: one polling interval (the peer), so that a release falls anywhere in its sleep. */
  double delay_s = delay_ms / 1e3, jitter_s = poll_ms / 1e3;
  fflush(stdout);
  pid_t pids[MAXPROCS];
  for (int i = 0; i < procs; i++) {
    pids[i] = fork();
    if (pids[i] < 0) die("fork: %s", strerror(errno));
    if (pids[i] == 0) {
      static char who[64];
      snprintf(who, sizeof who, "pg_bench %s (process %d)", mode, i);
      bench_who = who;
      contend(b, i, side, poll_ms / 1e3, handoff, delay_s, jitter_s);
      fflush(stdout);
      _exit(0);
    }
  }
  /* Waits for every process, up to `limit` s from now; kills them all past it (a waiter never
   * woken, a wedged call) and dies saying so. */
  int exited[MAXPROCS] = {0};
  int left = procs;
  double t_ready = now_s();
  while (load(&b->ready) < procs) {
    if (now_s() - t_ready > 30) {
      for (int i = 0; i < procs; i++) kill(pids[i], SIGKILL);
      die("the processes did not get ready in 30 s");
    }
    int status;
    if (waitpid(-1, &status, WNOHANG) > 0) die("a process died before the start");
    sleep_s(0.005);
  }
  static const double kWarm = 0.5;
  double seconds = handoff ? 0 : amount;
  int64_t t_go = now_ns();
  b->t_count_ns = t_go + (int64_t)((handoff ? 0 : kWarm) * 1e9);
  b->t_end_ns = b->t_count_ns + (int64_t)(seconds * 1e9);
  double srv0 = server_cpu_s(), t_start = now_s(), srv1 = 0, t_stop = 0;
  __atomic_store_n(&b->go, 1, __ATOMIC_SEQ_CST);
  if (!handoff) {
    sleep_s((double)(b->t_count_ns - now_ns()) / 1e9);
    srv0 = server_cpu_s(), t_start = now_s();
    sleep_s((double)(b->t_end_ns - now_ns()) / 1e9);
    srv1 = server_cpu_s(), t_stop = now_s();
  }
  double limit = handoff ? amount * (delay_ms + poll_ms + 200) / 1e3 + 30 : seconds + kWarm + 30;
  int failed = -1;
  while (left > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int i = 0; i < procs; i++) {
        if (pids[i] == pid) {
          exited[i] = 1, left--;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = i;
        }
      }
      if (handoff && t_stop == 0 && load(&b->stop)) srv1 = server_cpu_s(), t_stop = now_s();
      continue;
    }
    if (handoff && t_stop == 0 && load(&b->stop)) srv1 = server_cpu_s(), t_stop = now_s();
    if (now_s() - t_start > limit) {
      for (int i = 0; i < procs; i++) {
        if (!exited[i]) kill(pids[i], SIGKILL);
      }
      die("%s %s: stuck after %.0f s (%d handoffs, %ld acquisitions, waiting %d, last holder %d)", mode, side_name,
          limit, load(&b->handoffs), b->total, load(&b->waiting), load(&b->last_holder));
    }
    sleep_s(0.005);
  }
  if (failed >= 0) die("contending process %d failed", failed);
  if (handoff) seconds = t_stop - t_start;

  long acq = 0, ho = 0, violations = __atomic_load_n(&b->violations, __ATOMIC_SEQ_CST);
  double tries = 0, cpu = 0, share[MAXPROCS];
  int nlat = 0;
  static double lat[MAXPROCS * MAXLAT];
  for (int i = 0; i < procs; i++) {
    acq += b->proc[i].acquisitions, ho += b->proc[i].handoffs, tries += b->proc[i].tries, cpu += b->proc[i].cpu_s;
    memcpy(lat + nlat, b->lat[i], sizeof(double) * (size_t)b->proc[i].nlat);
    nlat += b->proc[i].nlat;
  }
  for (int i = 0; i < procs; i++) share[i] = acq > 0 ? 100.0 * (double)b->proc[i].acquisitions / (double)acq : 0;
  qsort(lat, (size_t)nlat, sizeof *lat, cmp_double);
  double mean = 0;
  for (int i = 0; i < nlat; i++) mean += lat[i];
  mean = nlat > 0 ? mean / nlat : 0;
  if (b->counter != b->total) violations++;
  const char *t = tag;
  printf("%s_side=%s\n%s_mode=%s\n%s_procs=%d\n%s_seconds=%.1f\n%s_poll_ms=%g\n", t, side_name, t, mode, t, procs, t,
         seconds, t, poll_ms);
  if (handoff) printf("%s_delay_ms=%g\n%s_jitter_ms=%g\n", t, delay_ms, t, poll_ms);
  printf("%s_acq_rate=%.1f\n%s_handoff_rate=%.1f\n%s_handoff_pct=%.0f\n", t, acq / seconds, t, ho / seconds, t,
         acq > 0 ? 100.0 * (double)ho / (double)acq : 0);
  printf("%s_lat_n=%d\n%s_p50_ms=%.2f\n%s_p90_ms=%.2f\n%s_p99_ms=%.2f\n%s_min_ms=%.2f\n%s_max_ms=%.2f\n%s_mean_ms=%.2f\n",
         t, nlat, t, quantile(lat, nlat, 0.5) * 1e3, t, quantile(lat, nlat, 0.9) * 1e3, t,
         quantile(lat, nlat, 0.99) * 1e3, t, nlat ? lat[0] * 1e3 : 0, t, nlat ? lat[nlat - 1] * 1e3 : 0, t, mean * 1e3);
  printf("%s_tries=%.2f\n%s_share=", t, acq > 0 ? tries / (double)acq : 0, t);
  for (int i = 0; i < procs; i++) printf("%s%.0f", i ? "/" : "", share[i]);
  printf("\n%s_violations=%ld\n%s_counter=%ld\n%s_total=%ld\n", t, violations, t, (long)b->counter, t, b->total);
  /* Per acquisition counted; in the handoff loop, per handoff (the waits' polls included). */
  printf("%s_client_cpu_us=%.0f\n%s_server_cpu_us=%.0f\n%s_server_cpu_pct=%.0f\n", t, acq > 0 ? cpu * 1e6 / acq : 0, t,
         acq > 0 ? (srv1 - srv0) * 1e6 / acq : 0, t, seconds > 0 ? (srv1 - srv0) * 100 / seconds : 0);
  if (violations != 0) {
    die("mutual exclusion broken: %ld overlaps (counter %ld, acquisitions %ld)", violations, (long)b->counter, b->total);
  }
  munmap(b, sizeof *b);
  return 0;
}

/* ----- cycles: for strace and perf ---------------------------------------------------------------- */

static int bench_cycles(const char *variant, long n) {
  int v = -1;
  for (int i = 0; i < NVARIANTS; i++) {
    if (strcmp(variant, kVariant[i]) == 0) v = i;
  }
  if (v < 0) die("variant must be logged, unlogged, async, peer, sql or prep");
  contender k;
  contender_open(&k);
  double t;
  for (long i = 0; i <= n; i++) cycle(&k, v, &t);
  contender_close(&k);
  return 0;
}

int main(int argc, char **argv) {
  bench_who = "pg_bench";
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *pid = getenv("BENCH_PG_PID");
  g_pg_pid = pid != NULL ? atol(pid) : 0;
  if (argc == 3 && strcmp(argv[1], "prepare") == 0) {
    parse_hostport(argv[2]);
    return bench_prepare();
  }
  if (argc == 8 && strcmp(argv[1], "uncontended") == 0) {
    parse_hostport(argv[2]);
    return bench_uncontended(atof(argv[3]), atoi(argv[4]), atof(argv[5]), atof(argv[6]), atoi(argv[7]));
  }
  if (argc == 8 && strcmp(argv[1], "free") == 0) {
    parse_hostport(argv[2]);
    return bench_contended(argv[3], "free", atof(argv[4]), 0, atoi(argv[5]), atof(argv[6]), argv[7]);
  }
  if (argc == 9 && strcmp(argv[1], "handoff") == 0) {
    parse_hostport(argv[2]);
    return bench_contended(argv[3], "handoff", atof(argv[4]), atof(argv[5]), atoi(argv[6]), atof(argv[7]), argv[8]);
  }
  if (argc == 5 && strcmp(argv[1], "cycles") == 0) {
    parse_hostport(argv[2]);
    return bench_cycles(argv[3], atol(argv[4]));
  }
  fprintf(stderr,
          "usage: pg_bench prepare HOST:PORT\n"
          "       pg_bench uncontended HOST:PORT SECONDS ROUNDS DIAG_SECONDS STATS_SECONDS DECAY_BLOCKS\n"
          "       pg_bench free HOST:PORT logged|unlogged|peer SECONDS PROCS POLL_MS TAG\n"
          "       pg_bench handoff HOST:PORT logged|unlogged|peer HANDOFFS DELAY_MS PROCS POLL_MS TAG\n"
          "       pg_bench cycles HOST:PORT logged|unlogged|async|peer|sql|prep N\n");
  return 2;
}
