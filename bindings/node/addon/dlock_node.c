/* dlock.node: the Node binding's native path (issue 34). A dlock client driven by Node's own
 * libuv loop on the JS thread, through dlock_client_open_hooks: a uv_poll_t per socket and one
 * uv_timer_t per client. Acquire, release, extend and setValue are the library's _async calls;
 * their outcomes reach JS inside the uv callback that read the answer, with no thread in between,
 * and so do observers' reports (dlock_observe: its callback runs on this loop). inspect and
 * leader are blocking reads on libuv's pool, which the library serves on this loop.
 *
 * libdlock is not linked: index.js passes the path of the very library lib/native.js loaded
 * (DLOCK_LIBRARY, the bundled copy, or the system's), and init() dlopen()s that path, which
 * hands back the copy already loaded (one copy per process), and dlsym()s the calls below.
 * Nor are libuv and Node-API linked: Node exports uv_* and napi_*, resolved when it loads us.
 *
 * Every handle is unref'd: an idle client keeps no process alive (index.js keeps the loop
 * going while operations are pending, as on the koffi path). Only the main thread's
 * environment may load it (one state per process); a worker gets an error, and the koffi path.
 *
 * Calls into JS: the uv callbacks open a handle scope and a callback scope (lazily, at the
 * first outcome of that turn) around dlock_loop_fd_ready / dlock_loop_timer_fired, so every
 * outcome of one turn runs in one scope and promise jobs and process.nextTick run once, when it
 * closes (the behaviour of napi_make_callback, batched).
 *
 * Client events (dlock_client_set_event_hook, set by events() when JS first listens): the hook
 * runs while the library is mid-call, where JS must not run, so it copies each event into a
 * list, handed to JS (onEvent) at the end of the uv callback that made it, after the library
 * returned and before that turn's promise jobs; events made in a call JS made (an acquire's
 * "acquiring") or on another thread wait for ev_async, the loop's next turn. In order, always. */
#define NAPI_VERSION 8
#define _GNU_SOURCE
#include <dlfcn.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "dlock/dlock.h"

/* Raised with each change of what this file asks of index.js or of the library. */
#define ADDON_ABI 10

/* ----- the library's calls, found with dlsym --------------------------------------------- */

#define DLOCK_CALLS(X)                                                                          \
  X(const char *, dlock_version, (void))                                                         \
  X(const char *, dlock_last_error, (void))                                                      \
  X(dlock_status, dlock_client_open_hooks,                                                       \
    (const char *, const dlock_loop_hooks *, void *, dlock_client **))                           \
  X(void, dlock_client_close, (dlock_client *))                                                  \
  X(uint32_t, dlock_client_capabilities, (const dlock_client *))                                 \
  X(void, dlock_loop_fd_ready, (dlock_loop *, int, uint32_t))                                    \
  X(void, dlock_loop_timer_fired, (dlock_loop *))                                                \
  X(dlock_options *, dlock_options_new, (void))                                                  \
  X(void, dlock_options_free, (dlock_options *))                                                 \
  X(dlock_status, dlock_options_set_lease_ms, (dlock_options *, uint64_t))                       \
  X(dlock_status, dlock_options_set_heartbeat_ms, (dlock_options *, uint64_t))                   \
  X(dlock_status, dlock_options_set_wait_ms, (dlock_options *, int64_t))                         \
  X(dlock_status, dlock_options_set_retry_ms, (dlock_options *, uint64_t, uint64_t))             \
  X(dlock_status, dlock_options_set_owner, (dlock_options *, const char *))                      \
  X(dlock_status, dlock_options_set_kind, (dlock_options *, dlock_kind))                         \
  X(dlock_status, dlock_options_set_permits, (dlock_options *, uint32_t))                        \
  X(dlock_status, dlock_options_set_fair, (dlock_options *, int))                                \
  X(dlock_status, dlock_options_set_on_lost_queued, (dlock_options *, dlock_queue *, uint64_t))  \
  X(dlock_status, dlock_acquire_async,                                                           \
    (dlock_client *, const char *, const dlock_options *, dlock_acquire_fn, void *))             \
  X(dlock_status, dlock_acquire_cancel, (dlock_client *, void *))                                \
  X(dlock_status, dlock_release_async, (dlock_lock *, dlock_done_fn, void *))                    \
  X(dlock_status, dlock_extend_async, (dlock_lock *, uint64_t, dlock_done_fn, void *))           \
  X(uint64_t, dlock_lock_fencing_token, (const dlock_lock *))                                    \
  X(int, dlock_lock_is_valid, (const dlock_lock *))                                              \
  X(int64_t, dlock_lock_remaining_ms, (const dlock_lock *))                                      \
  X(uint32_t, dlock_lock_attempts, (const dlock_lock *))                                         \
  X(dlock_status, dlock_inspect_errbuf,                                                          \
    (dlock_client *, const char *, dlock_info **, char *, size_t))                               \
  X(void, dlock_info_free, (dlock_info *))                                                       \
  X(uint32_t, dlock_info_holders, (const dlock_info *))                                          \
  X(const char *, dlock_info_owner, (const dlock_info *, uint32_t))                              \
  X(int64_t, dlock_info_remaining_ms, (const dlock_info *, uint32_t))                            \
  X(uint64_t, dlock_info_fencing_token, (const dlock_info *, uint32_t))                          \
  X(dlock_kind, dlock_info_kind, (const dlock_info *))                                           \
  X(uint32_t, dlock_info_permits, (const dlock_info *))                                          \
  X(dlock_status, dlock_options_set_value, (dlock_options *, const void *, size_t))              \
  X(dlock_status, dlock_lock_set_value_async,                                                    \
    (dlock_lock *, const void *, size_t, dlock_done_fn, void *))                                 \
  X(const void *, dlock_info_value, (const dlock_info *, uint32_t, size_t *))                    \
  X(dlock_status, dlock_leader, (dlock_client *, const char *, dlock_info **))                   \
  X(dlock_status, dlock_observe,                                                                 \
    (dlock_client *, const char *, dlock_observe_fn, void *, dlock_observer **))                 \
  X(void, dlock_observer_cancel, (dlock_observer *))

/* Metrics, loss causes and the event hook (issue 36), the job rules (max hold, min hold, lock
 * delay), breaking a lock, release requests, reentrancy and a semaphore's take: optional, so that an older library still serves locks (index.js asks lib/native.js whether the library has
 * them before calling the functions below that use them). */
#define DLOCK_OPTIONAL_CALLS(X)                                                                 \
  X(dlock_status, dlock_client_metrics_text, (dlock_client *, char *, size_t, size_t *))         \
  X(dlock_status, dlock_client_metrics, (dlock_client *, dlock_metrics **))                      \
  X(void, dlock_metrics_free, (dlock_metrics *))                                                 \
  X(size_t, dlock_metrics_count, (const dlock_metrics *))                                        \
  X(const char *, dlock_metrics_family, (const dlock_metrics *, size_t))                         \
  X(const char *, dlock_metrics_type, (const dlock_metrics *, size_t))                           \
  X(const char *, dlock_metrics_help, (const dlock_metrics *, size_t))                           \
  X(const char *, dlock_metrics_name, (const dlock_metrics *, size_t))                           \
  X(const char *, dlock_metrics_labels, (const dlock_metrics *, size_t))                         \
  X(double, dlock_metrics_value, (const dlock_metrics *, size_t))                                \
  X(const char *, dlock_lock_lost_cause, (const dlock_lock *))                                   \
  X(dlock_status, dlock_client_set_event_hook, (dlock_client *, dlock_event_fn, void *))         \
  X(dlock_event_type, dlock_event_type_of, (const dlock_event *))                                \
  X(const char *, dlock_event_type_name, (dlock_event_type))                                     \
  X(const char *, dlock_event_lock_name, (const dlock_event *))                                  \
  X(uint32_t, dlock_event_attempts, (const dlock_event *))                                       \
  X(int64_t, dlock_event_elapsed_ms, (const dlock_event *))                                      \
  X(uint64_t, dlock_event_fencing_token, (const dlock_event *))                                  \
  X(dlock_status, dlock_event_status, (const dlock_event *))                                     \
  X(const char *, dlock_event_detail, (const dlock_event *))                                    \
  X(dlock_status, dlock_options_set_max_hold_ms, (dlock_options *, uint64_t))                    \
  X(dlock_status, dlock_break_with,                                                              \
    (dlock_client *, const char *, const char *, uint32_t, dlock_info **))                       \
  X(int64_t, dlock_info_closed_ms, (const dlock_info *))                                         \
  X(const char *, dlock_info_closed_by, (const dlock_info *))                                    \
  X(dlock_status, dlock_options_set_min_hold_ms, (dlock_options *, uint64_t))                    \
  X(dlock_status, dlock_options_set_lock_delay_ms, (dlock_options *, uint64_t))                \
  X(dlock_status, dlock_request_release_errbuf,                                                  \
    (dlock_client *, const char *, const char *, char *, size_t))                                \
  X(dlock_status, dlock_options_set_on_release_requested_queued,                                 \
    (dlock_options *, dlock_queue *, uint64_t))                                                  \
  X(dlock_status, dlock_options_set_reentrant, (dlock_options *, const char *))                  \
  X(dlock_status, dlock_options_set_take, (dlock_options *, uint32_t))

