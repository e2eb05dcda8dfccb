/* libuv_server: evloop_server.c on a libuv loop, through dlock/adapters/libuv.h. A program that
 * holds a lock while it works, reacts to losing it, and keeps its loop responsive, with no
 * thread besides its own.
 *
 * It runs for SECONDS. While it holds the lock "libuv-server" it does one unit of work every
 * 100 ms. If the lock is lost (say, someone deletes it), on_lost stops the work at once and the
 * program queues up to acquire it again. A 20 ms timer of the program's own measures how late
 * the loop ever ran it. At the end it releases the lock and closes the client, and uv_run
 * returns once nothing is left on the loop.
 *
 *   usage: libuv_server URL [SECONDS]
 *   build: cc libuv_server.c $(pkg-config --cflags --libs dlock libuv)
 */
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX's types under strict ISO C (-std=c11) */
#include <dlock/adapters/libuv.h>
#include <dlock/dlock.h>
#include <uv.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

struct server {
  uv_loop_t *loop;
  dlock_client *client;
  dlock_options *opts;
  dlock_lock *lock; /* non-NULL while we hold the lock */
  int acquiring;    /* an acquire is pending */
  int stopping;
  long units_done;
  int times_lost;
  double max_lateness_ms;
  uint64_t next_tick_ms; /* when the responsiveness timer should fire next (uv_hrtime, ms) */
  uv_timer_t work, tick, stop;
};

static void acquire(struct server *s);

static uint64_t now_ms(void) { return uv_hrtime() / 1000000; }

/* Runs on this thread, inside uv_run, when a heartbeat finds the lock gone. */
static void on_lost(const char *name, uint64_t token, void *arg) {
  struct server *s = arg;
  printf("lost %s (token %" PRIu64 "): stopping work\n", name, token);
  s->times_lost++;
  dlock_release(s->lock); /* frees the handle; DLOCK_NOT_HELD, as expected */
  s->lock = NULL;
  if (!s->stopping) acquire(s);
}

static void on_acquired(dlock_status st, dlock_lock *lock, void *arg) {
  struct server *s = arg;
  s->acquiring = 0;
  if (st != DLOCK_OK) {
    if (st != DLOCK_ECANCELLED) fprintf(stderr, "acquire: %s: %s\n", dlock_status_str(st), dlock_last_error());
    return;
  }
  s->lock = lock;
  printf("acquired, fencing token %" PRIu64 " (after %u attempts)\n",
         dlock_lock_fencing_token(lock), dlock_lock_attempts(lock));
}

static void acquire(struct server *s) {
  if (s->acquiring) return;
  s->acquiring = 1;
  dlock_status st = dlock_acquire_async(s->client, "libuv-server", s->opts, on_acquired, s);
  if (st != DLOCK_OK) {
    s->acquiring = 0;
    fprintf(stderr, "acquire: %s: %s\n", dlock_status_str(st), dlock_last_error());
  }
}

/* One unit of work, only while the lock is ours and still valid. */
static void on_work(uv_timer_t *t) {
  struct server *s = t->data;
  if (s->lock != NULL && dlock_lock_is_valid(s->lock)) s->units_done++;
}

/* The program's own timer: how late does the loop run it? */
static void on_tick(uv_timer_t *t) {
  struct server *s = t->data;
  uint64_t now = now_ms();
  double late = (double)now - (double)s->next_tick_ms;
  if (late > s->max_lateness_ms) s->max_lateness_ms = late;
  s->next_tick_ms = now + 20;
}

static void on_released(dlock_status st, void *arg) {
  struct server *s = arg;
  printf("released: %s\n", dlock_status_str(st));
  /* From inside a callback, close finishes on the loop's next turns; uv_run returns by itself
   * once dlock's handles and ours are closed. */
  dlock_client_close(s->client);
  s->client = NULL;
  uv_close((uv_handle_t *)&s->work, NULL);
  uv_close((uv_handle_t *)&s->tick, NULL);
  uv_close((uv_handle_t *)&s->stop, NULL);
}

static void on_stop(uv_timer_t *t) {
  struct server *s = t->data;
  s->stopping = 1;
  if (s->acquiring) dlock_acquire_cancel(s->client, s);
  if (s->lock != NULL) {
    dlock_lock *l = s->lock;
    s->lock = NULL;
    dlock_release_async(l, on_released, s);
  } else {
    on_released(DLOCK_NOT_HELD, s);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s URL [SECONDS]\n", argv[0]);
    return 2;
  }
  int seconds = argc > 2 ? atoi(argv[2]) : 5;
  struct server s = {0};
  s.loop = uv_default_loop();

  dlock_status st = dlock_client_open_libuv(argv[1], s.loop, &s.client);
  if (st != DLOCK_OK) {
    fprintf(stderr, "open: %s: %s\n", dlock_status_str(st), dlock_last_error());
    return 1;
  }
  s.opts = dlock_options_new();
  dlock_options_set_lease_ms(s.opts, 3000); /* renewed every second while held */
  dlock_options_set_wait_ms(s.opts, -1);
  dlock_options_set_on_lost(s.opts, on_lost, &s);
  acquire(&s);

  uv_timer_init(s.loop, &s.work);
  uv_timer_init(s.loop, &s.tick);
  uv_timer_init(s.loop, &s.stop);
  s.work.data = s.tick.data = s.stop.data = &s;
  uv_timer_start(&s.work, on_work, 100, 100);
  s.next_tick_ms = now_ms() + 20;
  uv_timer_start(&s.tick, on_tick, 20, 20);
  uv_timer_start(&s.stop, on_stop, (uint64_t)seconds * 1000, 0);

  uv_run(s.loop, UV_RUN_DEFAULT);

  printf("units of work done: %ld, locks lost: %d, loop never late by more than %.1f ms\n",
         s.units_done, s.times_lost, s.max_lateness_ms);
  dlock_options_free(s.opts);
  return uv_loop_close(s.loop) == 0 ? 0 : 1; /* 0: nothing was left on the loop */
}
