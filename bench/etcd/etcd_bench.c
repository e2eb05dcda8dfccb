/* The etcd benchmark's C side (bench/etcd/run drives it): dlock's etcd:// backend through the
 * public C API, side by side with etcd's own lock service (v3lock: /v3/lock/lock and
 * /v3/lock/unlock) spoken by hand over the same JSON gateway with libcurl.
 *
 *   etcd_bench uncontended URL SECONDS ROUNDS [DIAG_SECONDS]
 *       One thread, blocking calls. Per round, for SECONDS each, in alternating order:
 *       dlock_acquire (wait 0, lease 10 s) + dlock_release on one name; and v3lock lock +
 *       unlock on another name with one session lease (granted once, TTL 60 s, kept alive by
 *       a thread every TTL/3, as etcdctl's session does). With DIAG_SECONDS, in the same
 *       rounds: dlock's two transactions sent by hand (txn) and a plain put + delete (kv).
 *       Medians over ROUNDS; the ratio is the median of the per-round ratios. Also: what each
 *       variant asks of etcd per cycle (the first endpoint's /metrics: gRPC messages by
 *       method, time in gRPC handlers, raft proposals, WAL fsyncs, mvcc ops) and the CPU
 *       the client and the members spend per cycle.
 *   etcd_bench handoff URL HANDOFFS DELAY_MS BLOCK
 *       Two processes (this one and a forked child) pass one lock back and forth: the holder
 *       waits until the other has said it is about to block in an acquire, sleeps DELAY_MS
 *       (so that the waiter is really blocked), reads CLOCK_MONOTONIC (t0), releases, and
 *       sends t0 down a pipe; the waiter's blocking acquire returns at t1; latency t1 - t0.
 *       The roles alternate at every handoff. dlock (acquire with wait -1) and v3lock (a lock
 *       call that blocks in etcd) take turns in blocks of BLOCK handoffs until each side has
 *       HANDOFFS; p50/p99 over both processes' figures, and what etcd got per handoff.
 *   etcd_bench hold URL LOCKS HOLD_S
 *       One client acquires LOCKS distinct locks (lease 10 s, heartbeat lease/3 = default;
 *       acquired async, 64 in flight, to get there quickly), then holds them HOLD_S: the
 *       process's CPU over the hold (getrusage, all threads) as % of one core, RSS per lock,
 *       requests etcd got during the hold, and proof that the leases were kept alive.
 *   etcd_bench cycles URL dlock|v3lock CYCLES
 *       One lock+unlock to connect, then CYCLES more, nothing else: for strace -c and the
 *       like (the difference of two CYCLES cancels connecting and closing).
 *
 * URL is an etcd:// URL (plain http endpoints); the v3lock side and /metrics use its first
 * endpoint, the one dlock talks to first. Each mode prints key=value lines on stdout.
 * Timings are reported, never asserted; a wrong answer (a lock not acquired, a refused
 * release, an HTTP error) is fatal. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <dlock/dlock.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bench_util.h"

/* ----- small helpers ------------------------------------------------------------------------ */

/* CPU seconds of this process and its waited-for children. */
static double total_cpu_s(void) {
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  getrusage(RUSAGE_CHILDREN, &b);
  return (double)(a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec) +
         (double)(a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec + b.ru_stime.tv_usec) / 1e6;
}

static void b64(const char *in, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(in), o = 0;
  const unsigned char *s = (const unsigned char *)in;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? t[v & 63] : '=';
  }
  out[o] = '\0';
}

/* ----- the URL's endpoints ------------------------------------------------------------------ */

static char g_endpoints[3][64]; /* "127.0.0.1:P" */
static int g_nendpoints;

static void parse_url(const char *url) {
  if (strncmp(url, "etcd://", 7) != 0) die("not an etcd:// URL: %s", url);
  const char *p = url + 7;
  while (*p != '\0' && *p != '?' && *p != '/' && g_nendpoints < 3) {
    size_t n = strcspn(p, ",?/");
    if (n == 0 || n >= sizeof g_endpoints[0]) die("bad endpoint in %s", url);
    memcpy(g_endpoints[g_nendpoints], p, n);
    g_endpoints[g_nendpoints++][n] = '\0';
    p += n;
    if (*p == ',') p++;
  }
  if (g_nendpoints == 0) die("no endpoint in %s", url);
}

/* ----- HTTP (libcurl, one kept-alive connection per handle) ----------------------------------- */

typedef struct {
  CURL *curl;
  char *buf;
  size_t len, cap;
} http;

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
  http *h = arg;
  size_t add = size * n;
  if (h->len + add + 1 > h->cap) {
    while (h->len + add + 1 > h->cap) h->cap = h->cap ? h->cap * 2 : 4096;
    h->buf = realloc(h->buf, h->cap);
    if (h->buf == NULL) die("out of memory");
  }
  memcpy(h->buf + h->len, data, add);
  h->len += add;
  h->buf[h->len] = '\0';
  return add;
}