#define DECLARE(ret, name, args) static ret(*p_##name) args;
DLOCK_CALLS(DECLARE)
DLOCK_OPTIONAL_CALLS(DECLARE)
#undef DECLARE

/* Each pointer has its function's type as dlock.h declares it. */
#if defined(__GNUC__)
#define SAME_TYPE(ret, name, args)                                                         \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), __typeof__(p_##name)), \
                 #name " is not declared as in dlock.h");
DLOCK_CALLS(SAME_TYPE)
DLOCK_OPTIONAL_CALLS(SAME_TYPE)
#undef SAME_TYPE
#endif

/* ----- state ------------------------------------------------------------------------------ */

/* An event of a client's hook, copied for JS: the hook runs while the library is mid-call, where
 * JS must not run (a listener may close the client), so events wait here and are handed to JS
 * at the end of the uv callback that made them, or from ev_async when JS's own call did. */
typedef struct ev_item {
  struct ev_item *next;
  uint32_t client;   /* index.js's id of the Client */
  const char *type;  /* dlock_event_type_name's (static) */
  uint32_t attempts;
  int64_t elapsed_ms;
  uint64_t token;
  int32_t status;
  char *detail;      /* in the same allocation, after name */
  char name[];
} ev_item;

typedef struct addon_state {
  napi_env env;
  uv_loop_t *loop;
  napi_ref on_done;         /* JS (id, status, lock | null, message, token, attempts) */
  napi_ref on_leader;       /* JS (id, [owner, remainingMs, term, value] | null): observers */
  napi_ref flush;           /* JS (): registers the locks made in this uv callback */
  napi_ref reg_array;       /* index.js's regState (an Int32Array), kept alive here */
  int32_t *reg_state;       /* its elements: [locks waiting for flush, 1 in a uv callback] */
  napi_ref resource;        /* the async resource of the callback scopes */
  napi_async_context actx;
  dlock_queue *queue;       /* index.js's queue, for loss reports */
  /* Inside a uv callback of ours: the scopes opened at its first outcome, closed at its end. */
  int in_uv;
  napi_handle_scope hscope;
  napi_callback_scope cscope;
  /* Events (only once a client asked for them): under ev_mu, as a hook might run on another
   * thread; handed to JS by on_event (JS (clientId, type, name, attempts, elapsedMs, token,
   * status, detail)). */
  napi_ref on_event;
  int ev_ready;             /* ev_mu and ev_async made */
  uv_mutex_t ev_mu;
  uv_async_t ev_async;
  uv_thread_t js_thread;
  ev_item *ev_head, **ev_tail;
  size_t ev_count;
  int ev_at_leave;          /* in a uv callback of ours, before its end hands events to JS */
} addon_state;

enum { EV_MAX = 65536 }; /* events waiting for JS at most; more are dropped (a JS thread stuck) */

static addon_state *g; /* the main thread's environment; NULL until init() */

typedef struct client_ctx {
  addon_state *st;
  uv_timer_t timer;
} client_ctx;

/* ----- helpers ---------------------------------------------------------------------------- */

#define CHECK(call)                                                                  \
  do {                                                                               \
    if ((call) != napi_ok) {                                                         \
      const napi_extended_error_info *info_ = NULL;                                  \
      napi_get_last_error_info(env, &info_);                                         \
      bool pending_ = false;                                                         \
      napi_is_exception_pending(env, &pending_);                                     \
      if (!pending_)                                                                 \
        napi_throw_error(env, "ERR_DLOCK_ADDON",                                     \
                         info_ && info_->error_message ? info_->error_message        \
                                                       : "Node-API call failed");    \
      return NULL;                                                                   \
    }                                                                                \
  } while (0)

static napi_value throw_type(napi_env env, const char *what) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", what);
  return NULL;
}

static napi_value make_int(napi_env env, int64_t v) {
  napi_value out;
  napi_create_int64(env, v, &out);
  return out;
}

static napi_value make_u64(napi_env env, uint64_t v) {
  napi_value out;
  napi_create_bigint_uint64(env, v, &out);
  return out;
}

static void *external_of(napi_env env, napi_value v) {
  void *p = NULL;
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_external) return NULL;
  napi_get_value_external(env, v, &p);
  return p;
}

/* A lock's handle in JS: its address as a number (exact: user-space addresses are below 2^53).
 * Not an external: Node-API makes a global handle for each external, a cost per acquire that
 * a number does not have. index.js hands them back only to the calls below. */
static napi_value lock_value(napi_env env, dlock_lock *lock) {
  napi_value out;
  napi_create_double(env, (double)(uintptr_t)lock, &out);
  return out;
}

static dlock_lock *lock_of(napi_env env, napi_value v) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || !(d > 0) || d >= 9007199254740992.0) {
    return NULL;
  }
  return (dlock_lock *)(uintptr_t)d;
}

/* A number or bigint argument as uint64 / int64; 0 when it is neither (index.js checked). */
static int get_i64(napi_env env, napi_value v, int64_t *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_number) return napi_get_value_int64(env, v, out) == napi_ok;
  if (t == napi_bigint) {
    bool lossless;
    return napi_get_value_bigint_int64(env, v, out, &lossless) == napi_ok;
  }
  return 0;
}

static int get_u64(napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_number) {
    double d;
    if (napi_get_value_double(env, v, &d) != napi_ok || d < 0) return 0;
    *out = (uint64_t)d;
    return 1;
  }
  if (t == napi_bigint) {
    bool lossless;
    return napi_get_value_bigint_uint64(env, v, out, &lossless) == napi_ok;
  }
  return 0;
}

static int is_set(napi_env env, napi_value v) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  return t != napi_undefined && t != napi_null;
}

/* A string or NUL-terminated Buffer argument: a copy into buf (size bytes) when it fits, else a
 * malloc'd copy (*owned = 1), or the buffer's bytes. buf may be NULL. */
static char *get_cstr_buf(napi_env env, napi_value v, char *buf, size_t size, int *owned) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  *owned = 0;
  if (t == napi_string) {
    size_t len = 0;
    if (buf != NULL) {
      /* One pass when it fits. A copy that was cut short stopped less than one character (at
       * most 4 bytes) before the end of buf's size - 1 bytes of room: one that stopped earlier
       * is the whole string. */
      if (napi_get_value_string_utf8(env, v, buf, size, &len) != napi_ok) return NULL;
      if (len + 4 < size) return buf;
    }
    if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
    char *s = malloc(len + 1);
    if (s == NULL) return NULL;
    napi_get_value_string_utf8(env, v, s, len + 1, &len);
    *owned = 1;
    return s;
  }
  bool is_buf = false;
  napi_is_buffer(env, v, &is_buf);
  if (is_buf) {
    void *data;
    size_t len;
    napi_get_buffer_info(env, v, &data, &len);
    return (char *)data; /* index.js made it NUL-terminated */
  }
  return NULL;
}

