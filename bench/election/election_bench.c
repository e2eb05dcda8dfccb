/* Leader election speed, through the public C ABI (bench/election/run drives it).
 *
 *   election_bench failover URL NAME KILLS LEASE_MS
 *       A leader process leads NAME (dlock_campaign, lease LEASE_MS, heartbeats at the default
 *       lease/3). Each round starts a candidate process, which first sees the leader
 *       (dlock_leader) and then calls dlock_campaign; once the candidate has waited at least
 *       50 ms and the leader has led at least one lease (heartbeats in their steady state), and
 *       then a random 0..lease/3 more (so that kills land all over the heartbeat period), this
 *       process reads CLOCK_MONOTONIC and SIGKILLs the leader's process. The candidate writes its
 *       CLOCK_MONOTONIC when dlock_campaign returns: failover = that - kill. The candidate is the
 *       next round's leader. Diagnostics: the leader's lease left on the server at the kill (a
 *       dlock_leader read just before it), the time from that lease's end to the takeover, and
 *       the candidate's acquire attempts.
 *   election_bench handover URL NAME ROUNDS CHANGES LEASE_MS
 *       An observer (dlock_observe, on this process's own client) watches NAME. ROUNDS times: a
 *       candidate process is waiting in dlock_campaign (it saw the leader first) when the leader
 *       process resigns (dlock_release): hand-over = the candidate's campaign return - the
 *       leader's call of dlock_release; observer delay = the observer callback reporting the
 *       change (nobody leads, or another term) - the resign call's return. Then CHANGES times
 *       the leader replaces its value (dlock_lock_set_value), each after a random 0..500 ms:
 *       delay = the callback reporting the new value - the set_value call's return.
 *   election_bench etcdctl ENDPOINTS NAME ROUNDS KILL
 *       The same resign hand-over with etcd's own concurrency.Election, through Debian's
 *       `etcdctl elect NAME PROPOSAL`: the leader is one etcdctl process, the candidate a second
 *       one waiting (its key is in etcd); this process reads CLOCK_MONOTONIC and sends the
 *       leader SIGINT (etcdctl resigns and exits), and reads the candidate's stdout: hand-over =
 *       the candidate's leadership line read - SIGINT. KILL 1 adds one SIGKILL of the leader and
 *       waits for the candidate (its session's lease, 60 s, must run out first).
 *   election_bench worker URL LEASE_MS
 *       A candidate/leader process driven over stdin (see worker_main); used by the modes above.
 *
 * Each mode prints key=value lines on stdout (percentiles: nearest rank; with 20 samples p99 is
 * the largest). Every time is CLOCK_MONOTONIC on this machine, so the processes' readings
 * compare. Timings are reported, never asserted; something that breaks (a campaign that fails,
 * a candidate that leads before the leader is gone, a process that dies) is a fatal error. */
#define _GNU_SOURCE
#include <dlock/dlock.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bench_util.h"

extern char **environ;

static dlock_client *open_client(const char *url) {
  dlock_client *c = NULL;
  check(dlock_client_open(url, &c), "dlock_client_open");
  return c;
}

/* ----- samples ------------------------------------------------------------------------------- */

typedef struct {
  double v[256];
  int n;
} samples;

static void add(samples *s, double x) {
  if (s->n < (int)(sizeof s->v / sizeof s->v[0])) s->v[s->n++] = x;
}

/* Nearest-rank percentile (p in 0..100) of the samples; 0 when there are none. */
static double pct(const samples *s, double p) {
  if (s->n == 0) return 0;
  double sorted[256];
  memcpy(sorted, s->v, sizeof(double) * (size_t)s->n);
  qsort(sorted, (size_t)s->n, sizeof(double), cmp_double);
  int rank = (int)(p / 100.0 * s->n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > s->n) rank = s->n;
  return sorted[rank - 1];
}

