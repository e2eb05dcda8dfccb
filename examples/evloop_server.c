/* evloop_server: a libevent program that holds a lock while it works, reacts to losing it,
 * and keeps its event loop responsive, with no thread besides its own.
 *
 * It runs for SECONDS. While it holds the lock "evloop-server" it does one unit of work every
 * 100 ms, stamped with the lock's fencing token. If the lock is lost (say, someone deletes it),
 * on_lost stops the work at once and the program queues up to acquire it again. A 20 ms
 * "heartbeat" timer of the program's own measures how late the loop ever ran it: waiting for a
 * lock never blocks the loop. At the end it releases the lock and closes the client.
 *
 *   usage: evloop_server URL [SECONDS]
 *   build: cc evloop_server.c $(pkg-config --cflags --libs dlock) -levent -levent_pthreads
 */
#include <dlock/dlock.h>
#include <event2/event.h>
#include <event2/thread.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

struct server {
  struct event_base *base;
  dlock_client *client;
  dlock_options *opts;
  dlock_lock *lock;          /* non-NULL while we hold the lock */
  int acquiring;             /* an acquire is pending */
  int stopping;
  long units_done;
  int times_lost;
  double max_lateness_ms;
  struct timeval next_tick;  /* when the responsiveness timer should fire next */
  struct event *work, *tick;
};

static void acquire(struct server *s);

static double ms_between(const struct timeval *a, const struct timeval *b) {
  return (b->tv_sec - a->tv_sec) * 1000.0 + (b->tv_usec - a->tv_usec) / 1000.0;
}

/* Runs on this thread, inside the loop, when a heartbeat finds the lock gone. */
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
  dlock_status st = dlock_acquire_async(s->client, "evloop-server", s->opts, on_acquired, s);
  if (st != DLOCK_OK) {
    s->acquiring = 0;
    fprintf(stderr, "acquire: %s: %s\n", dlock_status_str(st), dlock_last_error());
  }
}

/* One unit of work, only while the lock is ours and still valid. */
static void on_work(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct server *s = arg;
  if (s->lock != NULL && dlock_lock_is_valid(s->lock)) s->units_done++;
}

/* The program's own timer: how late does the loop run it? */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct server *s = arg;
  struct timeval now;
  gettimeofday(&now, NULL);
  double late = ms_between(&s->next_tick, &now);
  if (late > s->max_lateness_ms) s->max_lateness_ms = late;
  s->next_tick = now;
  s->next_tick.tv_usec += 20000;
  if (s->next_tick.tv_usec >= 1000000) s->next_tick.tv_sec++, s->next_tick.tv_usec -= 1000000;
}

static void on_released(dlock_status st, void *arg) {
  struct server *s = arg;
  printf("released: %s\n", dlock_status_str(st));
  /* From inside a callback, close finishes on the loop's next turns: stop our own events and
   * let event_base_dispatch return by itself once dlock has nothing left on the base. */
  dlock_client_close(s->client);
  s->client = NULL;
  event_del(s->work);
  event_del(s->tick);
}

static void on_stop(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct server *s = arg;
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
  evthread_use_pthreads();
  s.base = event_base_new();

  dlock_status st = dlock_client_open_evbase(argv[1], s.base, &s.client);
  if (st != DLOCK_OK) {
    fprintf(stderr, "open: %s: %s\n", dlock_status_str(st), dlock_last_error());
    return 1;
  }
  s.opts = dlock_options_new();
  dlock_options_set_lease_ms(s.opts, 3000); /* renewed every second while held */
  dlock_options_set_wait_ms(s.opts, -1);
  dlock_options_set_on_lost(s.opts, on_lost, &s);
  acquire(&s);

  struct timeval every_100ms = {0, 100000}, every_20ms = {0, 20000}, run_for = {seconds, 0};
  struct event *work = event_new(s.base, -1, EV_PERSIST, on_work, &s);
  struct event *tick = event_new(s.base, -1, EV_PERSIST, on_tick, &s);
  struct event *stop = evtimer_new(s.base, on_stop, &s);
  s.work = work;
  s.tick = tick;
  event_add(work, &every_100ms);
  gettimeofday(&s.next_tick, NULL);
  s.next_tick.tv_usec += 20000;
  if (s.next_tick.tv_usec >= 1000000) s.next_tick.tv_sec++, s.next_tick.tv_usec -= 1000000;
  event_add(tick, &every_20ms);
  event_add(stop, &run_for);

  event_base_dispatch(s.base);

  printf("units of work done: %ld, locks lost: %d, loop never late by more than %.1f ms\n",
         s.units_done, s.times_lost, s.max_lateness_ms);
  event_free(work);
  event_free(tick);
  event_free(stop);
  dlock_options_free(s.opts);
  event_base_free(s.base);
  return 0;
}