static void http_init(http *h) {
  memset(h, 0, sizeof *h);
  h->curl = curl_easy_init();
  if (h->curl == NULL) die("curl_easy_init failed");
  curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, h);
  curl_easy_setopt(h->curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
  static struct curl_slist *headers;
  if (headers == NULL) headers = curl_slist_append(NULL, "Content-Type: application/json");
  curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, headers);
}

static void http_free(http *h) {
  curl_easy_cleanup(h->curl);
  free(h->buf);
}

/* POSTs body (or GETs, body NULL) to http://ENDPOINT/path; the answer is in h->buf. Dies on a
 * transport error or a status other than 200. */
static const char *http_call(http *h, const char *endpoint, const char *path, const char *body) {
  char url[256];
  snprintf(url, sizeof url, "http://%s%s", endpoint, path);
  h->len = 0;
  if (h->buf != NULL) h->buf[0] = '\0';
  curl_easy_setopt(h->curl, CURLOPT_URL, url);
  if (body != NULL) {
    curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body);
  } else {
    curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
  }
  CURLcode rc = curl_easy_perform(h->curl);
  if (rc != CURLE_OK) die("%s: %s", url, curl_easy_strerror(rc));
  long code = 0;
  curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) die("%s answered %ld: %s", url, code, h->buf ? h->buf : "");
  return h->buf != NULL ? h->buf : "";
}

/* Copies the string value of the first "field":"..." in a JSON answer (no escapes in what we
 * read) to out; 0 when there is none (or it does not fit). */
static int json_str(const char *json, const char *field, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", field);
  const char *p = strstr(json, pat);
  if (p == NULL) return 0;
  p += strlen(pat);
  size_t n = strcspn(p, "\"");
  if (n >= cap) return 0;
  memcpy(out, p, n);
  out[n] = '\0';
  return 1;
}

/* ----- etcd's /metrics ----------------------------------------------------------------------- */

/* The sum of the values of the lines of text that start with name and contain every one of
 * the filters (NULL-terminated). */
static double metric(const char *text, const char *name, ...) {
  double sum = 0;
  size_t nlen = strlen(name);
  for (const char *line = text; *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > nlen && strncmp(line, name, nlen) == 0 && (line[nlen] == ' ' || line[nlen] == '{')) {
      int ok = 1;
      va_list ap;
      va_start(ap, name);
      for (const char *f; ok && (f = va_arg(ap, const char *)) != NULL;) {
        const char *hit = memmem(line, len, f, strlen(f));
        ok = hit != NULL;
      }
      va_end(ap);
      if (ok) {
        const char *sp = memrchr(line, ' ', len);
        if (sp != NULL) sum += strtod(sp + 1, NULL);
      }
    }
    if (end == NULL) break;
    line = end + 1;
  }
  return sum;
}

/* What one side asks of etcd, read off the first endpoint's /metrics. */
static const char *const kMethods[] = {"Txn",        "Range",           "Put",        "DeleteRange",
                                       "LeaseGrant", "LeaseKeepAlive",  "LeaseTimeToLive",
                                       "LeaseRevoke", "Watch",          "Lock",       "Unlock"};
#define NMETHODS (sizeof kMethods / sizeof kMethods[0])
typedef struct {
  double grpc[NMETHODS];  /* gRPC messages received, by method */
  double handling_s;      /* time in gRPC handlers, all methods (etcd --metrics extensive) */
  double proposals;       /* raft proposals committed (every write is one) */
  double fsyncs;          /* WAL fsyncs on this member */
  double mvcc_put, mvcc_delete, mvcc_range, mvcc_txn;
  double cpu_s;           /* the member's process CPU */
} counters;

static void read_counters(http *h, const char *endpoint, counters *c) {
  const char *m = http_call(h, endpoint, "/metrics", NULL);
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NMETHODS; i++) {
    char f[64];
    snprintf(f, sizeof f, "grpc_method=\"%s\"", kMethods[i]);
    c->grpc[i] = metric(m, "grpc_server_msg_received_total", f, (const char *)NULL);
    c->handling_s += metric(m, "grpc_server_handling_seconds_sum", f, (const char *)NULL);
  }
  c->proposals = metric(m, "etcd_server_proposals_committed_total", (const char *)NULL);
  c->fsyncs = metric(m, "etcd_disk_wal_fsync_duration_seconds_count", (const char *)NULL);
  c->mvcc_put = metric(m, "etcd_debugging_mvcc_put_total", (const char *)NULL);
  c->mvcc_delete = metric(m, "etcd_debugging_mvcc_delete_total", (const char *)NULL);
  c->mvcc_range = metric(m, "etcd_debugging_mvcc_range_total", (const char *)NULL);
  c->mvcc_txn = metric(m, "etcd_debugging_mvcc_txn_total", (const char *)NULL);
  c->cpu_s = metric(m, "process_cpu_seconds_total", (const char *)NULL);
}

static void add_delta(counters *sum, const counters *a, const counters *b) {
  for (size_t i = 0; i < NMETHODS; i++) sum->grpc[i] += b->grpc[i] - a->grpc[i];
  sum->handling_s += b->handling_s - a->handling_s;
  sum->proposals += b->proposals - a->proposals;
  sum->fsyncs += b->fsyncs - a->fsyncs;
  sum->mvcc_put += b->mvcc_put - a->mvcc_put;
  sum->mvcc_delete += b->mvcc_delete - a->mvcc_delete;
  sum->mvcc_range += b->mvcc_range - a->mvcc_range;
  sum->mvcc_txn += b->mvcc_txn - a->mvcc_txn;
  sum->cpu_s += b->cpu_s - a->cpu_s;
}