static double mean(const samples *s) {
  double sum = 0;
  for (int i = 0; i < s->n; i++) sum += s->v[i];
  return s->n ? sum / s->n : 0;
}

/* KEY_p50_ms, KEY_p99_ms, KEY_min_ms, KEY_max_ms, KEY_n and KEY_all (every sample, in order). */
static void print_samples(const char *key, const samples *s) {
  printf("%s_p50_ms=%.1f\n%s_p99_ms=%.1f\n%s_min_ms=%.1f\n%s_max_ms=%.1f\n%s_mean_ms=%.1f\n%s_n=%d\n",
         key, pct(s, 50), key, pct(s, 99), key, pct(s, 0), key, pct(s, 100), key, mean(s), key,
         s->n);
  printf("%s_all=", key);
  for (int i = 0; i < s->n; i++) printf("%s%.*f", i ? "/" : "", s->v[i] < 10 ? 1 : 0, s->v[i]);
  printf("\n");
}

/* ----- child processes: stdin and stdout through pipes -------------------------------------- */

typedef struct {
  pid_t pid;
  int in_fd;  /* its stdin, or -1 */
  int out_fd; /* its stdout */
  char buf[8192];
  size_t len;
  double t_read; /* CLOCK_MONOTONIC when the last bytes came in */
  char what[64];
} proc;