static char *get_cstr(napi_env env, napi_value v, int *owned) {
  return get_cstr_buf(env, v, NULL, 0, owned);
}

/* A value stored with a hold: a Uint8Array's bytes (Buffers are Uint8Arrays; index.js made a
 * string UTF-8 bytes). 0 when v is none. A length 0 gets a non-NULL pointer too. */
static int get_bytes(napi_env env, napi_value v, const void **data, size_t *len) {
  bool is_typed = false;
  if (napi_is_typedarray(env, v, &is_typed) != napi_ok || !is_typed) return 0;
  napi_typedarray_type type;
  void *p = NULL;
  size_t n = 0;
  if (napi_get_typedarray_info(env, v, &type, &n, &p, NULL, NULL) != napi_ok ||
      type != napi_uint8_array) {
    return 0;
  }
  *data = p != NULL ? p : "";
  *len = n;
  return 1;
}

/* Holder k of info as [owner, remainingMs, fencingToken, value]: value a Buffer (a copy), or null
 * when the hold has none. */
static napi_value holder_row(napi_env env, const dlock_info *info, uint32_t k) {
  napi_value h, owner, value;
  const char *o = p_dlock_info_owner(info, k);
  size_t len = 0;
  const void *data = p_dlock_info_value(info, k, &len);
  napi_create_array_with_length(env, 4, &h);
  napi_create_string_utf8(env, o ? o : "", NAPI_AUTO_LENGTH, &owner);
  if (data != NULL && len > 0) {
    napi_create_buffer_copy(env, len, data, NULL, &value);
  } else {
    napi_get_null(env, &value);
  }
  napi_set_element(env, h, 0, owner);
  napi_set_element(env, h, 1, make_int(env, p_dlock_info_remaining_ms(info, k)));
  napi_set_element(env, h, 2, make_u64(env, p_dlock_info_fencing_token(info, k)));
  napi_set_element(env, h, 3, value);
  return h;
}

/* Hands an exception that JS left pending to process 'uncaughtException', as Node does. */
static void report_exception(napi_env env) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value e;
    napi_get_and_clear_last_exception(env, &e);
    napi_fatal_exception(env, e);
  }
}

/* ----- outcomes into JS ------------------------------------------------------------------- */

/* Opens the scopes of this uv callback at its first outcome. */
static void enter_js(addon_state *st) {
  if (st->in_uv != 1) return; /* not in a uv callback (JS called us), or already open */
  napi_open_handle_scope(st->env, &st->hscope);
  napi_value resource;
  napi_get_reference_value(st->env, st->resource, &resource);
  napi_open_callback_scope(st->env, resource, st->actx, &st->cscope);
  st->in_uv = 2;
}

static void uv_enter(addon_state *st) {
  st->in_uv = 1;
  st->reg_state[1] = 1;
  st->ev_at_leave = 1;
}

static void ev_deliver(addon_state *st);

static void uv_leave(addon_state *st) {
  /* From here on, JS may run: an event made now waits for ev_async. */
  st->ev_at_leave = 0;
  if (st->ev_ready) ev_deliver(st); /* before the promise jobs: a listener hears 'acquired' first */
  if (st->in_uv == 2) {
    napi_env env = st->env;
    napi_close_callback_scope(env, st->cscope); /* runs nextTicks and promise jobs */
    report_exception(env);
    if (st->reg_state[0] > 0) { /* locks made in this callback and still held: register them */
      napi_value fn, recv;
      napi_get_undefined(env, &recv);
      napi_get_reference_value(env, st->flush, &fn);
      napi_call_function(env, recv, fn, 0, NULL, NULL);
      report_exception(env);
    }
    napi_close_handle_scope(env, st->hscope);
  }
  st->in_uv = 0;
  st->reg_state[1] = 0;
}

/* onDone(id, status, lock, message, token, attempts): lock (a number, see lock_value), its
 * fencing token (a bigint) and attempts for an acquire that succeeded; message for a failure. */
static void call_done(uintptr_t id, dlock_status s, dlock_lock *lock) {
  addon_state *st = g;
  if (st == NULL) return;
  napi_env env = st->env;
  enter_js(st);
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[6], fn, recv;
  size_t argc = 3;
  napi_create_double(env, (double)id, &argv[0]);
  napi_create_int32(env, (int32_t)s, &argv[1]);
  if (lock != NULL) {
    argv[2] = lock_value(env, lock);
  } else {
    napi_get_null(env, &argv[2]);
  }
  if (s != DLOCK_OK) {
    const char *m = p_dlock_last_error(); /* set for done's duration */
    napi_create_string_utf8(env, m ? m : "", NAPI_AUTO_LENGTH, &argv[3]);
    argc = 4;
  }
  if (lock != NULL) {
    if (argc == 3) napi_get_undefined(env, &argv[3]);
    napi_create_bigint_uint64(env, p_dlock_lock_fencing_token(lock), &argv[4]);
    napi_create_uint32(env, p_dlock_lock_attempts(lock), &argv[5]);
    argc = 6;
  }
  napi_get_undefined(env, &recv);
  napi_get_reference_value(env, st->on_done, &fn);
  napi_call_function(env, recv, fn, argc, argv, NULL);
  report_exception(env);
  napi_close_handle_scope(env, scope);
}

static void on_acquired(dlock_status s, dlock_lock *lock, void *arg) {
  call_done((uintptr_t)arg, s, lock);
}

static void on_done(dlock_status s, void *arg) { call_done((uintptr_t)arg, s, NULL); }

/* An observer's report (dlock_observe), on this thread: onLeader(id, [owner, remainingMs, term,
 * value] | null). */
static void on_observed(const char *name, const dlock_info *leader, void *arg) {
  (void)name;
  addon_state *st = g;
  if (st == NULL) return;
  napi_env env = st->env;
  enter_js(st);
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[2], fn, recv;
  napi_create_double(env, (double)(uintptr_t)arg, &argv[0]);
  if (leader != NULL) {
    argv[1] = holder_row(env, leader, 0);
  } else {
    napi_get_null(env, &argv[1]);
  }
  napi_get_undefined(env, &recv);
  napi_get_reference_value(env, st->on_leader, &fn);
  napi_call_function(env, recv, fn, 2, argv, NULL);
  report_exception(env);
  napi_close_handle_scope(env, scope);
}

/* ----- events (dlock_client_set_event_hook) ------------------------------------------------ */

/* The hook: copies the event for JS. It runs where the library did the work: on this loop's
 * thread (a hooks client's calls, heartbeats and losses), inside one of our uv callbacks (handed
 * to JS as it ends, after the library returned) or inside a call JS made (handed over by
 * ev_async, on the next turn of the loop); on any other thread, by ev_async too. */
static void on_event(const dlock_event *e, void *arg) {
  addon_state *st = g;
  if (st == NULL || !st->ev_ready) return;
  const char *name = p_dlock_event_lock_name(e);
  const char *detail = p_dlock_event_detail(e);
  if (name == NULL) name = "";
  if (detail == NULL) detail = "";
  size_t name_len = strlen(name), detail_len = strlen(detail);
  ev_item *it = malloc(sizeof *it + name_len + 1 + detail_len + 1);
  if (it == NULL) return;
  it->next = NULL;
  it->client = (uint32_t)(uintptr_t)arg;
  it->type = p_dlock_event_type_name(p_dlock_event_type_of(e));
  it->attempts = p_dlock_event_attempts(e);
  it->elapsed_ms = p_dlock_event_elapsed_ms(e);
  it->token = p_dlock_event_fencing_token(e);
  it->status = (int32_t)p_dlock_event_status(e);
  memcpy(it->name, name, name_len + 1);
  it->detail = it->name + name_len + 1;
  memcpy(it->detail, detail, detail_len + 1);
  uv_mutex_lock(&st->ev_mu);
  if (st->ev_count >= EV_MAX) {
    uv_mutex_unlock(&st->ev_mu);
    free(it);
    return;
  }
  *st->ev_tail = it;
  st->ev_tail = &it->next;
  st->ev_count++;
  uv_mutex_unlock(&st->ev_mu);
  uv_thread_t self = uv_thread_self();
  if (!uv_thread_equal(&self, &st->js_thread) || !st->ev_at_leave) uv_async_send(&st->ev_async);
}