/* One line "PREFIX_requests=Txn 2.00, LeaseKeepAlive 0.01" of what c holds per unit of n;
 * one key per figure too. */
static void print_counters(const char *prefix, const counters *c, double n) {
  printf("%s_requests=", prefix);
  int first = 1;
  for (size_t i = 0; i < NMETHODS; i++) {
    if (c->grpc[i] / n < 0.005) continue;
    printf("%s%s %.2f", first ? "" : ", ", kMethods[i], c->grpc[i] / n);
    first = 0;
  }
  if (first) printf("none");
  putchar('\n');
  printf("%s_proposals=%.2f\n%s_fsyncs=%.2f\n", prefix, c->proposals / n, prefix, c->fsyncs / n);
  printf("%s_grpc_us=%.0f\n", prefix, c->handling_s * 1e6 / n);
  printf("%s_mvcc=put %.2f, delete %.2f, txn %.2f, range %.2f\n", prefix, c->mvcc_put / n,
         c->mvcc_delete / n, c->mvcc_txn / n, c->mvcc_range / n);
}

/* ----- v3lock: etcd's lock service over the gateway, by hand ---------------------------------- */

/* One session, as etcdctl's: a lease granted once and kept alive every TTL/3 by a thread of
 * its own (its own connection), until v3_close revokes it. */
typedef struct {
  http h;           /* lock and unlock */
  const char *endpoint;
  char lease[32];   /* decimal ID, as the gateway writes it */
  int ttl_s;
  pthread_t keeper;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  long keepalives;
} v3session;

static void *keep_alive(void *arg) {
  v3session *s = arg;
  http h;
  http_init(&h);
  char body[96];
  snprintf(body, sizeof body, "{\"ID\":\"%s\"}", s->lease);
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += s->ttl_s / 3 > 0 ? s->ttl_s / 3 : 1;
    while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {
    }
    if (s->stop) break;
    pthread_mutex_unlock(&s->mu);
    const char *a = http_call(&h, s->endpoint, "/v3/lease/keepalive", body);
    if (strstr(a, "\"TTL\"") == NULL) die("v3lock session keepalive: %s", a);
    pthread_mutex_lock(&s->mu);
    s->keepalives++;
  }
  pthread_mutex_unlock(&s->mu);
  http_free(&h);
  return NULL;
}

static void v3_open(v3session *s, const char *endpoint, int ttl_s) {
  memset(s, 0, sizeof *s);
  http_init(&s->h);
  s->endpoint = endpoint;
  s->ttl_s = ttl_s;
  char body[64];
  snprintf(body, sizeof body, "{\"TTL\":%d}", ttl_s);
  const char *a = http_call(&s->h, endpoint, "/v3/lease/grant", body);
  if (!json_str(a, "ID", s->lease, sizeof s->lease)) die("lease grant: %s", a);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->keeper, NULL, keep_alive, s) != 0) die("pthread_create failed");
}

static void v3_close(v3session *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->keeper, NULL);
  char body[96];
  snprintf(body, sizeof body, "{\"ID\":\"%s\"}", s->lease);
  http_call(&s->h, s->endpoint, "/v3/lease/revoke", body);
  http_free(&s->h);
}

/* Blocks until held; key gets the lock's key (base64). */
static void v3_lock(v3session *s, const char *name_b64, char *key, size_t cap) {
  char body[256];
  snprintf(body, sizeof body, "{\"name\":\"%s\",\"lease\":\"%s\"}", name_b64, s->lease);
  const char *a = http_call(&s->h, s->endpoint, "/v3/lock/lock", body);
  if (!json_str(a, "key", key, cap)) die("v3lock lock: %s", a);
}

static void v3_unlock(v3session *s, const char *key) {
  char body[256];
  snprintf(body, sizeof body, "{\"key\":\"%s\"}", key);
  const char *a = http_call(&s->h, s->endpoint, "/v3/lock/unlock", body);
  if (strstr(a, "\"header\"") == NULL) die("v3lock unlock: %s", a);
}

/* ----- diagnostics: dlock's own requests, sent by hand ------------------------------------------- */

/* The two transactions dlock's etcd backend sends per cycle (src/etcd/gateway.cc:
 * CreateIfAbsentTxn, IfOwnedDeleteTxn), byte for byte in shape, with a session's lease: the
 * server's cost of dlock's protocol without dlock's client. */
static void txn_acquire(v3session *s, const char *key_b64, const char *value_b64, char *rev, size_t cap) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"compare\":[{\"create_revision\":\"0\",\"key\":\"%s\",\"result\":\"EQUAL\",\"target\":\"CREATE\"}],"
           "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}],"
           "\"success\":[{\"request_put\":{\"key\":\"%s\",\"lease\":\"%s\",\"value\":\"%s\"}}]}",
           key_b64, key_b64, key_b64, s->lease, value_b64);
  const char *a = http_call(&s->h, s->endpoint, "/v3/kv/txn", body);
  if (strstr(a, "\"succeeded\":true") == NULL || !json_str(a, "revision", rev, cap)) die("txn acquire: %s", a);
}