static void proc_spawn(proc *p, char *const argv[], int with_stdin, const char *what) {
  int in[2] = {-1, -1}, out[2];
  if (pipe2(out, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));
  if (with_stdin && pipe2(in, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (with_stdin) {
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  fflush(stdout);
  int err = posix_spawn(&p->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) die("spawning %s: %s", argv[0], strerror(err));
  close(out[1]);
  p->out_fd = out[0];
  if (with_stdin) close(in[0]);
  p->in_fd = with_stdin ? in[1] : -1;
  p->len = 0;
  p->t_read = 0;
  snprintf(p->what, sizeof p->what, "%s (pid %d)", what, (int)p->pid);
}

/* The next line of p's stdout, without its newline, into line: 1; 0 when none came within
 * timeout_s (0: only what is there already); -1 at EOF. */
static int proc_line(proc *p, char *line, size_t cap, double timeout_s) {
  double end = now_s() + timeout_s;
  for (;;) {
    char *nl = memchr(p->buf, '\n', p->len);
    if (nl != NULL) {
      size_t n = (size_t)(nl - p->buf);
      size_t k = n < cap - 1 ? n : cap - 1;
      memcpy(line, p->buf, k);
      line[k] = '\0';
      memmove(p->buf, nl + 1, p->len - n - 1);
      p->len -= n + 1;
      return 1;
    }
    double left = end - now_s();
    struct pollfd pfd = {p->out_fd, POLLIN, 0};
    int r = poll(&pfd, 1, left <= 0 ? 0 : (int)(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("poll: %s", strerror(errno));
    if (r == 0) return 0;
    if (p->len == sizeof p->buf) die("%s: a line too long", p->what);
    ssize_t got = read(p->out_fd, p->buf + p->len, sizeof p->buf - p->len);
    p->t_read = now_s();
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) die("read from %s: %s", p->what, strerror(errno));
    if (got == 0) return -1;
    p->len += (size_t)got;
  }
}

/* Waits for a line starting with word (a "lost" or "error" line, EOF or the timeout is fatal). */
static void proc_expect(proc *p, const char *word, char *line, size_t cap, double timeout_s) {
  int r = proc_line(p, line, cap, timeout_s);
  if (r == 0) die("%s: no '%s' within %.0f s", p->what, word, timeout_s);
  if (r < 0) die("%s exited before '%s'", p->what, word);
  size_t n = strlen(word);
  if (strncmp(line, word, n) != 0 || (line[n] != ' ' && line[n] != '\0')) {
    die("%s: expected '%s', got '%s'", p->what, word, line);
  }
}

static void proc_send(proc *p, const char *fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof b) die("command too long");
  if (write(p->in_fd, b, (size_t)n) != n) die("write to %s: %s", p->what, strerror(errno));
}

/* Reaps p (after a signal, or after it was told to exit) and closes its pipes. */
static int proc_reap(proc *p) {
  int st = 0;
  while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (p->in_fd >= 0) close(p->in_fd);
  close(p->out_fd);
  p->in_fd = p->out_fd = -1;
  return st;
}

static void worker_exit(proc *p) {
  proc_send(p, "exit\n");
  int st = proc_reap(p);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("%s exited badly (status %d)", p->what, st);
}

static char g_self[4096];

static void spawn_worker(proc *p, const char *url, uint64_t lease_ms, const char *what) {
  char lease[32];
  snprintf(lease, sizeof lease, "%" PRIu64, lease_ms);
  char *argv[] = {g_self, "worker", (char *)url, lease, NULL};
  proc_spawn(p, argv, 1, what);
  char line[256];
  proc_expect(p, "ready", line, sizeof line, 15);
}

/* ----- worker: one candidate / leader process -------------------------------------------------
 *
 * Commands on stdin, one a line; answers on stdout, one a line, each written whole:
 *   see NAME       -> "seen TERM REMAINING_MS" once dlock_leader reports a leader
 *   campaign NAME  -> "campaigning T" just before dlock_campaign, "led T TERM ATTEMPTS" when it
 *                     returns (T: CLOCK_MONOTONIC, s)
 *   resign         -> "resigned T_CALL T_RETURN STATUS" (dlock_release of the leadership)
 *   value V        -> "valued T_CALL T_RETURN STATUS" (dlock_lock_set_value)
 *   exit           -> closes the client and exits 0
 * A leadership found lost prints "lost TERM". */

static void emit(const char *fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof b - 1) n = (int)sizeof b - 2;
  b[n++] = '\n';
  if (write(1, b, (size_t)n) != n) _exit(3); /* the parent is gone */
}

static void on_lost(const char *name, uint64_t token, void *arg) {
  (void)name, (void)arg;
  emit("lost %" PRIu64, token);
}

static int worker_main(const char *url, uint64_t lease_ms) {
  signal(SIGPIPE, SIG_IGN);
  dlock_client *c = open_client(url);
  dlock_options *o = dlock_options_new();
  char me[64];
  snprintf(me, sizeof me, "candidate-%d", (int)getpid());
  check(dlock_options_set_lease_ms(o, lease_ms), "set_lease_ms");
  check(dlock_options_set_owner(o, me), "set_owner");
  check(dlock_options_set_value(o, me, strlen(me)), "set_value");
  check(dlock_options_set_on_lost(o, on_lost, NULL), "set_on_lost");
  emit("ready");
  dlock_lock *l = NULL;
  char line[512];
  while (fgets(line, sizeof line, stdin) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "see ", 4) == 0) {
      double end = now_s() + 10;
      for (;;) {
        dlock_info *info = NULL;
        check(dlock_leader(c, line + 4, &info), "dlock_leader");
        if (dlock_info_holders(info) == 1) {
          emit("seen %" PRIu64 " %" PRId64, dlock_info_fencing_token(info, 0),
               dlock_info_remaining_ms(info, 0));
          dlock_info_free(info);
          break;
        }
        dlock_info_free(info);
        if (now_s() > end) die("nobody leads %s after 10 s", line + 4);
        sleep_s(0.002);
      }
    } else if (strncmp(line, "campaign ", 9) == 0) {
      if (l != NULL) die("campaign while leading");
      emit("campaigning %.9f", now_s());
      dlock_status s = dlock_campaign(c, line + 9, o, &l);
      double t = now_s();
      check(s, "dlock_campaign");
      emit("led %.9f %" PRIu64 " %u", t, dlock_lock_fencing_token(l), dlock_lock_attempts(l));
    } else if (strcmp(line, "resign") == 0) {
      if (l == NULL) die("resign while not leading");
      double t0 = now_s();
      dlock_status s = dlock_release(l);
      double t1 = now_s();
      l = NULL;
      emit("resigned %.9f %.9f %s", t0, t1, dlock_status_str(s));
    } else if (strncmp(line, "value ", 6) == 0) {
      if (l == NULL) die("value while not leading");
      double t0 = now_s();
      dlock_status s = dlock_lock_set_value(l, line + 6, strlen(line + 6));
      double t1 = now_s();
      emit("valued %.9f %.9f %s", t0, t1, dlock_status_str(s));
    } else if (strcmp(line, "exit") == 0) {
      break;
    } else {
      die("unknown command '%s'", line);
    }
  }
  if (l != NULL) dlock_release(l);
  dlock_options_free(o);
  dlock_client_close(c);
  return 0;
}