/* Hands the events waiting to JS, in order, one call each (in a uv callback of ours). What the
 * listeners make meanwhile comes by ev_async. */
static void ev_deliver(addon_state *st) {
  uv_mutex_lock(&st->ev_mu);
  ev_item *list = st->ev_head;
  st->ev_head = NULL;
  st->ev_tail = &st->ev_head;
  st->ev_count = 0;
  uv_mutex_unlock(&st->ev_mu);
  if (list == NULL) return;
  enter_js(st);
  napi_env env = st->env;
  napi_value fn, recv;
  napi_get_undefined(env, &recv);
  napi_get_reference_value(env, st->on_event, &fn);
  while (list != NULL) {
    ev_item *it = list;
    list = it->next;
    napi_handle_scope scope;
    napi_open_handle_scope(env, &scope);
    napi_value argv[8];
    napi_create_uint32(env, it->client, &argv[0]);
    napi_create_string_utf8(env, it->type ? it->type : "", NAPI_AUTO_LENGTH, &argv[1]);
    napi_create_string_utf8(env, it->name, NAPI_AUTO_LENGTH, &argv[2]);
    napi_create_uint32(env, it->attempts, &argv[3]);
    napi_create_int64(env, it->elapsed_ms, &argv[4]);
    napi_create_bigint_uint64(env, it->token, &argv[5]);
    napi_create_int32(env, it->status, &argv[6]);
    napi_create_string_utf8(env, it->detail, NAPI_AUTO_LENGTH, &argv[7]);
    free(it);
    napi_call_function(env, recv, fn, 8, argv, NULL);
    report_exception(env);
    napi_close_handle_scope(env, scope);
  }
}

static void on_ev_async(uv_async_t *async) {
  addon_state *st = g;
  if (st == NULL) return;
  uv_enter(st);
  uv_leave(st); /* delivers */
}

/* ----- the hooks (dlock/adapters/libuv.h, with unref'd handles) ------------------------- */

static void on_poll(uv_poll_t *poll, int status, int events) {
  uint32_t ready = 0;
  if (status < 0) {
    ready = DLOCK_LOOP_READ | DLOCK_LOOP_WRITE; /* an error: let dlock's read or write find it */
  } else {
    if (events & UV_READABLE) ready |= DLOCK_LOOP_READ;
    if (events & UV_WRITABLE) ready |= DLOCK_LOOP_WRITE;
  }
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)poll, &fd) != 0) return;
  addon_state *st = g;
  uv_enter(st);
  p_dlock_loop_fd_ready((dlock_loop *)poll->data, (int)fd, ready); /* poll may be gone after */
  uv_leave(st);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void hook_watch_fd(void *ctx, dlock_loop *loop, int fd, uint32_t events, void **fd_data) {
  client_ctx *c = ctx;
  uv_poll_t *poll = *fd_data;
  if (events == 0) {
    if (poll != NULL) {
      uv_poll_stop(poll); /* dlock may close fd as soon as this returns */
      uv_close((uv_handle_t *)poll, free_handle);
      *fd_data = NULL;
    }
    return;
  }
  if (poll == NULL) {
    poll = malloc(sizeof *poll);
    if (poll == NULL) return; /* the connection then times out and says so */
    if (uv_poll_init_socket(c->st->loop, poll, fd) != 0) {
      free(poll);
      return;
    }
    uv_unref((uv_handle_t *)poll);
    poll->data = loop;
    *fd_data = poll;
  }
  int flags = 0;
  if (events & DLOCK_LOOP_READ) flags |= UV_READABLE;
  if (events & DLOCK_LOOP_WRITE) flags |= UV_WRITABLE;
  uv_poll_start(poll, flags, on_poll);
}

static void on_timer(uv_timer_t *timer) {
  addon_state *st = g;
  uv_enter(st);
  p_dlock_loop_timer_fired((dlock_loop *)timer->data);
  uv_leave(st);
}

static void hook_set_timer(void *ctx, dlock_loop *loop, int64_t ms) {
  client_ctx *c = ctx;
  if (ms < 0) {
    uv_timer_stop(&c->timer);
    return;
  }
  c->timer.data = loop;
  uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
}

static void free_client(uv_handle_t *timer) {
  free((char *)timer - offsetof(client_ctx, timer));
}

static void hook_cleanup(void *ctx) {
  client_ctx *c = ctx;
  uv_close((uv_handle_t *)&c->timer, free_client);
}

static const dlock_loop_hooks hooks = {hook_watch_fd, hook_set_timer, hook_cleanup};

/* ----- exported functions ----------------------------------------------------------------- */

#define ARGS(n)                                                     \
  size_t argc = n;                                                  \
  napi_value argv[n];                                               \
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));      \
  for (size_t i_ = argc; i_ < n; i_++) napi_get_undefined(env, &argv[i_])

#define NEED_STATE()                                                         \
  if (g == NULL || g->env != env) {                                          \
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: init() first");    \
    return NULL;                                                             \
  }

/* init(libraryPath, queueAddress: bigint, onDone, flushRegistrations, regState: Int32Array(2),
 *      onLeader, onEvent) -> the library's version. */
static napi_value js_init(napi_env env, napi_callback_info info) {
  ARGS(7);
  if (g != NULL) {
    napi_throw_error(env, "ERR_DLOCK_ADDON",
                     g->env == env ? "dlock.node: init() was called already"
                                   : "dlock.node: loaded by another thread's environment already");
    return NULL;
  }
  int owned;
  char *path = get_cstr(env, argv[0], &owned);
  if (path == NULL) return throw_type(env, "libraryPath must be a string");
  /* The library lib/native.js loaded: dlopen of the same path returns that copy. */
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    char m[1200];
    snprintf(m, sizeof m, "dlock.node: dlopen(%s): %s", path, dlerror());
    if (owned) free(path);
    napi_throw_error(env, "ERR_DLOCK_ADDON", m);
    return NULL;
  }
  if (owned) free(path);
#define RESOLVE(ret, name, args)                                                            \
  p_##name = (ret(*) args)dlsym(lib, #name);                                                \
  if (p_##name == NULL) {                                                                   \
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks " #name);       \
    return NULL;                                                                            \
  }
  DLOCK_CALLS(RESOLVE)
#undef RESOLVE
#define RESOLVE_OPTIONAL(ret, name, args) p_##name = (ret(*) args)dlsym(lib, #name);
  DLOCK_OPTIONAL_CALLS(RESOLVE_OPTIONAL)
#undef RESOLVE_OPTIONAL
  uint64_t qaddr;
  bool lossless;
  if (napi_get_value_bigint_uint64(env, argv[1], &qaddr, &lossless) != napi_ok || qaddr == 0) {
    return throw_type(env, "queue must be a bigint address");
  }
  napi_valuetype t;
  napi_typeof(env, argv[2], &t);
  if (t != napi_function) return throw_type(env, "onDone must be a function");
  napi_typeof(env, argv[3], &t);
  if (t != napi_function) return throw_type(env, "flushRegistrations must be a function");
  napi_typeof(env, argv[5], &t);
  if (t != napi_function) return throw_type(env, "onLeader must be a function");
  napi_typeof(env, argv[6], &t);
  if (t != napi_function) return throw_type(env, "onEvent must be a function");
  bool is_typed = false;
  napi_is_typedarray(env, argv[4], &is_typed);
  napi_typedarray_type reg_type;
  size_t reg_length = 0;
  void *reg_data = NULL;
  if (is_typed) {
    napi_get_typedarray_info(env, argv[4], &reg_type, &reg_length, &reg_data, NULL, NULL);
  }
  if (!is_typed || reg_type != napi_int32_array || reg_length < 2 || reg_data == NULL) {
    return throw_type(env, "regState must be an Int32Array of 2");
  }

  addon_state *st = calloc(1, sizeof *st);
  if (st == NULL) {
    napi_throw_error(env, "ERR_DLOCK_ADDON", "out of memory");
    return NULL;
  }
  st->env = env;
  st->queue = (dlock_queue *)(uintptr_t)qaddr;
  CHECK(napi_get_uv_event_loop(env, &st->loop));
  CHECK(napi_create_reference(env, argv[2], 1, &st->on_done));
  CHECK(napi_create_reference(env, argv[3], 1, &st->flush));
  CHECK(napi_create_reference(env, argv[5], 1, &st->on_leader));
  CHECK(napi_create_reference(env, argv[6], 1, &st->on_event));
  CHECK(napi_create_reference(env, argv[4], 1, &st->reg_array));
  st->reg_state = reg_data; /* an ArrayBuffer's memory does not move */
  napi_value resource, name;
  CHECK(napi_create_object(env, &resource));
  CHECK(napi_create_reference(env, resource, 1, &st->resource));
  CHECK(napi_create_string_utf8(env, "DLOCK", NAPI_AUTO_LENGTH, &name));
  CHECK(napi_async_init(env, resource, name, &st->actx));
  g = st;
  napi_value out;
  CHECK(napi_create_string_utf8(env, p_dlock_version(), NAPI_AUTO_LENGTH, &out));
  return out;
}

/* The calling thread's dlock_last_error(): the message of the call that just failed. */
static napi_value js_last_error(napi_env env, napi_callback_info info) {
  (void)info;
  NEED_STATE();
  napi_value out;
  CHECK(napi_create_string_utf8(env, p_dlock_last_error(), NAPI_AUTO_LENGTH, &out));
  return out;
}

/* open(url) -> client (an external) | status (a number; lastError() says why). Connects and
 * checks the backend once, on this thread: blocking for that round trip. */
static napi_value js_open(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  int owned;
  char *url = get_cstr(env, argv[0], &owned);
  if (url == NULL) return throw_type(env, "url must be a string");
  client_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) {
    if (owned) free(url);
    return make_int(env, DLOCK_ENOMEM);
  }
  c->st = g;
  uv_timer_init(g->loop, &c->timer);
  uv_unref((uv_handle_t *)&c->timer);
  dlock_client *client = NULL;
  dlock_status s = p_dlock_client_open_hooks(url, &hooks, c, &client);
  if (owned) free(url);
  if (s != DLOCK_OK) {
    uv_close((uv_handle_t *)&c->timer, free_client);
    return make_int(env, s);
  }
  napi_value out;
  CHECK(napi_create_external(env, client, NULL, NULL, &out));
  return out;
}