static void txn_release(v3session *s, const char *key_b64, const char *value_b64, const char *rev) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\",\"target\":\"VALUE\",\"value\":\"%s\"},"
           "{\"create_revision\":\"%s\",\"key\":\"%s\",\"result\":\"EQUAL\",\"target\":\"CREATE\"}],"
           "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}}]}",
           key_b64, value_b64, rev, key_b64, key_b64);
  const char *a = http_call(&s->h, s->endpoint, "/v3/kv/txn", body);
  if (strstr(a, "\"succeeded\":true") == NULL) die("txn release: %s", a);
}

/* The floor: a plain put on the lease and a plain delete, no condition (not a lock). */
static void kv_put(v3session *s, const char *key_b64, const char *value_b64) {
  char body[512];
  snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%s\"}", key_b64, value_b64,
           s->lease);
  http_call(&s->h, s->endpoint, "/v3/kv/put", body);
}

static void kv_delete(v3session *s, const char *key_b64) {
  char body[512];
  snprintf(body, sizeof body, "{\"key\":\"%s\"}", key_b64);
  http_call(&s->h, s->endpoint, "/v3/kv/deleterange", body);
}

/* ----- 1. uncontended ------------------------------------------------------------------------ */

/* What a cycle is, by variant: the two compared, then the diagnostics. */
enum { V_DLOCK = 0, V_V3 = 1, V_TXN = 2, V_KV = 3, NVARIANTS = 4 };
static const char *const kVariant[NVARIANTS] = {"dlock", "v3", "txn", "kv"};

typedef struct {
  double rate[64], cpu_us[64], acq_us[64], rel_us[64];
  double cycles;
  counters req;        /* the first endpoint's counters (where the requests go) */
  double server_cpu_s; /* all members */
} side_figures;

typedef struct {
  dlock_client *c;
  v3session s;
  char v3name[128], txn_key[128], txn_value[128], kv_key[128];
} contender;

static dlock_client *open_client(const char *url) {
  dlock_client *c;
  check(dlock_client_open(url, &c), "dlock_client_open");
  return c;
}

/* One round of variant v for `seconds`: cycles/s, client CPU per cycle (all threads), and the
 * mean time of the acquire (lock) call and of the release (unlock) call. */
static void run_round(contender *k, int v, double seconds, side_figures *f, int r) {
  double acq = 0, rel = 0, t, cpu0 = own_cpu_s();
  long n = 0;
  char key[256];
  double t0 = now_s(), t_end = t0 + seconds;
  do {
    dlock_lock *l = NULL;
    t = now_s();
    switch (v) {
      case V_DLOCK: check(dlock_acquire(k->c, "bench/uncontended/dlock", NULL, &l), "dlock_acquire"); break;
      case V_V3: v3_lock(&k->s, k->v3name, key, sizeof key); break;
      case V_TXN: txn_acquire(&k->s, k->txn_key, k->txn_value, key, sizeof key); break;
      default: kv_put(&k->s, k->kv_key, k->txn_value); break;
    }
    double t1 = now_s();
    switch (v) {
      case V_DLOCK: check(dlock_release(l), "dlock_release"); break;
      case V_V3: v3_unlock(&k->s, key); break;
      case V_TXN: txn_release(&k->s, k->txn_key, k->txn_value, key); break;
      default: kv_delete(&k->s, k->kv_key); break;
    }
    double t2 = now_s();
    acq += t1 - t, rel += t2 - t1, t = t2;
    n++;
  } while (t < t_end);
  double el = t - t0, cpu = own_cpu_s() - cpu0;
  f->rate[r] = n / el, f->cpu_us[r] = cpu * 1e6 / n, f->acq_us[r] = acq * 1e6 / n, f->rel_us[r] = rel * 1e6 / n;
  f->cycles += n;
}