/* ----- the observer: every report, timed ------------------------------------------------------ */

typedef struct {
  double t;
  int leading;
  uint64_t term;
  char value[64];
} obs_event;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  obs_event ev[4096];
  size_t n;
} g_obs; /* mu and cv are initialized by obs_start */

static void on_change(const char *name, const dlock_info *leader, void *arg) {
  (void)name, (void)arg;
  double t = now_s();
  pthread_mutex_lock(&g_obs.mu);
  if (g_obs.n < sizeof g_obs.ev / sizeof g_obs.ev[0]) {
    obs_event *e = &g_obs.ev[g_obs.n++];
    e->t = t;
    e->leading = leader != NULL;
    e->term = leader ? dlock_info_fencing_token(leader, 0) : 0;
    size_t len = 0;
    const char *v = leader ? dlock_info_value(leader, 0, &len) : "";
    if (len >= sizeof e->value) len = sizeof e->value - 1;
    memcpy(e->value, v, len);
    e->value[len] = '\0';
  }
  pthread_cond_broadcast(&g_obs.cv);
  pthread_mutex_unlock(&g_obs.mu);
}

enum { WANT_LEADER, WANT_CHANGE, WANT_VALUE };

/* Waits up to timeout_s for an observer report from index `from` on that matches: WANT_LEADER
 * the latest report is term `term` leading; WANT_CHANGE the first report that is not term
 * `term` leading; WANT_VALUE the first with `value`. Returns its time, or dies. */
static double obs_wait(int want, size_t from, uint64_t term, const char *value, double timeout_s,
                       int *was_nobody) {
  double end = now_s() + timeout_s;
  pthread_mutex_lock(&g_obs.mu);
  for (;;) {
    if (want == WANT_LEADER) {
      if (g_obs.n > 0 && g_obs.ev[g_obs.n - 1].leading && g_obs.ev[g_obs.n - 1].term == term) {
        double t = g_obs.ev[g_obs.n - 1].t;
        pthread_mutex_unlock(&g_obs.mu);
        return t;
      }
    } else {
      for (size_t i = from; i < g_obs.n; i++) {
        const obs_event *e = &g_obs.ev[i];
        int hit = want == WANT_CHANGE ? (!e->leading || e->term != term)
                                      : (e->leading && strcmp(e->value, value) == 0);
        if (hit) {
          if (was_nobody) *was_nobody = !e->leading;
          double t = e->t;
          pthread_mutex_unlock(&g_obs.mu);
          return t;
        }
      }
    }
    double left = end - now_s();
    if (left <= 0) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the condvar's clock */
    ts.tv_nsec += (long)((left < 0.05 ? left : 0.05) * 1e9);
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&g_obs.cv, &g_obs.mu, &ts);
  }
  pthread_mutex_unlock(&g_obs.mu);
  die("the observer did not report %s within %.0f s",
      want == WANT_LEADER ? "the leader" : want == WANT_CHANGE ? "the change" : "the value",
      timeout_s);
  return 0;
}

