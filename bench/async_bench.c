/* async_bench: async acquire+release cycles per second on ONE loop thread with INFLIGHT
 * cycles in flight at once (each on its own lock name, uncontended), on a client driven by
 * the caller's loop: a libevent event_base (evbase client, the default) or a libuv loop
 * (through the hook table and dlock/adapters/libuv.h).
 *
 *   usage: async_bench URL SECONDS INFLIGHT [libevent|libuv]
 *   prints: async_cycles_per_sec <rate>
 *           async_client_cpu_pct <CPU this process used while cycling, % of one core>
 *           async_client_cpu_us <the same per cycle, µs>
 *
 * Compared in bench/run with `redis-benchmark -c INFLIGHT` running the acquire script's
 * EVALSHA against the same server: a cycle is two requests (acquire + release), so 0.5 of
 * redis-benchmark's request rate is the ceiling. */
#define _POSIX_C_SOURCE 200809L /* uv.h under -std=c11 */
#include <dlock/adapters/libuv.h>
#include <dlock/dlock.h>
#include <event2/event.h>
#include <uv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

struct bench {
  struct event_base *base; /* one of these two */
  uv_loop_t *uv;
  dlock_client *client;
  double deadline;
  long cycles;
  int running;  /* workers still cycling */
  int failed;
};

struct worker {
  struct bench *b;
  char name[32];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds this process (all threads) has used: with an evbase client, the loop thread is
 * the caller's, so this is what the one loop thread costs. */
static double process_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void start_cycle(struct worker *w);

static void worker_done(struct bench *b) {
  if (--b->running > 0) return;
  if (b->base != NULL) event_base_loopbreak(b->base);
  if (b->uv != NULL) uv_stop(b->uv);
}

static void on_released(dlock_status s, void *arg) {
  struct worker *w = arg;
  if (s != DLOCK_OK) {
    fprintf(stderr, "release: %s: %s\n", dlock_status_str(s), dlock_last_error());
    w->b->failed = 1;
  }
  w->b->cycles++;
  start_cycle(w);
}

static void on_acquired(dlock_status s, dlock_lock *lock, void *arg) {
  struct worker *w = arg;
  if (s != DLOCK_OK) {
    fprintf(stderr, "acquire: %s: %s\n", dlock_status_str(s), dlock_last_error());
    w->b->failed = 1;
    worker_done(w->b);
    return;
  }
  dlock_release_async(lock, on_released, w);
}

static void start_cycle(struct worker *w) {
  if (w->b->failed || now_s() >= w->b->deadline) {
    worker_done(w->b);
    return;
  }
  if (dlock_acquire_async(w->b->client, w->name, NULL, on_acquired, w) != DLOCK_OK) {
    fprintf(stderr, "acquire_async: %s\n", dlock_last_error());
    w->b->failed = 1;
    worker_done(w->b);
  }
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s URL SECONDS INFLIGHT [libevent|libuv]\n", argv[0]);
    return 2;
  }
  double seconds = atof(argv[2]);
  int inflight = atoi(argv[3]);
  int on_libuv = argc == 5 && strcmp(argv[4], "libuv") == 0;
  if (argc == 5 && !on_libuv && strcmp(argv[4], "libevent") != 0) {
    fprintf(stderr, "async_bench: unknown loop '%s' (libevent or libuv)\n", argv[4]);
    return 2;
  }
  struct bench b = {0};
  dlock_status opened;
  if (on_libuv) {
    b.uv = uv_default_loop();
    opened = dlock_client_open_libuv(argv[1], b.uv, &b.client);
  } else {
    b.base = event_base_new();
    opened = dlock_client_open_evbase(argv[1], b.base, &b.client);
  }
  if (opened != DLOCK_OK) {
    fprintf(stderr, "open: %s\n", dlock_last_error());
    return 1;
  }
  struct worker *workers = calloc(inflight, sizeof *workers);
  b.running = inflight;
  double cpu0 = process_cpu_s();
  double start = now_s();
  b.deadline = start + seconds;
  for (int i = 0; i < inflight; i++) {
    workers[i].b = &b;
    snprintf(workers[i].name, sizeof workers[i].name, "async-bench-%d", i);
    start_cycle(&workers[i]);
  }
  if (on_libuv) {
    uv_run(b.uv, UV_RUN_DEFAULT);
  } else {
    event_base_dispatch(b.base);
  }
  double elapsed = now_s() - start;
  double cpu = process_cpu_s() - cpu0;
  printf("async_cycles_per_sec %.0f\n", b.cycles / elapsed);
  printf("async_client_cpu_pct %.1f\n", cpu * 100 / elapsed);
  printf("async_client_cpu_us %.2f\n", b.cycles ? cpu * 1e6 / (double)b.cycles : 0.0);
  dlock_client_close(b.client);
  if (on_libuv) {
    uv_run(b.uv, UV_RUN_DEFAULT); /* until the closed client has let go of the loop */
    uv_loop_close(b.uv);
  } else {
    event_base_free(b.base);
  }
  free(workers);
  return b.failed;
}