static int bench_uncontended(const char *url, double seconds, int rounds, double diag_seconds) {
  if (rounds < 1 || rounds > 64) die("rounds must be 1..64");
  const char *ep = g_endpoints[0];
  contender k;
  memset(&k, 0, sizeof k);
  k.c = open_client(url);
  v3_open(&k.s, ep, 60); /* etcdctl's session TTL */
  b64("bench/uncontended/v3lock", k.v3name);
  b64("bench/uncontended/txn", k.txn_key);
  b64("0123456789abcdef0123456789abcdef", k.txn_value); /* like dlock's 32 hex digits */
  b64("bench/uncontended/kv", k.kv_key);
  http mon;
  http_init(&mon);

  /* Warm-up: connections, the shared lease, the server's caches. */
  side_figures f[NVARIANTS];
  memset(f, 0, sizeof f);
  for (int v = 0; v < NVARIANTS; v++) run_round(&k, v, 0.3, &f[v], 0);
  memset(f, 0, sizeof f);

  double ratio[64];
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < NVARIANTS; i++) {
      int v = r % 2 == 0 ? i : NVARIANTS - 1 - i; /* alternating order */
      if (diag_seconds <= 0 && v >= V_TXN) continue;
      counters a[3], b[3];
      for (int e = 0; e < g_nendpoints; e++) read_counters(&mon, g_endpoints[e], &a[e]);
      run_round(&k, v, v < V_TXN ? seconds : diag_seconds, &f[v], r);
      for (int e = 0; e < g_nendpoints; e++) read_counters(&mon, g_endpoints[e], &b[e]);
      counters all;
      memset(&all, 0, sizeof all);
      for (int e = 0; e < g_nendpoints; e++) add_delta(&all, &a[e], &b[e]);
      add_delta(&f[v].req, &a[0], &b[0]);
      f[v].server_cpu_s += all.cpu_s;
    }
    ratio[r] = f[V_DLOCK].rate[r] / f[V_V3].rate[r];
  }
  printf("unc_rounds=%d\nunc_seconds=%g\nunc_diag_seconds=%g\n", rounds, seconds, diag_seconds);
  print_list("unc_ratio_rounds", ratio, rounds, "%.2f");
  printf("unc_ratio=%.2f\n", median(ratio, rounds));
  for (int v = 0; v < NVARIANTS; v++) {
    if (diag_seconds <= 0 && v >= V_TXN) continue;
    const char *n = kVariant[v];
    char key[64];
    snprintf(key, sizeof key, "unc_%s_rounds", n);
    print_list(key, f[v].rate, rounds, "%.0f");
    printf("unc_%s_rate=%.1f\nunc_%s_cpu_us=%.0f\nunc_%s_acquire_us=%.0f\nunc_%s_release_us=%.0f\n", n,
           median(f[v].rate, rounds), n, median(f[v].cpu_us, rounds), n, median(f[v].acq_us, rounds), n,
           median(f[v].rel_us, rounds));
    snprintf(key, sizeof key, "unc_%s", n);
    print_counters(key, &f[v].req, f[v].cycles);
    printf("unc_%s_server_cpu_us=%.0f\n", n, f[v].server_cpu_s * 1e6 / f[v].cycles);
    printf("unc_%s_endpoint_cpu_us=%.0f\n", n, f[v].req.cpu_s * 1e6 / f[v].cycles);
  }
  if (diag_seconds > 0) {
    double a[64], b[64];
    for (int r = 0; r < rounds; r++) {
      a[r] = f[V_DLOCK].rate[r] / f[V_TXN].rate[r];
      b[r] = f[V_TXN].rate[r] / f[V_V3].rate[r];
    }
    printf("unc_lib_ratio=%.2f\nunc_protocol_ratio=%.2f\n", median(a, rounds), median(b, rounds));
  }
  printf("unc_v3_keepalives=%ld\n", k.s.keepalives);
  http_free(&mon);
  v3_close(&k.s);
  dlock_client_close(k.c);
  return 0;
}

/* ----- 2. handoff ----------------------------------------------------------------------------- */

static void xwrite(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("pipe write: %s", strerror(errno));
    b += w, n -= (size_t)w;
  }
}

static void xread(int fd, void *p, size_t n) {
  char *b = p;
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) die("pipe closed: the other process died");
    if (r < 0) die("pipe read: %s", strerror(errno));
    b += r, n -= (size_t)r;
  }
}

enum { SIDE_DLOCK = V_DLOCK, SIDE_V3 = V_V3 };

typedef struct {
  dlock_client *c;
  dlock_options *wait_forever;
  dlock_lock *held;      /* dlock: the lock, while held */
  v3session s;
  char v3key[256];       /* v3lock: the key, while held */
  char v3name[128];      /* base64 */
  char name[64];         /* dlock's lock name */
  double lat[2][4096];   /* by side: latencies this process saw as the waiter, seconds */
  int nlat[2];
  double attempts;       /* dlock: attempts of the waiter's acquires, summed */
  http mon;              /* the parent's: /metrics */
  counters req[2];       /* the parent's: what etcd got during each side's blocks */
} party;

static void take(party *p, int side, int wait) {
  if (side == SIDE_DLOCK) {
    check(dlock_acquire(p->c, p->name, wait ? p->wait_forever : NULL, &p->held), "dlock_acquire");
  } else {
    v3_lock(&p->s, p->v3name, p->v3key, sizeof p->v3key);
  }
}

static void give(party *p, int side) {
  if (side == SIDE_DLOCK) {
    check(dlock_release(p->held), "dlock_release");
    p->held = NULL;
  } else {
    v3_unlock(&p->s, p->v3key);
  }
}

/* The handoffs both processes run, in step. me: 0 the parent, 1 the child; in/out: pipes to
 * the other. Block b is side b % 2; its first holder is the parent, which takes the lock
 * uncontended; each handoff moves it to the other. */