static dlock_observer *obs_start(dlock_client *c, const char *name) {
  pthread_mutex_init(&g_obs.mu, NULL);
  pthread_cond_init(&g_obs.cv, NULL);
  dlock_observer *ob = NULL;
  check(dlock_observe(c, name, on_change, NULL, &ob), "dlock_observe");
  return ob;
}

static size_t obs_count(void) {
  pthread_mutex_lock(&g_obs.mu);
  size_t n = g_obs.n;
  pthread_mutex_unlock(&g_obs.mu);
  return n;
}

/* ----- 1. failover after a SIGKILL ------------------------------------------------------------ */

static void prepare(const char *url) {
  if (strncmp(url, "dynamodb://", 11) == 0) check(dlock_backend_prepare(url, 30000), "prepare");
}

static void parse_led(const proc *p, const char *line, double *t, uint64_t *term, unsigned *att) {
  if (sscanf(line, "led %lf %" SCNu64 " %u", t, term, att) != 3) die("%s: bad '%s'", p->what, line);
}

/* A candidate process that has seen the leader and is now in dlock_campaign. */
static void start_candidate(proc *p, const char *url, const char *name, uint64_t lease_ms,
                            uint64_t leader_term) {
  char line[256];
  spawn_worker(p, url, lease_ms, "candidate");
  proc_send(p, "see %s\n", name);
  proc_expect(p, "seen", line, sizeof line, 15);
  uint64_t seen = 0;
  if (sscanf(line, "seen %" SCNu64, &seen) != 1 || seen != leader_term) {
    die("%s saw '%s', the leader's term is %" PRIu64, p->what, line, leader_term);
  }
  proc_send(p, "campaign %s\n", name);
  proc_expect(p, "campaigning", line, sizeof line, 5);
}

/* Dies if the candidate has printed anything (it led, or lost, before the leader was gone). */
static void still_waiting(proc *p) {
  char line[256];
  int r = proc_line(p, line, sizeof line, 0);
  if (r > 0) die("%s said '%s' while the leader still led", p->what, line);
  if (r < 0) die("%s exited while waiting", p->what);
}

/* A worker process that campaigns for name and leads: when it led, its term, its attempts. */
static void start_leader(proc *leader, const char *url, const char *name, uint64_t lease_ms, double *t,
                         uint64_t *term, unsigned *attempts) {
  char line[256];
  spawn_worker(leader, url, lease_ms, "leader");
  proc_send(leader, "campaign %s\n", name);
  proc_expect(leader, "campaigning", line, sizeof line, 5);
  proc_expect(leader, "led", line, sizeof line, 30);
  parse_led(leader, line, t, term, attempts);
}