/* close(client): releases what it holds (one round trip), cancels pending acquires (their
 * outcomes come back at once), and lets go of the loop (at once, or once in-flight answers are
 * in, up to 3 s). */
static napi_value js_close(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  p_dlock_client_close(c);
  return NULL;
}

static napi_value js_capabilities(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  return make_int(env, c ? p_dlock_client_capabilities(c) : 0);
}

/* The options of the last acquire, kept for the next one that asks the same (a loop of acquires
 * of one options object asks the same every time): the library copies what an acquire uses, so
 * one dlock_options serves them all, and only the loss report's tag changes. Its owner label is
 * not kept: an acquire that names one makes its own options. */
typedef struct options_key {
  int64_t wait_ms;
  uint64_t lease_ms, heartbeat_ms, retry_min, retry_max, max_hold_ms, min_hold_ms, lock_delay_ms;
  int64_t kind, permits, take;
  int fair;
  unsigned set; /* which of lease, heartbeat, retry, kind, permits, fair, max hold, min hold,
                 * lock delay, take were given */
} options_key;

static dlock_options *cached_options;
static options_key cached_key;

enum {
  SET_LEASE = 1,
  SET_HEARTBEAT = 2,
  SET_RETRY = 4,
  SET_KIND = 8,
  SET_PERMITS = 16,
  SET_FAIR = 32,
  SET_MAX_HOLD = 64,
  SET_MIN_HOLD = 128,
  SET_LOCK_DELAY = 256,
  SET_TAKE = 512
};

static dlock_status options_for(const options_key *k, dlock_options **out) {
  dlock_options *o = p_dlock_options_new();
  if (o == NULL) return DLOCK_ENOMEM;
  dlock_status s = p_dlock_options_set_wait_ms(o, k->wait_ms);
  if (s == DLOCK_OK && (k->set & SET_LEASE)) s = p_dlock_options_set_lease_ms(o, k->lease_ms);
  if (s == DLOCK_OK && (k->set & SET_HEARTBEAT)) {
    s = p_dlock_options_set_heartbeat_ms(o, k->heartbeat_ms);
  }
  if (s == DLOCK_OK && (k->set & SET_RETRY)) {
    s = p_dlock_options_set_retry_ms(o, k->retry_min, k->retry_max);
  }
  if (s == DLOCK_OK && (k->set & SET_KIND)) s = p_dlock_options_set_kind(o, (dlock_kind)k->kind);
  if (s == DLOCK_OK && (k->set & SET_PERMITS)) {
    s = p_dlock_options_set_permits(o, (uint32_t)k->permits);
  }
  /* js_acquire checked that the library has it */
  if (s == DLOCK_OK && (k->set & SET_TAKE)) s = p_dlock_options_set_take(o, (uint32_t)k->take);
  if (s == DLOCK_OK && (k->set & SET_FAIR)) s = p_dlock_options_set_fair(o, k->fair);
  /* js_acquire checked that the library has it */
  if (s == DLOCK_OK && (k->set & SET_MAX_HOLD)) s = p_dlock_options_set_max_hold_ms(o, k->max_hold_ms);
  if (s == DLOCK_OK && (k->set & SET_MIN_HOLD)) s = p_dlock_options_set_min_hold_ms(o, k->min_hold_ms);
  if (s == DLOCK_OK && (k->set & SET_LOCK_DELAY)) {
    s = p_dlock_options_set_lock_delay_ms(o, k->lock_delay_ms);
  }
  if (s != DLOCK_OK) {
    p_dlock_options_free(o);
    return s;
  }
  *out = o;
  return DLOCK_OK;
}

/* acquire(client, name, id, lostTag, waitMs, leaseMs, heartbeatMs, retryMin, retryMax, owner,
 *         kind, permits, fair[, value[, maxHoldMs[, minHoldMs, lockDelayMs[, releaseTag[,
 *         reentrant[, take]]]]]])
 * -> status: 0 = started (onDone(id, ...) follows), else nothing was (lastError() says why).
 * Losses go to index.js's queue under lostTag. value: a Uint8Array, or undefined for none;
 * maxHoldMs (ABI 5), minHoldMs and lockDelayMs (ABI 7): undefined for none. releaseTag (ABI 8):
 * release requests go to index.js's queue under it (DLOCK_QUEUE_RELEASE_REQUESTED); undefined:
 * the hold does not listen for them. reentrant (ABI 9): the context (a string) whose acquires
 * re-enter the hold (dlock_options_set_reentrant); undefined for none. take (ABI 10): how many
 * of the semaphore's permits the acquire takes (dlock_options_set_take); undefined for 1. */
