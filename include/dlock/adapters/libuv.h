/* dlock/adapters/libuv.h: a dlock client driven by a libuv loop (header-only).
 *
 *   dlock_client *c;
 *   dlock_client_open_libuv("redis://127.0.0.1:6379", uv_default_loop(), &c);
 *   dlock_acquire_async(c, "jobs/nightly", opts, on_acquired, arg);
 *   uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *
 * Everything the client does runs inside uv_run, on the loop's thread, with no thread of
 * dlock's own: a uv_poll_t per socket, one uv_timer_t per client. The rules are those of
 * dlock_client_open_hooks (dlock.h, "any event loop"): open, the _async calls and close on the
 * loop's thread; blocking calls only from other threads. While the client is open its handles
 * keep uv_run going; once dlock_client_close has finished, they are closed and uv_run returns
 * when nothing else of yours is left.
 *
 * Build: cc prog.c $(pkg-config --cflags --libs dlock libuv)
 * This file is also the model for an adapter of your own: three hooks and two calls back. */
#ifndef DLOCK_ADAPTERS_LIBUV_H_
#define DLOCK_ADAPTERS_LIBUV_H_

#include <stddef.h>
#include <stdlib.h>
#include <uv.h>

#include "dlock/dlock.h"

/* One per client: its loop and its timer. Freed once the timer handle has closed. */
typedef struct dlock_libuv_client {
  uv_loop_t *loop;
  uv_timer_t timer;
} dlock_libuv_client;

static inline void dlock_libuv_on_poll_(uv_poll_t *poll, int status, int events) {
  uint32_t ready = 0;
  if (status < 0) {
    /* An error on the fd: report it as ready, so that dlock's read or write finds it. */
    ready = DLOCK_LOOP_READ | DLOCK_LOOP_WRITE;
  } else {
    if (events & UV_READABLE) ready |= DLOCK_LOOP_READ;
    if (events & UV_WRITABLE) ready |= DLOCK_LOOP_WRITE;
  }
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)poll, &fd) != 0) return;
  dlock_loop_fd_ready((dlock_loop *)poll->data, (int)fd, ready);
}

static inline void dlock_libuv_free_handle_(uv_handle_t *handle) { free(handle); }

static inline void dlock_libuv_watch_fd_(void *ctx, dlock_loop *loop, int fd, uint32_t events,
                                         void **fd_data) {
  dlock_libuv_client *client = (dlock_libuv_client *)ctx;
  uv_poll_t *poll = (uv_poll_t *)*fd_data;
  if (events == 0) {
    if (poll != NULL) {
      uv_poll_stop(poll); /* dlock may close fd as soon as this returns */
      uv_close((uv_handle_t *)poll, dlock_libuv_free_handle_);
      *fd_data = NULL;
    }
    return;
  }
  if (poll == NULL) {
    poll = (uv_poll_t *)malloc(sizeof *poll);
    if (poll == NULL) return; /* the connection then times out and says so */
    if (uv_poll_init_socket(client->loop, poll, fd) != 0) {
      free(poll);
      return;
    }
    poll->data = loop;
    *fd_data = poll;
  }
  int flags = 0;
  if (events & DLOCK_LOOP_READ) flags |= UV_READABLE;
  if (events & DLOCK_LOOP_WRITE) flags |= UV_WRITABLE;
  uv_poll_start(poll, flags, dlock_libuv_on_poll_);
}

static inline void dlock_libuv_on_timer_(uv_timer_t *timer) {
  dlock_loop_timer_fired((dlock_loop *)timer->data);
}

static inline void dlock_libuv_set_timer_(void *ctx, dlock_loop *loop, int64_t ms) {
  dlock_libuv_client *client = (dlock_libuv_client *)ctx;
  if (ms < 0) {
    uv_timer_stop(&client->timer);
    return;
  }
  client->timer.data = loop;
  uv_timer_start(&client->timer, dlock_libuv_on_timer_, (uint64_t)ms, 0);
}

static inline void dlock_libuv_free_client_(uv_handle_t *timer) {
  free((char *)timer - offsetof(dlock_libuv_client, timer));
}

static inline void dlock_libuv_cleanup_(void *ctx) {
  dlock_libuv_client *client = (dlock_libuv_client *)ctx;
  uv_close((uv_handle_t *)&client->timer, dlock_libuv_free_client_);
}

/* dlock_client_open_hooks on a libuv loop. Call on the thread that runs loop. DLOCK_EINVAL
 * when loop is NULL (dlock_last_error() is then not set). */
static inline dlock_status dlock_client_open_libuv(const char *url, uv_loop_t *loop,
                                                   dlock_client **out) {
  static const dlock_loop_hooks hooks = {dlock_libuv_watch_fd_, dlock_libuv_set_timer_,
                                         dlock_libuv_cleanup_};
  if (loop == NULL) return DLOCK_EINVAL;
  dlock_libuv_client *client = (dlock_libuv_client *)calloc(1, sizeof *client);
  if (client == NULL) return DLOCK_ENOMEM;
  client->loop = loop;
  uv_timer_init(loop, &client->timer);
  dlock_status s = dlock_client_open_hooks(url, &hooks, client, out);
  if (s != DLOCK_OK) uv_close((uv_handle_t *)&client->timer, dlock_libuv_free_client_);
  return s;
}

#endif /* DLOCK_ADAPTERS_LIBUV_H_ */
