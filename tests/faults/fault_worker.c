/* One worker of the fault-injection suite (tests/faults/run.py), public C API only.
 *
 *   fault_worker URL NAME STORE_PORT SECONDS LEASE_MS PAUSE_FLAG HOLD_MS [STOP_FLAG]
 *   fault_worker --prepare URL      what the backend needs (the DynamoDB table, PostgreSQL's)
 *
 * For SECONDS (and, with STOP_FLAG, until that file exists: the harness says when it has seen
 * what it waits for, so that the run's end never depends on how fast the machine is; at most
 * 120 s more), over and over: acquire NAME (waiting), read the counter from the store with the
 * fencing token, work for up to HOLD_MS (so that faults find locks held, and heartbeats run),
 * check the lock is still valid, write counter + 1 with the token, release. The
 * store (a separate process's socket on 127.0.0.1:STORE_PORT) refuses reads and writes whose
 * token is below the highest it has seen, as a fenced resource should.
 *
 * Between the validity check and the write, a worker that can rename PAUSE_FLAG away stops
 * itself (SIGSTOP): the harness then resumes it after the lease ran out. That is the classic
 * pause (GC, swap, a stopped VM) that only fencing makes safe.
 *
 * What happens is printed on stdout, one event per line, for the harness to check:
 *   ACQ token attempts | ACK token value | STALE_READ token | STALE_WRITE token
 *   INVALID token (found lost before writing) | PAUSING token | REL token status
 *   LOST_CB token | UNREPORTED token (the store proved a loss the library never reported)
 *   ERR what status message
 * Exit status 0 when it ran its time without a crash or a hang. */
#define _DEFAULT_SOURCE /* usleep */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <dlock/dlock.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&out_mu);
  vprintf(fmt, ap);
  putchar('\n');
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
  va_end(ap);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One request line to the store, one answer line back; a fresh connection each time keeps
 * the worker simple and a stopped worker from holding the store up. */
static int store_call(int port, const char *request, char *answer, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      write(fd, request, strlen(request)) != (ssize_t)strlen(request)) {
    close(fd);
    return -1;
  }
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t n = read(fd, answer + got, len - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
    if (answer[got - 1] == '\n') break;
  }
  answer[got] = '\0';
  close(fd);
  return got > 0 ? 0 : -1;
}

struct lost_flag {
  atomic_int fired;
};

static void on_lost(const char *name, uint64_t token, void *arg) {
  (void)name;
  atomic_store(&((struct lost_flag *)arg)->fired, 1);
  emit("LOST_CB %" PRIu64, token);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--prepare") == 0) {  /* the lock table, for the harness */
    dlock_status s = dlock_backend_prepare(argv[2], 30000);
    if (s != DLOCK_OK) fprintf(stderr, "prepare: %s\n", dlock_last_error());
    return s == DLOCK_OK ? 0 : 1;
  }
  if (argc != 8 && argc != 9) {
    fprintf(stderr, "usage: fault_worker URL NAME STORE_PORT SECONDS LEASE_MS PAUSE_FLAG HOLD_MS [STOP_FLAG]\n");
    return 2;
  }
  const char *url = argv[1], *name = argv[2], *pause_flag = argv[6];
  const char *stop_flag = argc == 9 ? argv[8] : NULL;
  int port = atoi(argv[3]);
  double until = now_s() + atof(argv[4]);
  const double cap = until + 120;
  uint64_t lease = strtoull(argv[5], NULL, 10);
  long hold_ms = atol(argv[7]);
  srand((unsigned)getpid());
  char claimed[4096];
  snprintf(claimed, sizeof claimed, "%s.%d", pause_flag, (int)getpid());

  dlock_client *c = NULL;
  dlock_status s;
  while ((s = dlock_client_open(url, &c)) != DLOCK_OK) {  /* the server may be down: retry */
    emit("ERR open %s %s", dlock_status_str(s), dlock_last_error());
    if (now_s() > until) return 0;
    usleep(200 * 1000);
  }
  while ((now_s() < until || (stop_flag && access(stop_flag, F_OK) != 0)) && now_s() < cap) {
    struct lost_flag lost;
    atomic_init(&lost.fired, 0);
    dlock_options *o = dlock_options_new();
    dlock_options_set_lease_ms(o, lease);
    dlock_options_set_wait_ms(o, 2000);
    dlock_options_set_retry_ms(o, 20, 200);
    dlock_options_set_on_lost(o, on_lost, &lost);
    dlock_lock *l = NULL;
    s = dlock_acquire(c, name, o, &l);
    dlock_options_free(o);
    if (s != DLOCK_OK) {
      if (s != DLOCK_NOT_ACQUIRED) {
        emit("ERR acquire %s %s", dlock_status_str(s), dlock_last_error());
        usleep(50 * 1000);
      }
      continue;
    }
    uint64_t token = dlock_lock_fencing_token(l);
    emit("ACQ %" PRIu64 " %u", token, dlock_lock_attempts(l));
    char request[256], answer[256];
    int stale = 0;
    snprintf(request, sizeof request, "READ %" PRIu64 "\n", token);
    long value = -1;
    if (store_call(port, request, answer, sizeof answer) != 0) {
      emit("ERR store-read - no answer");
    } else if (strncmp(answer, "STALE", 5) == 0) {
      emit("STALE_READ %" PRIu64, token);
      stale = 1;
    } else {
      value = atol(answer + 6); /* "VALUE n" */
    }
    if (value >= 0 && hold_ms > 0) usleep((useconds_t)(rand() % (hold_ms + 1)) * 1000);  /* work */
    if (value >= 0) {
      if (!dlock_lock_is_valid(l)) {
        emit("INVALID %" PRIu64, token);  /* reported before the write: nothing written */
      } else {
        if (rename(pause_flag, claimed) == 0) {
          emit("PAUSING %" PRIu64, token);
          raise(SIGSTOP);  /* the harness resumes us after the lease ran out */
        }
        snprintf(request, sizeof request, "WRITE %" PRIu64 " %ld\n", token, value + 1);
        if (store_call(port, request, answer, sizeof answer) != 0) {
          emit("ERR store-write - no answer");
        } else if (strncmp(answer, "STALE", 5) == 0) {
          emit("STALE_WRITE %" PRIu64, token);
          stale = 1;
        } else {
          emit("ACK %" PRIu64 " %ld", token, value + 1);
        }
      }
    }
    int valid_after = dlock_lock_is_valid(l);
    s = dlock_release(l);
    emit("REL %" PRIu64 " %s", token, dlock_status_str(s));
    /* The store proved this lock lost (someone newer wrote): the library must have said so by
     * now: the callback, is_valid turning 0, or the release's DLOCK_NOT_HELD. */
    if (stale && !atomic_load(&lost.fired) && valid_after && s == DLOCK_OK) {
      emit("UNREPORTED %" PRIu64, token);
    }
  }
  dlock_client_close(c);
  return 0;
}