static napi_value js_acquire(napi_env env, napi_callback_info info) {
  ARGS(20);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  char name_buf[512];
  int name_owned;
  char *name = get_cstr_buf(env, argv[1], name_buf, sizeof name_buf, &name_owned);
  if (name == NULL) return throw_type(env, "name must be a string or Buffer");
  int64_t id = 0, lost_tag = 0, i64;
  uint64_t u64, u64b;
  get_i64(env, argv[2], &id);
  get_i64(env, argv[3], &lost_tag);
  options_key k;
  memset(&k, 0, sizeof k); /* compared with memcmp: no stray bytes */
  k.wait_ms = -1;
  if (get_i64(env, argv[4], &i64)) k.wait_ms = i64;
  if (is_set(env, argv[5]) && get_u64(env, argv[5], &u64)) {
    k.lease_ms = u64;
    k.set |= SET_LEASE;
  }
  if (is_set(env, argv[6]) && get_u64(env, argv[6], &u64)) {
    k.heartbeat_ms = u64;
    k.set |= SET_HEARTBEAT;
  }
  if (is_set(env, argv[7]) && get_u64(env, argv[7], &u64) && get_u64(env, argv[8], &u64b)) {
    k.retry_min = u64;
    k.retry_max = u64b;
    k.set |= SET_RETRY;
  }
  if (is_set(env, argv[10]) && get_i64(env, argv[10], &i64)) {
    k.kind = i64;
    k.set |= SET_KIND;
  }
  if (is_set(env, argv[11]) && get_i64(env, argv[11], &i64)) {
    k.permits = i64;
    k.set |= SET_PERMITS;
  }
  if (is_set(env, argv[19]) && get_i64(env, argv[19], &i64)) {
    if (p_dlock_options_set_take == NULL) { /* index.js says so before asking */
      if (name_owned) free(name);
      napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_options_set_take");
      return NULL;
    }
    k.take = i64;
    k.set |= SET_TAKE;
  }
  if (is_set(env, argv[12])) {
    bool fair = true;
    napi_get_value_bool(env, argv[12], &fair);
    k.fair = fair ? 1 : 0;
    k.set |= SET_FAIR;
  }
  if (is_set(env, argv[14]) && get_u64(env, argv[14], &u64)) {
    if (p_dlock_options_set_max_hold_ms == NULL) { /* index.js says so before asking */
      if (name_owned) free(name);
      napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_options_set_max_hold_ms");
      return NULL;
    }
    k.max_hold_ms = u64;
    k.set |= SET_MAX_HOLD;
  }
  if (is_set(env, argv[15]) && get_u64(env, argv[15], &u64)) {
    if (p_dlock_options_set_min_hold_ms == NULL) { /* index.js says so before asking */
      if (name_owned) free(name);
      napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_options_set_min_hold_ms");
      return NULL;
    }
    k.min_hold_ms = u64;
    k.set |= SET_MIN_HOLD;
  }
  if (is_set(env, argv[16]) && get_u64(env, argv[16], &u64)) {
    if (p_dlock_options_set_lock_delay_ms == NULL) { /* index.js says so before asking */
      if (name_owned) free(name);
      napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_options_set_lock_delay_ms");
      return NULL;
    }
    k.lock_delay_ms = u64;
    k.set |= SET_LOCK_DELAY;
  }
  int64_t release_tag = 0;
  int listens = is_set(env, argv[17]) && get_i64(env, argv[17], &release_tag);
  if (listens && p_dlock_options_set_on_release_requested_queued == NULL) { /* index.js says so first */
    if (name_owned) free(name);
    napi_throw_error(env, "ERR_DLOCK_ADDON",
                     "dlock.node: the library lacks dlock_options_set_on_release_requested_queued");
    return NULL;
  }
  int reentrant = is_set(env, argv[18]);
  if (reentrant && p_dlock_options_set_reentrant == NULL) { /* index.js says so first */
    if (name_owned) free(name);
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_options_set_reentrant");
    return NULL;
  }
  dlock_options *o = NULL;
  dlock_status s = DLOCK_OK;
  /* An owner label, a value or a reentrant context: options of their own. */
  const void *value = NULL;
  size_t value_len = 0;
  int has_value = argc > 13 && get_bytes(env, argv[13], &value, &value_len);
  int own_options = has_value || is_set(env, argv[9]) || reentrant;
  if (!own_options && cached_options != NULL && memcmp(&k, &cached_key, sizeof k) == 0) {
    o = cached_options;
  } else {
    s = options_for(&k, &o);
    if (s == DLOCK_OK && is_set(env, argv[9])) {
      int owner_owned;
      char *owner = get_cstr(env, argv[9], &owner_owned);
      s = p_dlock_options_set_owner(o, owner);
      if (owner_owned) free(owner);
    }
    if (s == DLOCK_OK && has_value) s = p_dlock_options_set_value(o, value, value_len);
    if (s == DLOCK_OK && reentrant) {
      int context_owned;
      char *context = get_cstr(env, argv[18], &context_owned);
      s = context != NULL ? p_dlock_options_set_reentrant(o, context) : DLOCK_ENOMEM;
      if (context_owned) free(context);
    }
    if (s == DLOCK_OK && !own_options) { /* the cache's from now on */
      if (cached_options != NULL) p_dlock_options_free(cached_options);
      cached_options = o;
      cached_key = k;
    }
  }
  if (s == DLOCK_OK) s = p_dlock_options_set_on_lost_queued(o, g->queue, (uint64_t)lost_tag);
  /* Set or cleared on every acquire: the cached options are shared by acquires with and without. */
  if (s == DLOCK_OK && p_dlock_options_set_on_release_requested_queued != NULL) {
    s = p_dlock_options_set_on_release_requested_queued(o, listens ? g->queue : NULL, (uint64_t)release_tag);
  }
  if (s == DLOCK_OK) s = p_dlock_acquire_async(c, name, o, on_acquired, (void *)(uintptr_t)id);
  if (o != NULL && o != cached_options) p_dlock_options_free(o); /* the acquire keeps its own copy */
  if (name_owned) free(name);
  return make_int(env, s);
}

/* cancel(client, id) -> status (EINVAL: none pending). */
static napi_value js_cancel(napi_env env, napi_callback_info info) {
  ARGS(2);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  int64_t id = 0;
  get_i64(env, argv[1], &id);
  if (c == NULL) return make_int(env, DLOCK_EINVAL);
  return make_int(env, p_dlock_acquire_cancel(c, (void *)(uintptr_t)id));
}

/* release(lock, id) -> status; id 0: nobody waits for the outcome. The lock is freed either way. */
static napi_value js_release(napi_env env, napi_callback_info info) {
  ARGS(2);
  NEED_STATE();
  dlock_lock *l = lock_of(env, argv[0]);
  if (l == NULL) return throw_type(env, "lock must be a lock");
  int64_t id = 0;
  get_i64(env, argv[1], &id);
  return make_int(env, p_dlock_release_async(l, id != 0 ? on_done : NULL, (void *)(uintptr_t)id));
}

/* extend(lock, leaseMs, id) -> status. */
static napi_value js_extend(napi_env env, napi_callback_info info) {
  ARGS(3);
  NEED_STATE();
  dlock_lock *l = lock_of(env, argv[0]);
  if (l == NULL) return throw_type(env, "lock must be a lock");
  uint64_t lease = 0;
  int64_t id = 0;
  get_u64(env, argv[1], &lease);
  get_i64(env, argv[2], &id);
  return make_int(env, p_dlock_extend_async(l, lease, on_done, (void *)(uintptr_t)id));
}

/* setValue(lock, value: Uint8Array | null, id) -> status (null: the value is removed). */
static napi_value js_set_value(napi_env env, napi_callback_info info) {
  ARGS(3);
  NEED_STATE();
  dlock_lock *l = lock_of(env, argv[0]);
  if (l == NULL) return throw_type(env, "lock must be a lock");
  const void *data = "";
  size_t len = 0;
  if (is_set(env, argv[1]) && !get_bytes(env, argv[1], &data, &len)) {
    return throw_type(env, "value must be a Uint8Array");
  }
  int64_t id = 0;
  get_i64(env, argv[2], &id);
  return make_int(env,
                  p_dlock_lock_set_value_async(l, data, len, on_done, (void *)(uintptr_t)id));
}

/* observe(client, name, id) -> observer (an external) | status (a number; lastError() says
 * why). Reports: onLeader(id, ...) on this thread, never inside observe(); none once
 * unobserve() returned or the client closed. */
static napi_value js_observe(napi_env env, napi_callback_info info) {
  ARGS(3);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  char name_buf[512];
  int owned;
  char *name = get_cstr_buf(env, argv[1], name_buf, sizeof name_buf, &owned);
  if (name == NULL) return throw_type(env, "name must be a string or Buffer");
  int64_t id = 0;
  get_i64(env, argv[2], &id);
  dlock_observer *ob = NULL;
  dlock_status s = p_dlock_observe(c, name, on_observed, (void *)(uintptr_t)id, &ob);
  if (owned) free(name);
  if (s != DLOCK_OK) return make_int(env, s);
  napi_value out;
  if (napi_create_external(env, ob, NULL, NULL, &out) != napi_ok) {
    p_dlock_observer_cancel(ob);
    return make_int(env, DLOCK_ENOMEM);
  }
  return out;
}