static int failover_main(const char *url, const char *name, int kills, uint64_t lease_ms) {
  prepare(url);
  /* Reads the leader's lease just before each kill, and observes: when the observer hears that
   * the killed leader is gone (at once where the backend notifies its key's deletion, as etcd's
   * watch does when the lease is revoked; else at its next 500 ms poll). */
  dlock_client *c = open_client(url);
  dlock_observer *ob = obs_start(c, name);
  char line[256];
  proc leader, cand;
  double t;
  uint64_t term;
  unsigned attempts;
  start_leader(&leader, url, name, lease_ms, &t, &term, &attempts);

  samples fo = {0}, left = {0}, after = {0}, att = {0}, seen = {0};
  for (int i = 0; i < kills; i++) {
    start_candidate(&cand, url, name, lease_ms, term);
    obs_wait(WANT_LEADER, 0, term, NULL, 5, NULL);
    /* The candidate waits at least 50 ms; the leader has led at least one lease (its heartbeats
     * in their steady state: a fresh leader's lease may still be the one granted while it
     * waited); then a random point of the heartbeat period. */
    double lease_s = (double)lease_ms / 1000;
    double kill_at = now_s() + 0.05;
    if (kill_at < t + lease_s) kill_at = t + lease_s;
    sleep_s(kill_at + drand48() * lease_s / 3 - now_s());
    still_waiting(&cand);
    dlock_info *info = NULL;
    check(dlock_leader(c, name, &info), "dlock_leader");
    double t_info = now_s();
    if (dlock_info_holders(info) != 1 || dlock_info_fencing_token(info, 0) != term) {
      die("before kill %d: the leader is not term %" PRIu64, i, term);
    }
    int64_t remaining = dlock_info_remaining_ms(info, 0);
    dlock_info_free(info);
    size_t from = obs_count();
    double t_kill = now_s();
    if (kill(leader.pid, SIGKILL) != 0) die("kill: %s", strerror(errno));
    proc_expect(&cand, "led", line, sizeof line, 10 + 3.0 * (double)lease_ms / 1000);
    double t_led;
    uint64_t new_term;
    parse_led(&cand, line, &t_led, &new_term, &attempts);
    if (t_led < t_kill) die("kill %d: the candidate led before the kill", i);
    if (new_term <= term) die("kill %d: term %" PRIu64 " after %" PRIu64, i, new_term, term);
    double ms = (t_led - t_kill) * 1000;
    add(&fo, ms);
    double left_ms = (double)remaining - (t_kill - t_info) * 1000;
    add(&left, left_ms);
    add(&after, ms - left_ms);
    add(&att, attempts);
    double seen_ms = (obs_wait(WANT_CHANGE, from, term, NULL, 5, NULL) - t_kill) * 1000;
    add(&seen, seen_ms);
    int st = proc_reap(&leader);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) die("the killed leader exited on its own");
    fprintf(stderr,
            "  failover %2d/%d: %6.0f ms (lease left at the kill %5.0f ms; observer heard the "
            "leader gone after %5.0f ms; %u attempts)\n",
            i + 1, kills, ms, left_ms, seen_ms, attempts);
    leader = cand;
    term = new_term;
    t = t_led;
  }
  worker_exit(&leader);
  dlock_observer_cancel(ob);
  dlock_client_close(c);
  printf("fo_kills=%d\nfo_lease_ms=%" PRIu64 "\n", kills, lease_ms);
  print_samples("fo", &fo);
  print_samples("fo_left", &left);   /* the leader's lease left on the server at the kill */
  print_samples("fo_after", &after); /* failover - lease left: the takeover after the expiry */
  print_samples("fo_seen", &seen);   /* kill -> the observer reports the leader gone */
  printf("fo_attempts_mean=%.2f\nfo_attempts_max=%.0f\n", mean(&att), pct(&att, 100));
  return 0;
}

/* ----- 2 and 3. resign hand-over, observer delay ----------------------------------------------- */