static void run_handoffs(party *p, int me, int in, int out, int handoffs, double delay_s, int block) {
  int done[2] = {0, 0};
  for (int b = 0; done[0] < handoffs || done[1] < handoffs; b++) {
    int side = b % 2;
    if (done[side] >= handoffs) continue;
    int n = block < handoffs - done[side] ? block : handoffs - done[side];
    int holder = 0;
    char go = 'B';
    counters before, after;
    if (me == 0) { /* the parent holds it before the child may ask */
      read_counters(&p->mon, g_endpoints[0], &before);
      take(p, side, 0);
      xwrite(out, &go, 1);
    } else {
      xread(in, &go, 1);
    }
    for (int i = 0; i < n; i++) {
      char tag = 'W';
      if (me == holder) {
        xread(in, &tag, 1); /* the other is about to block in its acquire */
        if (tag != 'W') die("out of step");
        sleep_s(delay_s);
        double t0 = now_s();
        give(p, side);
        xwrite(out, &t0, sizeof t0);
        /* Wait until the other has it: else this process, the next waiter, could take the
         * lock back before the woken one gets there (dlock has no queue; v3lock has one). */
        xread(in, &tag, 1);
        if (tag != 'G') die("out of step");
      } else {
        xwrite(out, &tag, 1);
        take(p, side, 1);
        double t1 = now_s(), t0;
        xread(in, &t0, sizeof t0);
        if (p->nlat[side] < 4096) p->lat[side][p->nlat[side]++] = t1 - t0;
        if (side == SIDE_DLOCK) p->attempts += dlock_lock_attempts(p->held);
        tag = 'G';
        xwrite(out, &tag, 1);
      }
      holder = 1 - holder;
    }
    done[side] += n;
    /* The last holder gives it back; then both meet before the next block. */
    if (me == holder) give(p, side);
    char sync = 'S';
    xwrite(out, &sync, 1);
    xread(in, &sync, 1);
    if (me == 0) {
      read_counters(&p->mon, g_endpoints[0], &after);
      add_delta(&p->req[side], &before, &after);
    }
  }
}

/* run: the parent's pid, in the names (a run that died leaves its locks until their leases end) */
static void party_open(party *p, const char *url, long run) {
  memset(p, 0, sizeof *p);
  p->c = open_client(url);
  p->wait_forever = dlock_options_new();
  if (p->wait_forever == NULL) die("out of memory");
  check(dlock_options_set_wait_ms(p->wait_forever, -1), "set_wait_ms");
  v3_open(&p->s, g_endpoints[0], 60);
  http_init(&p->mon);
  char v3name[64];
  snprintf(p->name, sizeof p->name, "bench/handoff/dlock/%ld", run);
  snprintf(v3name, sizeof v3name, "bench/handoff/v3lock/%ld", run);
  b64(v3name, p->v3name);
}

static void party_close(party *p) {
  http_free(&p->mon);
  v3_close(&p->s);
  dlock_options_free(p->wait_forever);
  dlock_client_close(p->c);
}

static int bench_handoff(const char *url, int handoffs, double delay_ms, int block) {
  if (handoffs < 2 || handoffs > 4096) die("handoffs must be 2..4096");
  if (block < 2) die("block must be >= 2");
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) die("pipe: %s", strerror(errno));
  fflush(stdout);
  long run = (long)getpid();
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    bench_who = "etcd_bench handoff (child)";
    close(to_child[1]), close(to_parent[0]);
    party *p = calloc(1, sizeof *p);
    if (p == NULL) die("out of memory");
    party_open(p, url, run);
    char ready = 'R';
    xwrite(to_parent[1], &ready, 1);
    run_handoffs(p, 1, to_child[0], to_parent[1], handoffs, delay_ms / 1e3, block);
    for (int side = 0; side < 2; side++) {
      xwrite(to_parent[1], &p->nlat[side], sizeof p->nlat[side]);
      xwrite(to_parent[1], p->lat[side], sizeof(double) * (size_t)p->nlat[side]);
    }
    xwrite(to_parent[1], &p->attempts, sizeof p->attempts);
    party_close(p);
    _exit(0);
  }
  bench_who = "etcd_bench handoff";
  close(to_child[0]), close(to_parent[1]);
  party *p = calloc(1, sizeof *p);
  if (p == NULL) die("out of memory");
  party_open(p, url, run);
  char ready;
  xread(to_parent[0], &ready, 1);
  double t_start = now_s();
  run_handoffs(p, 0, to_parent[0], to_child[1], handoffs, delay_ms / 1e3, block);
  double took = now_s() - t_start;
  for (int side = 0; side < 2; side++) {
    int n;
    xread(to_parent[0], &n, sizeof n);
    if (n < 0 || p->nlat[side] + n > 4096) die("bad count from the child");
    xread(to_parent[0], p->lat[side] + p->nlat[side], sizeof(double) * (size_t)n);
    p->nlat[side] += n;
  }
  double child_attempts;
  xread(to_parent[0], &child_attempts, sizeof child_attempts);
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the child failed");
  static const char *const names[2] = {"dlock", "v3"};
  printf("ho_handoffs=%d\nho_delay_ms=%g\nho_block=%d\nho_seconds=%.1f\n", handoffs, delay_ms, block, took);
  for (int side = 0; side < 2; side++) {
    int n = p->nlat[side];
    double *v = p->lat[side];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    printf("ho_%s_n=%d\nho_%s_p50_ms=%.2f\nho_%s_p90_ms=%.2f\nho_%s_p99_ms=%.2f\nho_%s_min_ms=%.2f\nho_%s_max_ms=%.2f\n"
           "ho_%s_mean_ms=%.2f\n",
           names[side], n, names[side], quantile(v, n, 0.5) * 1e3, names[side], quantile(v, n, 0.9) * 1e3,
           names[side], quantile(v, n, 0.99) * 1e3, names[side], v[0] * 1e3, names[side], v[n - 1] * 1e3,
           names[side], sum / n * 1e3);
  }
  printf("ho_dlock_attempts=%.2f\n", (p->attempts + child_attempts) / p->nlat[SIDE_DLOCK]);
  /* Per handoff, each block's first take and last release included. */
  print_counters("ho_dlock", &p->req[SIDE_DLOCK], p->nlat[SIDE_DLOCK]);
  print_counters("ho_v3", &p->req[SIDE_V3], p->nlat[SIDE_V3]);
  party_close(p);
  return 0;
}