/* unobserve(observer): no report after it returns (once only: it frees the observer). */
static napi_value js_unobserve(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  dlock_observer *ob = external_of(env, argv[0]);
  if (ob == NULL) return throw_type(env, "observer must be an observer");
  p_dlock_observer_cancel(ob);
  return NULL;
}

static napi_value js_token(napi_env env, napi_callback_info info) {
  ARGS(1);
  return make_u64(env, p_dlock_lock_fencing_token(lock_of(env, argv[0])));
}

static napi_value js_attempts(napi_env env, napi_callback_info info) {
  ARGS(1);
  return make_int(env, p_dlock_lock_attempts(lock_of(env, argv[0])));
}

static napi_value js_valid(napi_env env, napi_callback_info info) {
  ARGS(1);
  napi_value out;
  napi_get_boolean(env, p_dlock_lock_is_valid(lock_of(env, argv[0])) == 1, &out);
  return out;
}

/* Milliseconds left: Infinity for no expiry. */
static napi_value js_remaining(napi_env env, napi_callback_info info) {
  ARGS(1);
  int64_t v = p_dlock_lock_remaining_ms(lock_of(env, argv[0]));
  napi_value out;
  napi_create_double(env, v == INT64_MAX ? 1.0 / 0.0 : (double)v, &out);
  return out;
}

/* ----- metrics, loss causes and events ----------------------------------------------------- */

#define NEED_CALL(name)                                                                  \
  if (p_##name == NULL) {                                                                \
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks " #name);    \
    return NULL;                                                                         \
  }

/* metricsText(client) -> the Prometheus text | status (a number; lastError() says why). */
static napi_value js_metrics_text(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  NEED_CALL(dlock_client_metrics_text);
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  size_t needed = 0;
  dlock_status s = p_dlock_client_metrics_text(c, NULL, 0, &needed);
  for (int tries = 0; s == DLOCK_OK && tries < 8; tries++) {
    size_t len = needed + 256; /* room for a label value that appears meanwhile */
    char *buf = malloc(len);
    if (buf == NULL) return make_int(env, DLOCK_ENOMEM);
    s = p_dlock_client_metrics_text(c, buf, len, &needed);
    if (s == DLOCK_OK) {
      napi_value out;
      napi_status ns = napi_create_string_utf8(env, buf, needed, &out);
      free(buf);
      CHECK(ns);
      return out;
    }
    free(buf);
    if (s == DLOCK_EINVAL && needed >= len) s = DLOCK_OK; /* it grew past the room: again */
  }
  return make_int(env, s == DLOCK_OK ? DLOCK_EINTERNAL : s);
}

/* metrics(client) -> [[family, type, help, name, labels, value], ...] | status. */
static napi_value js_metrics(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  NEED_CALL(dlock_client_metrics);
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  dlock_metrics *m = NULL;
  dlock_status s = p_dlock_client_metrics(c, &m);
  if (s != DLOCK_OK) return make_int(env, s);
  size_t n = p_dlock_metrics_count(m);
  napi_value out;
  if (napi_create_array_with_length(env, n, &out) != napi_ok) {
    p_dlock_metrics_free(m);
    return make_int(env, DLOCK_ENOMEM);
  }
  for (size_t k = 0; k < n; k++) {
    const char *parts[5] = {p_dlock_metrics_family(m, k), p_dlock_metrics_type(m, k),
                            p_dlock_metrics_help(m, k), p_dlock_metrics_name(m, k),
                            p_dlock_metrics_labels(m, k)};
    napi_value row, v;
    napi_create_array_with_length(env, 6, &row);
    for (uint32_t i = 0; i < 5; i++) {
      napi_create_string_utf8(env, parts[i] ? parts[i] : "", NAPI_AUTO_LENGTH, &v);
      napi_set_element(env, row, i, v);
    }
    napi_create_double(env, p_dlock_metrics_value(m, k), &v);
    napi_set_element(env, row, 5, v);
    napi_set_element(env, out, (uint32_t)k, row);
  }
  p_dlock_metrics_free(m);
  return out;
}

/* lostCause(lock) -> "CAUSE: details" | null (held and valid). */
static napi_value js_lost_cause(napi_env env, napi_callback_info info) {
  ARGS(1);
  NEED_STATE();
  NEED_CALL(dlock_lock_lost_cause);
  dlock_lock *l = lock_of(env, argv[0]);
  if (l == NULL) return throw_type(env, "lock must be a lock");
  const char *cause = p_dlock_lock_lost_cause(l);
  napi_value out;
  if (cause == NULL) {
    napi_get_null(env, &out);
  } else {
    CHECK(napi_create_string_utf8(env, cause, NAPI_AUTO_LENGTH, &out));
  }
  return out;
}

/* events(client, clientId) -> status: from now on, the client's events go to onEvent(clientId,
 * ...) on this thread (dlock_client_set_event_hook: once per client). */
static napi_value js_events(napi_env env, napi_callback_info info) {
  ARGS(2);
  NEED_STATE();
  NEED_CALL(dlock_client_set_event_hook);
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  uint32_t id = 0;
  napi_get_value_uint32(env, argv[1], &id);
  if (!g->ev_ready) {
    if (uv_mutex_init(&g->ev_mu) != 0) return make_int(env, DLOCK_ENOMEM);
    if (uv_async_init(g->loop, &g->ev_async, on_ev_async) != 0) {
      uv_mutex_destroy(&g->ev_mu);
      return make_int(env, DLOCK_ENOMEM);
    }
    uv_unref((uv_handle_t *)&g->ev_async); /* waiting events keep no process alive */
    g->js_thread = uv_thread_self();
    g->ev_head = NULL;
    g->ev_tail = &g->ev_head;
    g->ev_ready = 1;
  }
  return make_int(env, p_dlock_client_set_event_hook(c, on_event, (void *)(uintptr_t)id));
}

/* ----- inspect and break: blocking calls, on libuv's pool (the library runs them for another
 * thread while this loop turns) ------------------------------------------------------------ */

enum { READ_INSPECT = 0, READ_LEADER = 1, READ_BREAK = 2, READ_REQUEST = 3 };

typedef struct inspect_work {
  napi_async_work work;
  napi_ref cb;
  dlock_client *client;
  char *name;
  int what;     /* READ_INSPECT, READ_LEADER (dlock_leader), READ_BREAK (dlock_break_with) or
                   READ_REQUEST (dlock_request_release_errbuf: no info) */
  char *reason; /* READ_BREAK, READ_REQUEST: NULL for none */
  uint32_t flags;
  dlock_info *info;
  dlock_status status;
  char err[2048];
} inspect_work;

static void inspect_execute(napi_env env, void *data) {
  (void)env;
  inspect_work *w = data;
  w->err[0] = '\0';
  if (w->what == READ_INSPECT) {
    w->status = p_dlock_inspect_errbuf(w->client, w->name, &w->info, w->err, sizeof w->err);
    return;
  }
  if (w->what == READ_REQUEST) {
    w->status = p_dlock_request_release_errbuf(w->client, w->name, w->reason, w->err, sizeof w->err);
    return;
  }
  /* No _errbuf form: the message is this (pool) thread's dlock_last_error(), read here. */
  if (w->what == READ_BREAK) {
    w->status = p_dlock_break_with(w->client, w->name, w->reason, w->flags, &w->info);
  } else {
    w->status = p_dlock_leader(w->client, w->name, &w->info);
  }
  if (w->status != DLOCK_OK) {
    const char *m = p_dlock_last_error();
    snprintf(w->err, sizeof w->err, "%s", m ? m : "");
  }
}

/* cb(status, message) or cb(0, [kind, permits, closedMs, closedBy,
 *                              [owner, remainingMs, token, value], ...]) (ABI 6: closedMs and
 * closedBy, 0 and "" from a library without them); READ_REQUEST: cb(status, message), the
 * message "" for DLOCK_OK */
static void inspect_complete(napi_env env, napi_status status, void *data) {
  inspect_work *w = data;
  napi_value argv[2], fn, recv;
  if (status != napi_ok && w->status == DLOCK_OK) w->status = DLOCK_ECANCELLED;
  napi_create_int32(env, (int32_t)w->status, &argv[0]);
  if (w->status != DLOCK_OK || w->what == READ_REQUEST) {
    napi_create_string_utf8(env, w->err, NAPI_AUTO_LENGTH, &argv[1]);
  } else {
    uint32_t n = p_dlock_info_holders(w->info);
    napi_value closed_by;
    const char *by = p_dlock_info_closed_by != NULL ? p_dlock_info_closed_by(w->info) : NULL;
    napi_create_string_utf8(env, by ? by : "", NAPI_AUTO_LENGTH, &closed_by);
    napi_create_array_with_length(env, 4 + n, &argv[1]);
    napi_set_element(env, argv[1], 0, make_int(env, p_dlock_info_kind(w->info)));
    napi_set_element(env, argv[1], 1, make_int(env, p_dlock_info_permits(w->info)));
    napi_set_element(env, argv[1], 2,
                     make_int(env, p_dlock_info_closed_ms != NULL ? p_dlock_info_closed_ms(w->info) : 0));
    napi_set_element(env, argv[1], 3, closed_by);
    for (uint32_t k = 0; k < n; k++) {
      napi_set_element(env, argv[1], 4 + k, holder_row(env, w->info, k));
    }
    p_dlock_info_free(w->info);
  }
  napi_get_undefined(env, &recv);
  napi_get_reference_value(env, w->cb, &fn);
  napi_call_function(env, recv, fn, 2, argv, NULL);
  report_exception(env);
  napi_delete_reference(env, w->cb);
  napi_delete_async_work(env, w->work);
  free(w->name);
  free(w->reason);
  free(w);
}

/* inspect(client, name, cb[, leader]): cb(status, message | info) from the loop, later; leader
 * true: dlock_leader's answer (one holder or none) instead of dlock_inspect's. */
static napi_value js_inspect(napi_env env, napi_callback_info info) {
  ARGS(4);
  NEED_STATE();
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  int owned;
  char *name = get_cstr(env, argv[1], &owned);
  if (name == NULL) return throw_type(env, "name must be a string or Buffer");
  inspect_work *w = calloc(1, sizeof *w);
  if (w == NULL || (!owned && (name = strdup(name)) == NULL)) {
    if (owned) free(name);
    free(w);
    napi_throw_error(env, "ERR_DLOCK_ADDON", "out of memory");
    return NULL;
  }
  w->name = name;
  w->client = c;
  if (is_set(env, argv[3])) {
    bool leader = false;
    napi_get_value_bool(env, argv[3], &leader);
    w->what = leader ? READ_LEADER : READ_INSPECT;
  }
  napi_value resource_name;
  CHECK(napi_create_string_utf8(env, "DLOCK_INSPECT", NAPI_AUTO_LENGTH, &resource_name));
  CHECK(napi_create_reference(env, argv[2], 1, &w->cb));
  CHECK(napi_create_async_work(env, NULL, resource_name, inspect_execute, inspect_complete, w,
                               &w->work));
  CHECK(napi_queue_async_work(env, w->work));
  return NULL;
}

/* breakLock and requestRelease: a name and an optional reason (strings or Buffers, copied), a
 * call on libuv's pool (inspect_execute, by `what`), and cb(status, message, ...) after it. */
static napi_value queue_name_reason_work(napi_env env, dlock_client *c, napi_value name_arg,
                                         napi_value reason_arg, napi_value cb_arg, int what,
                                         uint32_t flags, const char *resource) {
  int owned, reason_owned = 0;
  char *name = get_cstr(env, name_arg, &owned);
  if (name == NULL) return throw_type(env, "name must be a string or Buffer");
  if (!owned && (name = strdup(name)) == NULL) goto nomem;
  char *reason = NULL;
  if (is_set(env, reason_arg)) {
    reason = get_cstr(env, reason_arg, &reason_owned);
    if (reason == NULL) {
      free(name);
      return throw_type(env, "reason must be a string or Buffer");
    }
    if (!reason_owned && (reason = strdup(reason)) == NULL) {
      free(name);
      goto nomem;
    }
  }
  inspect_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    free(name);
    free(reason);
    goto nomem;
  }
  w->name = name;
  w->reason = reason;
  w->flags = flags;
  w->client = c;
  w->what = what;
  napi_value resource_name;
  CHECK(napi_create_string_utf8(env, resource, NAPI_AUTO_LENGTH, &resource_name));
  CHECK(napi_create_reference(env, cb_arg, 1, &w->cb));
  CHECK(napi_create_async_work(env, NULL, resource_name, inspect_execute, inspect_complete, w,
                               &w->work));
  CHECK(napi_queue_async_work(env, w->work));
  return NULL;
nomem:
  napi_throw_error(env, "ERR_DLOCK_ADDON", "out of memory");
  return NULL;
}