static int handover_main(const char *url, const char *name, int rounds, int changes,
                         uint64_t lease_ms) {
  prepare(url);
  dlock_client *c = open_client(url);
  dlock_observer *ob = obs_start(c, name);
  char line[256];
  proc leader, cand;
  double t;
  uint64_t term;
  unsigned attempts;
  start_leader(&leader, url, name, lease_ms, &t, &term, &attempts);
  obs_wait(WANT_LEADER, 0, term, NULL, 5, NULL);

  samples ho = {0}, obs = {0}, resign_call = {0}, att = {0};
  int first_nobody = 0;
  for (int i = 0; i < rounds; i++) {
    start_candidate(&cand, url, name, lease_ms, term);
    sleep_s(0.1 + drand48() * 0.2);
    still_waiting(&cand);
    obs_wait(WANT_LEADER, 0, term, NULL, 5, NULL); /* the observer's state is this leader */
    size_t from = obs_count();
    proc_send(&leader, "resign\n");
    proc_expect(&leader, "resigned", line, sizeof line, 10);
    double t0, t1;
    char status[64];
    if (sscanf(line, "resigned %lf %lf %63s", &t0, &t1, status) != 3) die("bad '%s'", line);
    if (strcmp(status, "DLOCK_OK") != 0) die("resign %d: %s", i, status);
    proc_expect(&cand, "led", line, sizeof line, 10 + 3.0 * (double)lease_ms / 1000);
    double t_led;
    uint64_t new_term;
    parse_led(&cand, line, &t_led, &new_term, &attempts);
    if (new_term <= term) die("resign %d: term %" PRIu64 " after %" PRIu64, i, new_term, term);
    int nobody = 0;
    double t_obs = obs_wait(WANT_CHANGE, from, term, NULL, 5, &nobody);
    add(&ho, (t_led - t0) * 1000);
    add(&obs, (t_obs - t1) * 1000);
    add(&resign_call, (t1 - t0) * 1000);
    add(&att, attempts);
    first_nobody += nobody;
    fprintf(stderr, "  resign %2d/%d: hand-over %6.1f ms, observer %6.1f ms after the resign returned\n",
            i + 1, rounds, (t_led - t0) * 1000, (t_obs - t1) * 1000);
    worker_exit(&leader);
    leader = cand;
    term = new_term;
    obs_wait(WANT_LEADER, 0, term, NULL, 5, NULL);
  }

  samples val = {0}, val_call = {0};
  for (int i = 0; i < changes; i++) {
    sleep_s(drand48() * 0.5); /* a change at a random point of the observer's poll period */
    char v[32];
    snprintf(v, sizeof v, "value-%d", i);
    size_t from = obs_count();
    proc_send(&leader, "value %s\n", v);
    proc_expect(&leader, "valued", line, sizeof line, 10);
    double t0, t1;
    char status[64];
    if (sscanf(line, "valued %lf %lf %63s", &t0, &t1, status) != 3) die("bad '%s'", line);
    if (strcmp(status, "DLOCK_OK") != 0) die("set_value %d: %s", i, status);
    double t_obs = obs_wait(WANT_VALUE, from, term, v, 5, NULL);
    add(&val, (t_obs - t1) * 1000);
    add(&val_call, (t1 - t0) * 1000);
    fprintf(stderr, "  value %2d/%d: observer %6.1f ms after set_value returned\n", i + 1, changes,
            (t_obs - t1) * 1000);
  }
  worker_exit(&leader);
  dlock_observer_cancel(ob);
  dlock_client_close(c);
  printf("rs_rounds=%d\nval_changes=%d\n", rounds, changes);
  print_samples("rs", &ho);             /* resign call -> the candidate's campaign returned */
  print_samples("rs_call", &resign_call);
  printf("rs_attempts_mean=%.2f\nrs_attempts_max=%.0f\n", mean(&att), pct(&att, 100));
  print_samples("obs", &obs);           /* resign returned -> the observer's report */
  printf("obs_first_nobody=%d\n", first_nobody);
  print_samples("val", &val);           /* set_value returned -> the observer's report */
  print_samples("val_call", &val_call);
  return 0;
}

/* ----- 2, side by side: etcdctl elect (etcd's concurrency.Election) ---------------------------- */

static const char *g_endpoints;

static void spawn_etcdctl(proc *p, const char *name, const char *proposal, const char *what) {
  char ep[1024];
  snprintf(ep, sizeof ep, "--endpoints=%s", g_endpoints);
  char *argv[] = {"/usr/bin/etcdctl", ep, "elect", (char *)name, (char *)proposal, NULL};
  const char *bin = getenv("ETCDCTL_BIN");
  if (bin != NULL) argv[0] = (char *)bin;
  proc_spawn(p, argv, 0, what);
}

/* How many keys the election has (one per campaigner: NAME/LEASE). */
static int election_keys(const char *name) {
  char cmd[2048];
  const char *bin = getenv("ETCDCTL_BIN");
  snprintf(cmd, sizeof cmd, "%s --endpoints=%s get --prefix --keys-only %s/", bin ? bin : "etcdctl",
           g_endpoints, name);
  FILE *f = popen(cmd, "r");
  if (f == NULL) die("popen: %s", strerror(errno));
  int n = 0;
  char line[1024];
  while (fgets(line, sizeof line, f) != NULL) {
    if (line[0] != '\n' && line[0] != '\0') n++;
  }
  if (pclose(f) != 0) die("'%s' failed", cmd);
  return n;
}