/* ----- 3. many held locks ---------------------------------------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dlock_client *c;
  dlock_lock **held;
  int total, next, done, failed;
  char error[512];
} filler;

static void start_next(filler *f);

static void on_acquired(dlock_status s, dlock_lock *l, void *arg) {
  filler *f = arg;
  pthread_mutex_lock(&f->mu);
  if (s != DLOCK_OK) {
    if (!f->failed) snprintf(f->error, sizeof f->error, "%s: %s", dlock_status_str(s), dlock_last_error());
    f->failed = 1;
  }
  intptr_t k = -1;
  /* Which slot: the name holds it. */
  if (l != NULL) k = strtol(strrchr(dlock_lock_name(l), '/') + 1, NULL, 10);
  if (k >= 0) f->held[k] = l;
  f->done++;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  start_next(f);
}

static void start_next(filler *f) {
  pthread_mutex_lock(&f->mu);
  if (f->failed || f->next >= f->total) {
    pthread_mutex_unlock(&f->mu);
    return;
  }
  int k = f->next++;
  pthread_mutex_unlock(&f->mu);
  char name[64];
  snprintf(name, sizeof name, "bench/hold/%d", k);
  check(dlock_acquire_async(f->c, name, NULL, on_acquired, f), "dlock_acquire_async");
}

static int bench_hold(const char *url, int nlocks, double hold_s) {
  if (nlocks < 1) die("locks must be >= 1");
  dlock_client *c = open_client(url);
  http mon;
  http_init(&mon);
  filler f;
  memset(&f, 0, sizeof f);
  pthread_mutex_init(&f.mu, NULL);
  pthread_cond_init(&f.cv, NULL);
  f.c = c, f.total = nlocks;
  f.held = calloc((size_t)nlocks, sizeof *f.held);
  if (f.held == NULL) die("out of memory");
  /* Warm up (connections, the loop, the shared lease, the allocator) so that only per-lock
   * memory shows in the RSS difference. */
  for (int i = 0; i < 50; i++) {
    dlock_lock *l;
    check(dlock_acquire(c, "bench/hold/warm", NULL, &l), "warm-up acquire");
    check(dlock_release(l), "warm-up release");
  }
  sleep_s(0.3);
  long rss0 = rss_bytes();
  double t0 = now_s();
  for (int i = 0; i < 64; i++) start_next(&f);
  pthread_mutex_lock(&f.mu);
  while (f.done < nlocks && !f.failed) pthread_cond_wait(&f.cv, &f.mu);
  pthread_mutex_unlock(&f.mu);
  if (f.failed) die("acquire: %s", f.error);
  double t_acquired = now_s();
  sleep_s(0.3); /* the loop thread registers them for heartbeats */
  long rss1 = rss_bytes();

  /* The hold: only heartbeats talk to etcd now. */
  counters a[3], b[3], req;
  memset(&req, 0, sizeof req);
  for (int e = 0; e < g_nendpoints; e++) read_counters(&mon, g_endpoints[e], &a[e]);
  double cpu0 = own_cpu_s(), w0 = now_s();
  sleep_s(hold_s);
  double cpu1 = own_cpu_s(), w1 = now_s();
  for (int e = 0; e < g_nendpoints; e++) read_counters(&mon, g_endpoints[e], &b[e]);
  for (int e = 0; e < g_nendpoints; e++) add_delta(&req, &a[e], &b[e]);
  long rss2 = rss_bytes();

  /* Kept alive for real? The first lock's key and its lease's TTL, straight from etcd. */
  int valid = 0;
  for (int i = 0; i < nlocks; i++) valid += dlock_lock_is_valid(f.held[i]);
  char key_b64[256], body[512], lease[32], ttl[32];
  b64("dlock:bench/hold/0", key_b64);
  snprintf(body, sizeof body, "{\"key\":\"%s\"}", key_b64);
  const char *ans = http_call(&mon, g_endpoints[0], "/v3/kv/range", body);
  if (!json_str(ans, "lease", lease, sizeof lease)) die("the first lock's key is gone: %s", ans);
  snprintf(body, sizeof body, "{\"ID\":\"%s\",\"keys\":true}", lease);
  ans = http_call(&mon, g_endpoints[0], "/v3/lease/timetolive", body);
  if (!json_str(ans, "TTL", ttl, sizeof ttl)) die("timetolive: %s", ans);
  int keys_on_lease = 0; /* the strings in the answer's "keys" array */
  const char *keys = strstr(ans, "\"keys\":[");
  if (keys != NULL) {
    for (const char *q = keys + 8; *q != '\0' && *q != ']'; q++) keys_on_lease += *q == '"';
    keys_on_lease /= 2;
  }
  /* Every lock on one lease? Count the keys under the prefix, and close. */
  char from[128], to[128];
  b64("dlock:bench/hold/", from);
  b64("dlock:bench/hold0", to); /* '0' follows '/' */
  snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", from, to);
  char count[32] = "0";
  ans = http_call(&mon, g_endpoints[0], "/v3/kv/range", body);
  json_str(ans, "count", count, sizeof count);
  double tc = now_s();
  dlock_client_close(c);
  double close_ms = (now_s() - tc) * 1e3;
  char left[32] = "0";
  ans = http_call(&mon, g_endpoints[0], "/v3/kv/range", body);
  json_str(ans, "count", left, sizeof left);

  printf("hold_locks=%d\nhold_acquire_s=%.2f\nhold_acquire_rate=%.0f\n", nlocks, t_acquired - t0,
         nlocks / (t_acquired - t0));
  printf("hold_s=%.2f\nhold_cpu_s=%.3f\nhold_cpu_pct=%.3f\n", w1 - w0, cpu1 - cpu0, (cpu1 - cpu0) * 100 / (w1 - w0));
  printf("hold_bytes_per_lock=%.0f\nhold_bytes_per_lock_after=%.0f\n", (double)(rss1 - rss0) / nlocks,
         (double)(rss2 - rss0) / nlocks);
  printf("hold_valid=%d\nhold_keys=%s\nhold_first_lease=%s\nhold_first_lease_ttl_s=%s\nhold_keys_on_lease=%d\n",
         valid, count, lease, ttl, keys_on_lease);
  print_counters("hold", &req, 1);
  printf("hold_server_cpu_pct=%.2f\n", req.cpu_s * 100 / (w1 - w0));
  printf("hold_close_ms=%.0f\nhold_left_after_close=%s\n", close_ms, left);
  for (int i = 0; i < nlocks; i++) (void)dlock_release(f.held[i]); /* frees them: DLOCK_NOT_HELD now */
  free(f.held);
  http_free(&mon);
  return 0;
}