/* breakLock(client, name, reason, flags, cb) (ABI 6): dlock_break_with on libuv's pool, as
 * inspect; cb(status, message | info), info as inspect's: the holds it broke, and closedMs.
 * reason: a string or Buffer, or null/undefined for none. index.js checks that the library has
 * dlock_break_with before asking. */
static napi_value js_break(napi_env env, napi_callback_info info) {
  ARGS(5);
  NEED_STATE();
  if (p_dlock_break_with == NULL) {
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_break_with");
    return NULL;
  }
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  uint32_t flags = 0;
  if (napi_get_value_uint32(env, argv[3], &flags) != napi_ok) return throw_type(env, "flags must be a number");
  return queue_name_reason_work(env, c, argv[1], argv[2], argv[4], READ_BREAK, flags, "DLOCK_BREAK");
}

/* requestRelease(client, name, reason, cb) (ABI 8): dlock_request_release_errbuf on libuv's
 * pool, as breakLock; cb(status, message): 0 when the name had holders to ask, DLOCK_NOT_HELD
 * when nobody holds it. reason: a string or Buffer, or null/undefined for none. index.js checks
 * that the library has it before asking. */
static napi_value js_request_release(napi_env env, napi_callback_info info) {
  ARGS(4);
  NEED_STATE();
  if (p_dlock_request_release_errbuf == NULL) {
    napi_throw_error(env, "ERR_DLOCK_ADDON", "dlock.node: the library lacks dlock_request_release_errbuf");
    return NULL;
  }
  dlock_client *c = external_of(env, argv[0]);
  if (c == NULL) return throw_type(env, "client must be a client");
  return queue_name_reason_work(env, c, argv[1], argv[2], argv[3], READ_REQUEST, 0,
                                "DLOCK_REQUEST_RELEASE");
}

/* ----- the module ------------------------------------------------------------------------- */

static napi_value module_init(napi_env env, napi_value exports) {
  static const struct {
    const char *name;
    napi_callback fn;
  } fns[] = {
      {"init", js_init},         {"lastError", js_last_error}, {"open", js_open},
      {"close", js_close},       {"capabilities", js_capabilities},
      {"acquire", js_acquire},   {"cancel", js_cancel},        {"release", js_release},
      {"extend", js_extend},     {"token", js_token},          {"attempts", js_attempts},
      {"valid", js_valid},       {"remaining", js_remaining},  {"inspect", js_inspect},
      {"setValue", js_set_value}, {"observe", js_observe},     {"unobserve", js_unobserve},
      {"metricsText", js_metrics_text}, {"metrics", js_metrics}, {"lostCause", js_lost_cause},
      {"events", js_events},     {"breakLock", js_break},      {"requestRelease", js_request_release},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    napi_value f;
    CHECK(napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].fn, NULL, &f));
    CHECK(napi_set_named_property(env, exports, fns[i].name, f));
  }
  napi_value abi;
  CHECK(napi_create_int32(env, ADDON_ABI, &abi));
  CHECK(napi_set_named_property(env, exports, "abi", abi));
  return exports;
}

NAPI_MODULE(dlock, module_init)