static void wait_keys(const char *name, int n) {
  double end = now_s() + 15;
  while (election_keys(name) != n) {
    if (now_s() > end) die("the election %s does not have %d campaigners after 15 s", name, n);
    sleep_s(0.01);
  }
}

static int etcdctl_main(const char *endpoints, const char *name, int rounds, int kill_too) {
  g_endpoints = endpoints;
  char line[1024], prop[32];
  proc leader, cand;
  spawn_etcdctl(&leader, name, "p0", "etcdctl leader");
  if (proc_line(&leader, line, sizeof line, 15) != 1) die("the first etcdctl elect did not lead");
  if (strncmp(line, name, strlen(name)) != 0) die("etcdctl elect printed '%s'", line);
  samples ho = {0};
  for (int i = 0; i < rounds + (kill_too ? 1 : 0); i++) {
    int killing = i == rounds;
    snprintf(prop, sizeof prop, "p%d", i + 1);
    spawn_etcdctl(&cand, name, prop, "etcdctl candidate");
    wait_keys(name, 2); /* the candidate's key is in: it is campaigning */
    sleep_s(0.1 + drand48() * 0.2);
    still_waiting(&cand);
    double t0 = now_s();
    if (kill(leader.pid, killing ? SIGKILL : SIGINT) != 0) die("kill: %s", strerror(errno));
    int r = proc_line(&cand, line, sizeof line, killing ? 90 : 15);
    if (r != 1) die("the etcdctl candidate did not lead (%s)", r == 0 ? "timeout" : "exited");
    if (strncmp(line, name, strlen(name)) != 0) die("etcdctl elect printed '%s'", line);
    double ms = (cand.t_read - t0) * 1000;
    int st = proc_reap(&leader);
    if (killing) {
      printf("ec_kill_ms=%.0f\n", ms);
      fprintf(stderr, "  etcdctl kill: %6.0f ms\n", ms);
    } else {
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("etcdctl leader exited badly on SIGINT");
      add(&ho, ms);
      fprintf(stderr, "  etcdctl resign %2d/%d: hand-over %6.1f ms\n", i + 1, rounds, ms);
    }
    leader = cand;
  }
  kill(leader.pid, SIGINT);
  proc_reap(&leader);
  printf("ec_rounds=%d\n", rounds);
  print_samples("ec", &ho);
  return 0;
}

/* ----- main --------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: election_bench failover URL NAME KILLS LEASE_MS\n"
          "       election_bench handover URL NAME ROUNDS CHANGES LEASE_MS\n"
          "       election_bench etcdctl ENDPOINTS NAME ROUNDS KILL\n"
          "       election_bench worker URL LEASE_MS\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  static char who[96];
  snprintf(who, sizeof who, "election_bench %s", argv[1]);
  bench_who = who;
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0) die("readlink /proc/self/exe: %s", strerror(errno));
  g_self[n] = '\0';
  srand48((long)getpid() ^ (long)(now_s() * 1e6));
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(argv[1], "worker") == 0 && argc == 4) {
    return worker_main(argv[2], strtoull(argv[3], NULL, 10));
  }
  if (strcmp(argv[1], "failover") == 0 && argc == 6) {
    return failover_main(argv[2], argv[3], atoi(argv[4]), strtoull(argv[5], NULL, 10));
  }
  if (strcmp(argv[1], "handover") == 0 && argc == 7) {
    return handover_main(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]),
                         strtoull(argv[6], NULL, 10));
  }
  if (strcmp(argv[1], "etcdctl") == 0 && argc == 6) {
    return etcdctl_main(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
  }
  usage();
  return 2;
}