/* ----- cycles: for strace ---------------------------------------------------------------------- */

static int bench_cycles(const char *url, const char *side, long n) {
  if (strcmp(side, "dlock") == 0) {
    dlock_client *c = open_client(url);
    for (long i = 0; i <= n; i++) {
      dlock_lock *l;
      check(dlock_acquire(c, "bench/cycles/dlock", NULL, &l), "dlock_acquire");
      check(dlock_release(l), "dlock_release");
    }
    dlock_client_close(c);
  } else if (strcmp(side, "v3lock") == 0) {
    v3session s;
    v3_open(&s, g_endpoints[0], 60);
    char name[128], key[256];
    b64("bench/cycles/v3lock", name);
    for (long i = 0; i <= n; i++) {
      v3_lock(&s, name, key, sizeof key);
      v3_unlock(&s, key);
    }
    v3_close(&s);
  } else {
    die("side must be dlock or v3lock");
  }
  return 0;
}

static void print_total_cpu(void) { printf("bench_cpu_s=%.3f\n", total_cpu_s()); }

int main(int argc, char **argv) {
  bench_who = "etcd_bench";
  signal(SIGPIPE, SIG_IGN);
  atexit(print_total_cpu); /* the child leaves by _exit: only the parent prints */
  curl_global_init(CURL_GLOBAL_DEFAULT);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "uncontended") == 0) {
    parse_url(argv[2]);
    return bench_uncontended(argv[2], atof(argv[3]), atoi(argv[4]), argc == 6 ? atof(argv[5]) : 0);
  }
  if (argc == 6 && strcmp(argv[1], "handoff") == 0) {
    parse_url(argv[2]);
    return bench_handoff(argv[2], atoi(argv[3]), atof(argv[4]), atoi(argv[5]));
  }
  if (argc == 5 && strcmp(argv[1], "hold") == 0) {
    parse_url(argv[2]);
    return bench_hold(argv[2], atoi(argv[3]), atof(argv[4]));
  }
  if (argc == 5 && strcmp(argv[1], "cycles") == 0) {
    parse_url(argv[2]);
    return bench_cycles(argv[2], argv[3], atol(argv[4]));
  }
  fprintf(stderr,
          "usage: etcd_bench uncontended URL SECONDS ROUNDS [DIAG_SECONDS]\n"
          "       etcd_bench handoff URL HANDOFFS DELAY_MS BLOCK\n"
          "       etcd_bench hold URL LOCKS HOLD_S\n"
          "       etcd_bench cycles URL dlock|v3lock CYCLES\n");
  return 2;
}
