/* dlock: distributed locks with fencing tokens and lease heartbeats.
 *
 * ---------------------------------------------------------------------------------------------
 * Conventions
 * ---------------------------------------------------------------------------------------------
 * Handles. Every object is an opaque pointer made by a create/open call and destroyed by its
 *   matching call: dlock_client_open / dlock_client_close, dlock_options_new / dlock_options_free,
 *   dlock_acquire / dlock_release, dlock_queue_new / dlock_queue_free. Destroy functions accept
 *   NULL.
 *
 * Errors. Every call that can fail returns a dlock_status. DLOCK_OK (0) is success. On failure,
 *   dlock_last_error() returns a message for the calling thread that says what went wrong (it
 *   names the bad argument, URL part or server address). Output parameters are written only on
 *   success. A failed call changes nothing: no lock is left behind, no handle is freed, except
 *   that dlock_release always frees its lock.
 *
 * Strings. Arguments are NUL-terminated UTF-8 (lock names may hold any byte but NUL), copied
 *   before the call returns. Returned strings belong to the library: dlock_status_str and
 *   dlock_version return static strings; dlock_last_error's string stays valid until the calling
 *   thread's next dlock call.
 *
 * Integers. Fixed-width types only. Durations are milliseconds. Fencing tokens are uint64_t.
 *
 * Threads. A dlock_client is thread-safe: any number of threads may acquire, extend and release
 *   through one client at once; blocking calls do not serialize on one connection. A dlock_lock
 *   may be used from any thread; its accessors (fencing_token, is_valid, remaining_ms,
 *   attempts, name) may be called from any thread at any time until it is released, while
 *   dlock_extend and dlock_release of one lock must not run in two threads at once. A client from
 *   dlock_client_open owns one background thread (libevent) that runs heartbeats, pub/sub
 *   wake-ups and lost-lock callbacks; a client from dlock_client_open_evbase or
 *   dlock_client_open_hooks creates no thread and runs all of that on the caller's loop (a
 *   libevent event_base, or any loop through a hook table: see "event-loop integration" and
 *   "any event loop" below).
 *
 * Callbacks. on_lost and the _async done callbacks run on the client's loop thread (its own,
 *   or the thread running the caller's loop). They may call any dlock function, including releasing
 *   the lock and closing the client (the teardown then finishes after the callback returns).
 *   Once dlock_release returns, that lock's on_lost is neither running nor
 *   going to run (unless release was called from inside the callback), so its arg may be freed.
 *   A callback holds up the client's loop thread (heartbeats included) while it runs: keep it
 *   short, or use a completion queue (dlock_queue), which hands outcomes to your own thread.
 *
 * Exceptions. None cross this boundary; C++ errors inside become DLOCK_EINTERNAL or DLOCK_ENOMEM.
 *
 * ABI. Only symbols named dlock_* are exported. Status numbers never change; new codes and new
 *   functions are only appended. The SONAME changes only with the major version.
 * ---------------------------------------------------------------------------------------------
 *
 * URLs (dlock_client_open):
 *   redis://[[user]:password@]host[:port][/db][?params]     one Redis server, default port 6379
 *   redis+unix://[[user]:password@]/path/to.sock[?db=N&params]
 *   rediss://...                            one Redis server over TLS (as redis:// with tls=1)
 *   redis-cluster://[[user]:password@]host:port[,host:port...][?params]
 *                                           Redis Cluster from these seed nodes: slot routing,
 *                                           MOVED/ASK, sharded pub/sub
 *   redis-sentinel://[[user]:password@]host:port[,host:port...]/MASTER_NAME[?db=N
 *                    &sentinel_password=P&params]
 *                                           the master that Sentinel names (default port
 *                                           26379), followed through failovers
 *   redlock://[[user]:password@]host:port,host:port,host:port[,...][?params]
 *                                           Redlock: a quorum (N/2+1) of N >= 3 independent
 *                                           masters; fencing tokens best effort (no
 *                                           DLOCK_CAP_FENCING_STRICT; see docs/redlock.md)
 *   TLS on every Redis scheme and etcd://: tls=1, ca=FILE, cert=FILE, key=FILE, sni=NAME,
 *   tls_verify=0 (rediss:// implies tls=1). wait_replicas=N (redis, rediss, cluster,
 *   sentinel): after each acquire, WAIT for N replicas to acknowledge it; it narrows the window
 *   in which a failover loses a lock, but, as Redis's own docs say, WAIT does not make Redis
 *   strongly consistent.
 *   Common params: prefix= (key prefix, default "dlock:"), connect_timeout_ms= (default 2000:
 *   the whole connect and handshake), timeout_ms= (default 3000: a whole command, sent to last
 *   byte of the reply), metrics_groups= (default 0: per-group metrics series, see "metrics and
 *   loss causes"). Unknown parameters are an error. Bounds, with C = connect_timeout_ms,
 *   T = timeout_ms, W = wait_ms: open, release, extend and a one-try acquire take at most
 *   C + T (DynamoDB: T); an acquire that waits W + C + T (DynamoDB: W + T). A release, extend
 *   or set_value the server refuses takes one dlock_inspect bound more, to say why
 *   (dlock_lock_lost_cause), and a refused renewal's on_lost comes that much later (the lock is
 *   invalid from the refusal on).
 *
 * Redis keys for lock NAME: <prefix>{NAME} holds the owner, <prefix>{NAME}:fence the fencing
 * counter (never expires); releases are published on <prefix>{NAME}:released. *
 *   dynamodb://TABLE?region=R[&endpoint=URL][&partition_key=NAME][&sort_key=NAME]
 *                   [&trust_local_time=1][&tls_verify=0][&params]
 *   One item per lock in DynamoDB table TABLE, whose key is the string attribute partition_key
 *   (default "id") and, when sort_key is given, the string sort key sort_key. Without a sort key
 *   the item's partition value is <prefix>NAME; with one, a lock name is "PARTITION/SORT" (split
 *   at its first '/', both parts non-empty): partition value <prefix>PARTITION, sort value SORT.
 *   Names must be UTF-8. The region comes from region=, else AWS_REGION, AWS_DEFAULT_REGION or
 *   the profile's region in ~/.aws/config; the endpoint from endpoint=, else
 *   AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's public
 *   endpoint for the region (https, certificates verified unless tls_verify=0). Credentials come
 *   from the AWS chain: environment, ~/.aws/credentials + ~/.aws/config (AWS_PROFILE), container
 *   credentials, EC2 instance metadata (IMDSv2). Besides the key, the protocol writes the
 *   attributes owner, recordVersion, leaseMs, renewedAtMs, fence, holds, permits, writer,
 *   data, closed, broken, minHoldMs, lockDelayMs and releaseRequest (partition_key / sort_key
 *   may not use these names). DynamoDB has no release notifications: a waiter wakes when the
 *   holder's lease may have run out or on its jittered retry. A holder that stops heartbeating is
 *   taken over once its recordVersion has stood unchanged for a whole lease on the waiter's
 *   monotonic clock (trust_local_time=1: once renewedAtMs + leaseMs is past the waiter's wall
 *   clock). The table must exist: create it with dlock_backend_prepare (or `dlock prepare`).
 *
 *   etcd://host[:port][,host[:port]...][?tls=1&ca=&cert=&key=&sni=&tls_verify=0&params]
 *   An etcd v3 cluster through its JSON gateway (port 2379 unless given), endpoints tried in
 *   turn. Lock NAME is the key <prefix>NAME; the fencing token is its create_revision. Leases
 *   are whole seconds on etcd: a lock's key may outlive a dead holder by up to about 2 s beyond
 *   lease_ms (lease_ms rounded up, plus one), while the holder's own validity keeps to
 *   lease_ms. Bounds: every call T (open, acquire, release, extend, inspect); waiting W + T.
 *
 *   postgres://[user[:password]@]host[:port][,host[:port]...]/DATABASE[?table=T&unlogged=1
 *              &target_session_attrs=A&tls=1&ca=&cert=&key=&tls_verify=0&params]
 *   (postgresql:// too) PostgreSQL through libpq, the hosts tried in turn (port 5432 unless
 *   given). Lock NAME is rows of table T (default dlock_locks; create it with
 *   dlock_backend_prepare or `dlock prepare`); leases run on the server's clock; the fencing
 *   token is max(counter + 1, the server's clock in microseconds). prefix= is refused.
 *   Bounds: every call T, connects included (C bounds a connect); waiting W + T.
 */
#ifndef DLOCK_DLOCK_H_
#define DLOCK_DLOCK_H_

#include <stddef.h>
#include <stdint.h>

#include "dlock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0

/* Longest lock name, in bytes. */
#define DLOCK_MAX_NAME_BYTES 1024
/* Longest owner label, in bytes. */
#define DLOCK_MAX_OWNER_BYTES 256
/* Longest value stored with a hold, in bytes (see "values stored with a hold"). */
#define DLOCK_MAX_VALUE_BYTES 4096
/* Longest reason given to dlock_break, in bytes. */
#define DLOCK_MAX_REASON_BYTES 1024

typedef struct dlock_client dlock_client;   /* thread-safe; one backend; owns its connections */
typedef struct dlock_lock dlock_lock;       /* one held lock; freed by dlock_release */
typedef struct dlock_options dlock_options; /* acquire options; NULL means defaults */

typedef enum dlock_status { /* numbers never change; new codes only appended */
  DLOCK_OK = 0,
  DLOCK_NOT_ACQUIRED = 1, /* someone else holds it and the wait ran out */
  DLOCK_NOT_HELD = 2,     /* release/extend of a lock that expired or was taken over */
  DLOCK_EINVAL = 3,       /* bad argument, URL or option */
  DLOCK_EIO = 4,          /* cannot reach the backend, or it timed out */
  DLOCK_EBACKEND = 5,     /* the backend answered with an error */
  DLOCK_EAUTH = 6,        /* credentials refused */
  DLOCK_ECANCELLED = 7,
  DLOCK_ENOMEM = 8,
  DLOCK_EINTERNAL = 9
} dlock_status;

/* Callback for a lock found lost in the background: a heartbeat found the server no longer has
 * this owner's lock (expired, deleted or taken over), or renewals kept failing until the local
 * deadline passed. Runs at most once per lock, on the client's background thread. A loss found
 * by the caller's own dlock_extend/dlock_release is reported by their DLOCK_NOT_HELD instead,
 * and a lock released by dlock_client_close is not "lost". Without heartbeats, nothing runs in
 * the background: dlock_lock_is_valid turning 0 is the signal. */
typedef void (*dlock_lost_fn)(const char *name, uint64_t fencing_token, void *arg);

/* ----- library ---------------------------------------------------------------------------- */

/* A static string naming the status, e.g. "DLOCK_NOT_HELD". Unknown values give "DLOCK_UNKNOWN". */
DLOCK_API const char *dlock_status_str(dlock_status s);
/* The calling thread's last detailed error message; "" if none. */
DLOCK_API const char *dlock_last_error(void);
/* "MAJOR.MINOR.PATCH". */
DLOCK_API const char *dlock_version(void);

/* ----- clients ---------------------------------------------------------------------------- */

/* Opens a client for the backend named by url (see URLs above) and checks that the backend
 * answers (connects and authenticates once). DLOCK_EINVAL for a bad URL, DLOCK_EIO when the
 * server cannot be reached, DLOCK_EAUTH when credentials are refused. */
DLOCK_API dlock_status dlock_client_open(const char *url, dlock_client **out);
/* Stops heartbeats, releases every lock the client still holds, closes its connections and
 * joins its thread. Lock handles still owned by the caller stay valid to pass to dlock_release
 * (which then frees them and returns DLOCK_NOT_HELD). NULL is ok. */
DLOCK_API void dlock_client_close(dlock_client *c);

/* ----- acquire options -------------------------------------------------------------------- */

DLOCK_API dlock_options *dlock_options_new(void); /* NULL only when out of memory */
DLOCK_API void dlock_options_free(dlock_options *o);
/* Lease: how long the server keeps the lock without a renewal. Default 10000. 0 = no expiry
 * (fail-closed: held until released). Otherwise at least 10 ms (shorter is DLOCK_EINVAL: the
 * clock drift allowance alone, lease/100 + 2 ms, would leave nothing to hold) and at most
 * 10 years. */
DLOCK_API dlock_status dlock_options_set_lease_ms(dlock_options *o, uint64_t ms);
/* Heartbeat period: the lease is renewed in the background this often. Default lease/3.
 * 0 = no heartbeats. Must be less than the lease. */
DLOCK_API dlock_status dlock_options_set_heartbeat_ms(dlock_options *o, uint64_t ms);
/* How long acquire waits for a held lock. 0 = one try (default), N = up to N ms, -1 = no limit;
 * below -1 is DLOCK_EINVAL.
 * A waiter sleeps until the holder releases (pub/sub) or its lease runs out, whichever is first,
 * with a jittered retry (see retry_ms) as the fallback. */
DLOCK_API dlock_status dlock_options_set_wait_ms(dlock_options *o, int64_t ms);
/* Bounds of the jittered, exponentially growing fallback retry while waiting.
 * Default 50..1000. Requires 1 <= min_ms <= max_ms. */
DLOCK_API dlock_status dlock_options_set_retry_ms(dlock_options *o, uint64_t min_ms, uint64_t max_ms);
/* A label stored with the lock for people and tools (not the owner token, which is random and
 * secret). At most DLOCK_MAX_OWNER_BYTES. NULL clears it. */
DLOCK_API dlock_status dlock_options_set_owner(dlock_options *o, const char *owner);
/* Several names, all or none: a transfer between two accounts, a job that touches two shards.
 * On DLOCK_OK, locks_out[k] is the hold of names[k], each with its own fencing token, lease,
 * heartbeats and loss report (losing one name is reported as the loss of that name; the others
 * stay held until released). On any other status nothing is held and every locks_out[k] is
 * NULL. On one Redis server (redis://, rediss://, redis+unix://, redis-sentinel://) the first
 * try takes every name in one atomic script call, all or none; on etcd, exclusive holds without
 * job rules in one transaction (they share its revision as their token). Elsewhere, and while
 * waiting, the
 * names are taken one at a time in one fixed order (bytewise), whatever order they are given in,
 * so that callers asking for {a, b} and {b, a} at once never wait on each other; what was taken
 * is given back (no job rule's marker stays) when a later name cannot be. o applies to each
 * name; its wait_ms bounds the whole call (W + n * (C + T)). A name given twice, n 0 or NULL
 * arrays are DLOCK_EINVAL. Every backend. */
DLOCK_API dlock_status dlock_acquire_many(dlock_client *c, const char *const *names, size_t n,
                                          const dlock_options *o, dlock_lock **locks_out);
/* Releases every non-NULL locks[k] (each through its own client; one script call for a
 * client's holds on one Redis server), frees it and sets locks[k] to NULL. DLOCK_OK when every
 * release was; DLOCK_NOT_HELD when some hold had been lost (the message names each one), or the
 * first other error, whose message names every failure. */
DLOCK_API dlock_status dlock_release_many(dlock_lock **locks, size_t n);
/* Reentrancy by a context the caller chooses (a task, a request id, a thread id): an acquire of
 * a name whose hold this client already has under the same context is a re-entry, not an
 * acquisition. It waits for nothing, issues no token, and returns a handle of its own on that
 * hold (the same fencing token, lease and heartbeats; an extend through any handle extends the
 * hold); only the release of the last handle releases on the server (the others answer
 * DLOCK_OK, or DLOCK_NOT_HELD once the hold was lost). A re-entry of a hold that was lost or is
 * past its local deadline is DLOCK_NOT_HELD; one asking another kind or permits is DLOCK_EINVAL.
 * Another context, or none, acquires as anyone else does (threads sharing a client contend). A
 * context must be unique while its holds live (thread ids are recycled once a thread ends), and
 * its acquires of one name made one at a time. NULL (the default) turns reentrancy off; "" and
 * contexts over 256 bytes are DLOCK_EINVAL. Every backend: the core keeps the count.
 * Callbacks belong to the hold, as its first acquire set them: a re-entry's own on_lost and
 * on_release_requested are not used, and the first acquire's run (with their arg) until the
 * last handle is released, whichever handle that is; keep their arg alive until then. */
DLOCK_API dlock_status dlock_options_set_reentrant(dlock_options *o, const char *context);
/* Called when the lock is lost; see dlock_lost_fn. NULL clears it. */
DLOCK_API dlock_status dlock_options_set_on_lost(dlock_options *o, dlock_lost_fn fn, void *arg);

/* ----- locks ------------------------------------------------------------------------------ */

/* Acquires the lock called name (1..DLOCK_MAX_NAME_BYTES bytes). On DLOCK_OK *out is a held
 * lock whose fencing token is greater than every token issued before for this name (under the
 * faults docs/guarantees.md lists for the backend; best effort on redlock://, which lacks
 * DLOCK_CAP_FENCING_STRICT).
 * DLOCK_NOT_ACQUIRED when someone else holds it and the wait ran out. Not reentrant unless o
 * sets a context (dlock_options_set_reentrant): a second acquire of a name this client holds
 * waits like any other contender. o may be NULL. */
DLOCK_API dlock_status dlock_acquire(dlock_client *c, const char *name, const dlock_options *o,
                                     dlock_lock **out);
/* Releases the lock if this owner still holds it and frees l (always, whatever the result).
 * DLOCK_NOT_HELD when it had expired or was taken over. NULL gives DLOCK_EINVAL. */
DLOCK_API dlock_status dlock_release(dlock_lock *l);
/* Sets the lock's lease to lease_ms from now (0 = no expiry) if this owner still holds it; the
 * heartbeat period follows (lease/3 unless set explicitly). DLOCK_NOT_HELD when it was lost.
 * Extends and background renewals of one lock reach the server one at a time, so the local
 * deadline always follows the lease the server has. lease_ms is 0 or 10 ms..10 years, as for
 * dlock_options_set_lease_ms. Not on the client's loop thread (use
 * dlock_extend_async there). */
DLOCK_API dlock_status dlock_extend(dlock_lock *l, uint64_t lease_ms);
/* The fencing token of this acquisition; 0 for NULL. Heartbeats and extends keep it. */
DLOCK_API uint64_t dlock_lock_fencing_token(const dlock_lock *l);
/* 1 while the local deadline holds and the lock was not found lost; 0 otherwise. */
DLOCK_API int dlock_lock_is_valid(const dlock_lock *l);
/* Milliseconds left before the local deadline; INT64_MAX for no expiry; 0 when lost. */
DLOCK_API int64_t dlock_lock_remaining_ms(const dlock_lock *l);
/* How many acquire attempts it took (1 = first try; a fair waiter handed the lock by a release
 * counts only the attempts it sent). */
DLOCK_API uint32_t dlock_lock_attempts(const dlock_lock *l);
/* The lock's name, as given to dlock_acquire; valid until the lock is released. NULL for NULL. */
DLOCK_API const char *dlock_lock_name(const dlock_lock *l);

/* ----- event-loop integration (async) ----------------------------------------------------
 *
 * dlock_client_open_evbase opens a client that runs on the caller's libevent event_base and
 * creates no thread: every connection, timer, heartbeat and pub/sub wake-up runs on `base`, and
 * every callback (done, on_lost) runs on the thread running `base`. Call it on that thread.
 * Threading rules for such a client:
 *   - the _async calls are made on the base's thread;
 *   - the blocking calls work from OTHER threads while the base's thread runs the loop (they
 *     need libevent's locking: call evthread_use_pthreads() before creating the base). On the
 *     base's own thread (as on any client's loop thread, i.e. inside callbacks), a
 *     dlock_acquire that would wait and dlock_extend are refused with DLOCK_EINVAL (they wait
 *     for the loop they block); dlock_acquire with wait_ms 0, dlock_release and dlock_inspect
 *     work there but hold the loop for one round trip, so prefer the _async forms;
 *   - dlock_client_close is called on the base's thread. It cancels pending acquires (done
 *     gets DLOCK_ECANCELLED) and releases what is held. Called from inside a dlock callback,
 *     or while a cancelled acquire's request is still out (its answer is awaited, at most
 *     3 s, to give back what it may have won), it finishes in the loop's next iterations:
 *     keep the loop running until it has no more events (event_base_dispatch returns)
 *     before freeing the base;
 *   - the base must outlive the client.
 *
 * The _async calls also work on a client from dlock_client_open; their callbacks then run on
 * the client's own thread.
 *
 * The returned status covers argument errors only (DLOCK_EINVAL; nothing was started and done
 * will not be called). Otherwise the outcome arrives through done, exactly once, never before
 * the call returns. Calling any dlock function from inside a dlock callback is safe, including
 * releasing the lock and (on an evbase client) closing the client. Many acquires in flight on
 * one client share one connection, pipelined. */
struct event_base;

typedef void (*dlock_acquire_fn)(dlock_status s, dlock_lock *lock, void *arg);
typedef void (*dlock_done_fn)(dlock_status s, void *arg);

DLOCK_API dlock_status dlock_client_open_evbase(const char *url, struct event_base *base,
                                                dlock_client **out);
/* On DLOCK_OK, lock is held and owned by the callee of done (free it with dlock_release or
 * dlock_release_async); otherwise lock is NULL. Waits per the options like dlock_acquire. */
DLOCK_API dlock_status dlock_acquire_async(dlock_client *c, const char *name, const dlock_options *o,
                                           dlock_acquire_fn done, void *arg);
/* Cancels the pending dlock_acquire_async calls on c whose arg is `arg`: each one's done runs
 * with DLOCK_ECANCELLED (or with its result, if it completed first). DLOCK_EINVAL when none is
 * pending. Any thread (on an evbase client from another thread, libevent's locking is needed,
 * as for the blocking calls). */
DLOCK_API dlock_status dlock_acquire_cancel(dlock_client *c, void *arg);
/* Releases l like dlock_release, asynchronously; l must not be used after this call (it is
 * freed whatever the result). done may be NULL. On a closed client: DLOCK_NOT_HELD at once,
 * l freed, done not called. */
DLOCK_API dlock_status dlock_release_async(dlock_lock *l, dlock_done_fn done, void *arg);
/* dlock_extend, asynchronously; done may be NULL. On a closed client: DLOCK_NOT_HELD at once,
 * done not called. */
DLOCK_API dlock_status dlock_extend_async(dlock_lock *l, uint64_t lease_ms, dlock_done_fn done,
                                          void *arg);

/* ----- any event loop: the hook table ------------------------------------------------------
 *
 * dlock_client_open_hooks opens a client driven by the caller's own event loop (libuv, glib,
 * asyncio, a hand-written epoll loop), as hiredis's adapters do: dlock asks the loop, through
 * three hooks, to watch file descriptors and to arm one timer, and the loop calls back
 * dlock_loop_fd_ready and dlock_loop_timer_fired. It creates no thread: every connection,
 * timer, heartbeat, pub/sub wake-up and callback (done, on_lost) runs inside those two calls
 * (or inside the dlock call that started it), on the thread that runs the loop. The threading
 * rules are those of an evbase client (above): open, the _async calls and close on the loop's
 * thread; the blocking calls from other threads while the loop runs (no locking needed: dlock
 * wakes the loop itself, through an eventfd it asks it to watch); on the loop's thread, an
 * acquire that would wait and dlock_extend are refused with DLOCK_EINVAL.
 * dlock/adapters/libuv.h is a ready adapter, and a model for others.
 *
 * The hooks are called on the loop's thread, from inside dlock calls, never at other times;
 * `loop_ctx` is the caller's, passed back unchanged, and `loop` identifies the client's side
 * (one per client; pass it back to dlock_loop_fd_ready and dlock_loop_timer_fired). */
typedef struct dlock_loop dlock_loop;

#define DLOCK_LOOP_READ 0x1u
#define DLOCK_LOOP_WRITE 0x2u

typedef struct dlock_loop_hooks {
  /* Watch fd for `events` (DLOCK_LOOP_READ and/or DLOCK_LOOP_WRITE) from now on, replacing what
   * was asked before for it; 0: stop watching it (dlock may close fd as soon as this returns).
   * Level-triggered: while fd stays ready, call dlock_loop_fd_ready(loop, fd, ready) on each
   * turn of the loop. *fd_data is yours, kept per fd: NULL on the first call for an fd (and
   * after a stop), then as you left it; release what it holds when events is 0. */
  void (*watch_fd)(void *loop_ctx, dlock_loop *loop, int fd, uint32_t events, void **fd_data);
  /* Call dlock_loop_timer_fired(loop) once, `ms` milliseconds from now (0: on the loop's next
   * turn, never from inside this hook), replacing any earlier request; -1: cancel it. One
   * timer per client is enough: dlock keeps its own timers behind it. */
  void (*set_timer)(void *loop_ctx, dlock_loop *loop, int64_t ms);
  /* The last call a client makes to its hooks, once it is closed and nothing of it is left on
   * the loop (every fd unwatched, the timer cancelled): release loop_ctx's per-client state
   * here. It may come from inside dlock_client_close, dlock_loop_fd_ready or
   * dlock_loop_timer_fired; `loop` must not be used after it. May be NULL. Not called when
   * dlock_client_open_hooks fails (it has unwatched and cancelled whatever it asked for). */
  void (*cleanup)(void *loop_ctx);
} dlock_loop_hooks;

/* Opens a client on the loop behind hooks (copied; watch_fd and set_timer are required).
 * Call on the loop's thread; the hooks may be called before it returns. */
DLOCK_API dlock_status dlock_client_open_hooks(const char *url, const dlock_loop_hooks *hooks,
                                               void *loop_ctx, dlock_client **out);
/* From the loop, on its thread: fd is ready for `events` (DLOCK_LOOP_READ and/or
 * DLOCK_LOOP_WRITE; readiness for what was not asked for is ignored, as is an fd no longer
 * watched). Runs what is due, then returns. */
DLOCK_API void dlock_loop_fd_ready(dlock_loop *loop, int fd, uint32_t events);
/* From the loop, on its thread: the timer asked for by set_timer is due. */
DLOCK_API void dlock_loop_timer_fired(dlock_loop *loop);

/* ----- completion queues ------------------------------------------------------------------
 *
 * A dlock_queue hands async outcomes to the caller's own thread instead of calling back on the
 * client's loop thread: for runtimes that cannot take a call from a foreign thread (Node,
 * LuaJIT) and for code whose callbacks must not hold up heartbeats. The loop thread only
 * appends the outcome and makes dlock_queue_fd readable; it never waits for the caller.
 *
 *   dlock_queue *q;  dlock_queue_new(&q);
 *   dlock_acquire_queued(client, "jobs/nightly", opts, q, 42);
 *   ... poll(dlock_queue_fd(q)) readable ...
 *   while ((kind = dlock_queue_pop(q, &tag, &status, &lock)) > 0) { ... }
 *
 * The fd (a pipe's read end, owned by the queue) becomes readable when an outcome arrives
 * while the queue was empty; pop until dlock_queue_pop returns DLOCK_QUEUE_EMPTY, which also
 * empties the pipe and re-arms it. Reading the pipe yourself (as libuv does) is harmless.
 * A queue may serve any number of clients and threads. Tags are the caller's: dlock never
 * reads them. The _queued calls follow their _async twins: the returned status covers argument
 * errors only, and otherwise exactly one DLOCK_QUEUE_DONE entry with that tag follows. */
typedef struct dlock_queue dlock_queue;

#define DLOCK_QUEUE_EMPTY 0 /* nothing to pop; the fd is re-armed */
#define DLOCK_QUEUE_DONE 1  /* a _queued call finished: its status (and lock, for acquires) */
#define DLOCK_QUEUE_LOST 2  /* a lock whose options named this queue was lost (DLOCK_NOT_HELD) */
#define DLOCK_QUEUE_LEADER 3 /* an observer's report (dlock_observe_queued): who leads now */
#define DLOCK_QUEUE_EVENT 4  /* an event of a client whose events go to this queue
                                (dlock_client_set_event_queue); read it with dlock_queue_pop_event */
#define DLOCK_QUEUE_RELEASE_REQUESTED 5 /* someone asked the holder of a lock whose options named
                                this queue to let go (dlock_options_set_on_release_requested_queued):
                                status DLOCK_OK, and the message (dlock_last_error) is the reason */

DLOCK_API dlock_status dlock_queue_new(dlock_queue **out);
/* Frees the queue. Outcomes still to come are dropped, and a lock such an outcome carries is
 * released in the background; the fd is closed once no outcome can arrive. Acquires still
 * waiting keep waiting (and give back what they win): cancel them first, or close their
 * client. NULL is ok. */
DLOCK_API void dlock_queue_free(dlock_queue *q);
/* The fd to poll for readability; -1 for NULL. Do not close it. */
DLOCK_API int dlock_queue_fd(const dlock_queue *q);
/* A close-on-exec duplicate of dlock_queue_fd(q), readable whenever that fd is, for a runtime
 * that closes the fd it watches (Node's net.Socket). The caller owns it and must close it;
 * it stays valid after dlock_queue_free. Returns -1 when q is NULL or the duplicate cannot be
 * made (EMFILE), with dlock_last_error() set. */
DLOCK_API int dlock_queue_fd_dup(const dlock_queue *q);
/* Takes the oldest entry: returns its kind (DLOCK_QUEUE_DONE, DLOCK_QUEUE_LOST, ...) and writes
 * *tag, *status and *lock (a held lock for a successful acquire, now the caller's; else NULL),
 * and sets this thread's dlock_last_error() to the entry's message. Returns DLOCK_QUEUE_EMPTY
 * when there is none, -1 when q is NULL. Any out pointer may be NULL (a lock nobody takes is
 * released in the background). Never blocks. A queue that observers or a client's events
 * (dlock_client_set_event_queue) also use hands out DLOCK_QUEUE_LEADER and DLOCK_QUEUE_EVENT
 * entries here too, their snapshot or event dropped (*status DLOCK_OK, *lock NULL): skip the
 * kinds you do not know, or pop with dlock_queue_pop_leader or dlock_queue_pop_event. */
DLOCK_API int dlock_queue_pop(dlock_queue *q, uint64_t *tag, dlock_status *status,
                              dlock_lock **lock);
struct dlock_info;
/* dlock_queue_pop, and for a DLOCK_QUEUE_LEADER entry *leader is the observer's snapshot (one
 * holder: owner, value, term, lease left), to free with dlock_info_free, or NULL when nobody
 * leads; for the DLOCK_QUEUE_DONE entry of a successful dlock_inspect_queued or
 * dlock_leader_queued, its snapshot; NULL for every other entry. leader may be NULL
 * (dlock_queue_pop drops it). A DLOCK_QUEUE_EVENT entry's event is dropped (see
 * dlock_queue_pop_event). */
DLOCK_API int dlock_queue_pop_leader(dlock_queue *q, uint64_t *tag, dlock_status *status,
                                     dlock_lock **lock, struct dlock_info **leader);
/* dlock_acquire_async, with its outcome queued under tag. */
DLOCK_API dlock_status dlock_acquire_queued(dlock_client *c, const char *name,
                                            const dlock_options *o, dlock_queue *q, uint64_t tag);
/* Cancels the pending dlock_acquire_queued calls on c with this queue and tag (see
 * dlock_acquire_cancel): their entries carry DLOCK_ECANCELLED unless they finished first. */
DLOCK_API dlock_status dlock_acquire_cancel_queued(dlock_client *c, dlock_queue *q, uint64_t tag);
/* dlock_release_async, with its outcome queued under tag: l is freed at once, whatever the
 * outcome (except for a NULL q: DLOCK_EINVAL, and l stays yours). On a closed client:
 * DLOCK_NOT_HELD at once, nothing queued. */
DLOCK_API dlock_status dlock_release_queued(dlock_lock *l, dlock_queue *q, uint64_t tag);
/* dlock_extend_async, with its outcome queued under tag. On a closed client: DLOCK_NOT_HELD at
 * once, nothing queued. */
DLOCK_API dlock_status dlock_extend_queued(dlock_lock *l, uint64_t lease_ms, dlock_queue *q,
                                           uint64_t tag);
/* Instead of an on_lost callback: a lock acquired with these options that is found lost queues
 * a DLOCK_QUEUE_LOST entry with tag (status DLOCK_NOT_HELD, the message says why). Replaces
 * any on_lost callback (and dlock_options_set_on_lost replaces this); NULL q clears it. Unlike
 * the callback, the entry may still be waiting in the queue after the lock was released:
 * ignore LOST entries for tags you are done with. The options keep q alive. */
DLOCK_API dlock_status dlock_options_set_on_lost_queued(dlock_options *o, dlock_queue *q,
                                                        uint64_t tag);

/* ----- error buffers, for calls made on a worker thread ----------------------------------
 *
 * dlock_last_error() belongs to the thread that made the call. FFI runtimes that run a
 * blocking call on a worker thread and learn its outcome on another (Node's koffi runs calls on
 * libuv's pool) cannot reach it there. These behave exactly as the plain calls and, when the
 * call fails, also copy its message into buf: NUL-terminated, cut to len - 1 bytes. buf is left
 * alone on success; buf NULL or len 0 is allowed (nothing is copied). curl's
 * CURLOPT_ERRORBUFFER is the model. */
DLOCK_API dlock_status dlock_client_open_errbuf(const char *url, dlock_client **out, char *buf,
                                                size_t len);
DLOCK_API dlock_status dlock_acquire_errbuf(dlock_client *c, const char *name,
                                            const dlock_options *o, dlock_lock **out, char *buf,
                                            size_t len);
DLOCK_API dlock_status dlock_release_errbuf(dlock_lock *l, char *buf, size_t len);
DLOCK_API dlock_status dlock_extend_errbuf(dlock_lock *l, uint64_t lease_ms, char *buf,
                                           size_t len);
/* dlock_inspect (see "inspection" below), with its message copied likewise. */
struct dlock_info;
DLOCK_API dlock_status dlock_inspect_errbuf(dlock_client *c, const char *name,
                                            struct dlock_info **out, char *buf, size_t len);
/* dlock_break_with (see "breaking a lock" below), with its message copied likewise. */
DLOCK_API dlock_status dlock_break_with_errbuf(dlock_client *c, const char *name,
                                               const char *reason, uint32_t flags,
                                               struct dlock_info **broken, char *buf, size_t len);

/* ----- backends ---------------------------------------------------------------------------- */

/* Creates what the URL's backend needs before clients can use it, and waits up to wait_ms
 * (-1 = no limit, 0 = do not wait) for it to be ready: for dynamodb://, the lock table (key
 * schema and billing as described at dlock_dynamodb_create_table below); for Redis, nothing
 * (the URL is checked). DLOCK_OK when it
 * already exists. */
DLOCK_API dlock_status dlock_backend_prepare(const char *url, int64_t wait_ms);

/* What the client's backend promises, as bits (new bits are only appended):
 *   DLOCK_CAP_FENCING_STRICT  tokens strictly increasing under every fault the docs list
 *                             (Redis: release, expiry, takeover, a restart that lost the data,
 *                             as long as the server's clock moves forward; DynamoDB: release,
 *                             expiry, takeover, the item deleted, as long as clocks move forward;
 *                             etcd: the key's create revision). Not Redlock: best effort there
 *   DLOCK_CAP_NOTIFIES        waiters are woken by releases, not only by retries (Redis,
 *                             Redlock, etcd, PostgreSQL)
 *   DLOCK_CAP_SHARED          shared holds (dlock_options_set_kind): Redis, Redlock, DynamoDB,
 *                             etcd, PostgreSQL
 *   DLOCK_CAP_PERMITS         counting semaphores (dlock_options_set_permits): Redis, DynamoDB,
 *                             etcd, PostgreSQL
 *   DLOCK_CAP_FAIR            waiting acquires of every kind are served in arrival order,
 *                             each release handing the lock to the first in line
 *                             (dlock_options_set_fair): Redis (one server, Cluster, Sentinel);
 *                             PostgreSQL; etcd with layout=mutex (exclusive locks only, its
 *                             only bit beside FENCING_STRICT and NOTIFIES)
 *   DLOCK_CAP_OBSERVE_PUSH    observers (dlock_observe) are told of every release, hand-over
 *                             and new value by the server, not by polling: Redis (one server,
 *                             Cluster, Sentinel), PostgreSQL. Elsewhere new values are polled
 *                             (500 ms); a new holder of a free name is polled on every backend
 *   DLOCK_CAP_BREAK           an operator can break a lock (dlock_break): Redis (every
 *                             topology), DynamoDB, etcd (not layout=mutex), PostgreSQL
 *   DLOCK_CAP_MIN_HOLD        dlock_options_set_min_hold_ms: every backend but etcd's
 *                             layout=mutex
 *   DLOCK_CAP_LOCK_DELAY      dlock_options_set_lock_delay_ms: every backend but etcd's
 *                             layout=mutex
 *   DLOCK_CAP_RELEASE_REQUEST dlock_request_release reaches holders that listen
 *                             (dlock_options_set_on_release_requested): every backend but
 *                             etcd's layout=mutex; pushed by Redis (pub/sub), etcd (a watch)
 *                             and PostgreSQL (NOTIFY), heard at the next renewal on DynamoDB
 * docs/guarantees.md has the whole matrix.
 * 0 for NULL. */
#define DLOCK_CAP_FENCING_STRICT 0x1u
#define DLOCK_CAP_NOTIFIES 0x2u
#define DLOCK_CAP_SHARED 0x4u
#define DLOCK_CAP_PERMITS 0x8u
#define DLOCK_CAP_FAIR 0x10u
#define DLOCK_CAP_OBSERVE_PUSH 0x20u
#define DLOCK_CAP_BREAK 0x40u
#define DLOCK_CAP_MIN_HOLD 0x80u
#define DLOCK_CAP_LOCK_DELAY 0x100u
#define DLOCK_CAP_RELEASE_REQUEST 0x200u
DLOCK_API uint32_t dlock_client_capabilities(const dlock_client *c);

/* ----- lock kinds -------------------------------------------------------------------------
 *
 * A hold is exclusive (the default), shared, or one of n permits of a counting semaphore.
 * Shared: any number of shared holders, no exclusive one meanwhile; a waiting exclusive acquire
 * stops new shared ones; no upgrade (an exclusive acquire by a client that holds the name shared
 * is DLOCK_EINVAL: it would wait for itself). Permits: at most n holders; an acquire asking
 * another n than the current holders is DLOCK_EINVAL naming both. While held, a name is a lock
 * (exclusive and shared holds) or a semaphore: an acquire of the other sort is DLOCK_EINVAL.
 * Every hold has its own owner, lease, heartbeat, lost report and a fencing token above every
 * earlier token of that name, of any kind. An acquire asking for a kind the client's backend
 * does not offer (see dlock_client_capabilities) is DLOCK_EINVAL and changes nothing. */
typedef enum dlock_kind { DLOCK_EXCLUSIVE = 0, DLOCK_SHARED = 1 } dlock_kind;
/* Default DLOCK_EXCLUSIVE; other values are DLOCK_EINVAL. */
DLOCK_API dlock_status dlock_options_set_kind(dlock_options *o, dlock_kind kind);
/* A counting semaphore of n permits; 0 = off (default). Exclusive kind only: a shared semaphore
 * is DLOCK_EINVAL at acquire. DynamoDB keeps at most 900 holds per name (its 400 KB item). */
DLOCK_API dlock_status dlock_options_set_permits(dlock_options *o, uint32_t n);
/* How many of the semaphore's permits one acquire takes at once (default 1), all or none: a hold
 * that took k counts k against the n permits until it ends, and its release frees all k (one
 * fencing token, lease and heartbeat). 0 is DLOCK_EINVAL here; more than 1 without permits, or
 * more than the permits, is DLOCK_EINVAL at acquire. Every backend with DLOCK_CAP_PERMITS. */
DLOCK_API dlock_status dlock_options_set_take(dlock_options *o, uint32_t k);
/* Fair waiting (default 1), for acquires that wait, on backends with DLOCK_CAP_FAIR:
 * a refused acquire takes its place in a line kept on the server with the lock (its place
 * lapses unless it keeps waiting), and each release hands the lock straight to the first live
 * acquire in line and wakes only it: no herd, no waiter starved. 0 = unfair: every release
 * wakes every unfair waiter and the first to retry wins (a waiter that does not join the line
 * is served after those in it). Semaphores wait in line too, with their takes: a release hands
 * the permits it freed to the first waiters whose takes fit, in order, and nobody goes ahead of
 * a waiter in line. Shared acquires share the exclusive ones' line: a release serves the
 * shared waiters at its head together, up to the first exclusive waiter, and an exclusive
 * waiter once nothing is held. */
DLOCK_API dlock_status dlock_options_set_fair(dlock_options *o, int fair);

/* ----- inspection --------------------------------------------------------------------------
 *
 * Who holds a lock now: the query a CLI and an operator need. A snapshot, read from the server
 * in one call (bounded like a release: Redis C + T, DynamoDB T), that may be stale as soon as it
 * returns: never decide from it whether to take the lock. Owner tokens are never revealed, only
 * the labels set with dlock_options_set_owner. */
typedef struct dlock_info dlock_info;
/* *out is a snapshot to free with dlock_info_free. A name nobody holds is DLOCK_OK with 0
 * holders. */
DLOCK_API dlock_status dlock_inspect(dlock_client *c, const char *name, dlock_info **out);
DLOCK_API void dlock_info_free(dlock_info *i); /* NULL ok */
/* How many hold the name; 0 = free (and 0 for NULL). */
DLOCK_API uint32_t dlock_info_holders(const dlock_info *i);
/* Holder k's owner label; "" when it has none, NULL when k is out of range. Valid until
 * dlock_info_free. */
DLOCK_API const char *dlock_info_owner(const dlock_info *i, uint32_t k);
/* Holder k's remaining lease as the server sees it, in ms; -1 = no expiry (or k out of range).
 * DynamoDB keeps no server-side expiry: this is the lease the holder last wrote (it is taken
 * over once it has stood unrenewed that long). */
DLOCK_API int64_t dlock_info_remaining_ms(const dlock_info *i, uint32_t k);
/* Holder k's fencing token; 0 = unknown (etcd's layout=mutex: a token is known to its holder
 * only), or k out of range. */
DLOCK_API uint64_t dlock_info_fencing_token(const dlock_info *i, uint32_t k);
/* The kind of hold the holders have; DLOCK_EXCLUSIVE when free and for a semaphore. */
DLOCK_API dlock_kind dlock_info_kind(const dlock_info *i);
/* The semaphore's number of permits while the name is one; 0 for a lock, a free name or NULL. */
DLOCK_API uint32_t dlock_info_permits(const dlock_info *i);
/* How many of the semaphore's permits holder k took (dlock_options_set_take): 1 for every other
 * hold, 0 when k is out of range. The permits in use are the sum over the holders. */
DLOCK_API uint32_t dlock_info_take(const dlock_info *i, uint32_t k);
/* dlock_inspect, asynchronously (see "event-loop integration"): done runs once on the client's
 * loop thread, never inside the call, with the snapshot (the callee's to free with
 * dlock_info_free) or NULL and the error. A closed client is DLOCK_EINVAL, done not called. */
typedef void (*dlock_info_fn)(dlock_status s, dlock_info *info, void *arg);
DLOCK_API dlock_status dlock_inspect_async(dlock_client *c, const char *name, dlock_info_fn done,
                                           void *arg);
/* dlock_inspect, its outcome queued under tag as a DLOCK_QUEUE_DONE entry whose snapshot
 * dlock_queue_pop_leader hands out in *leader (NULL on error). */
DLOCK_API dlock_status dlock_inspect_queued(dlock_client *c, const char *name, struct dlock_queue *q,
                                            uint64_t tag);

/* ----- values stored with a hold ------------------------------------------------------------
 *
 * A hold may carry a value: up to DLOCK_MAX_VALUE_BYTES of any bytes (NUL included), stored on
 * the server with the hold and shown by dlock_inspect to everyone who can reach the server (a
 * leader's address, a job's progress, what Consul keeps in a lock's value and AWS's DynamoDB
 * lock client in its `data`). It is not secret: keep no secret in it. It lives and dies with its
 * hold: released, expired, lost or taken over, the value is gone with it. A fair hand-over
 * (DLOCK_CAP_FAIR) carries the waiting acquire's own value. Every backend, every kind of hold.
 * DynamoDB keeps a name's holds in one item of at most 400 KB: a semaphore whose many holders
 * all store large values may fill it (DLOCK_EINVAL naming the limit). */
/* The value the next acquires with these options store with their hold (copied). len 0 (data
 * may then be NULL) = none, the default. Longer than DLOCK_MAX_VALUE_BYTES is DLOCK_EINVAL. */
DLOCK_API dlock_status dlock_options_set_value(dlock_options *o, const void *data, size_t len);
/* Replaces the value stored with l (len 0 removes it) if this owner still holds it: the
 * server checks the owner, so a hold that was lost or taken over gets DLOCK_NOT_HELD and
 * nothing is written. The lease is left as it is. Blocking, bounded like dlock_release; any
 * thread (on the client's loop thread it holds the loop for one round trip, as dlock_release
 * does). Like dlock_extend, not at the same time as dlock_release of the same lock. */
DLOCK_API dlock_status dlock_lock_set_value(dlock_lock *l, const void *data, size_t len);
/* dlock_lock_set_value, asynchronously (see "event-loop integration"): done (may be NULL) runs
 * on the client's loop thread; or its outcome queued under tag (see "completion queues"). The
 * returned status covers argument errors (and a closed client: DLOCK_NOT_HELD), as for
 * dlock_extend_async. */
DLOCK_API dlock_status dlock_lock_set_value_async(dlock_lock *l, const void *data, size_t len,
                                                  dlock_done_fn done, void *arg);
DLOCK_API dlock_status dlock_lock_set_value_queued(dlock_lock *l, const void *data, size_t len,
                                                   dlock_queue *q, uint64_t tag);
/* Holder k's value: *len bytes (followed by a NUL that *len does not count, so that a text
 * value reads as a C string), valid until dlock_info_free; "" with *len 0 when it has none;
 * NULL with *len 0 when k is out of range. len may be NULL. */
DLOCK_API const void *dlock_info_value(const dlock_info *i, uint32_t k, size_t *len);

/* ----- leader election ------------------------------------------------------------------------
 *
 * One leader at a time among candidates that campaign for a name: a leadership is an exclusive
 * dlock_lock, and its fencing token is the leader's term, greater than every earlier term of the
 * name (under the faults docs/guarantees.md lists for the backend): hand it to whatever the
 * leader writes, and have the store refuse writes below the highest term it has seen, so that a
 * deposed leader that does not know it yet changes nothing. The leader's value (its address,
 * say) is the lock's value: set it with dlock_options_set_value, replace it with
 * dlock_lock_set_value (proclaim), give leadership up with dlock_release (resign; the next
 * candidate leads, in arrival order on backends with DLOCK_CAP_FAIR). A lost leadership is
 * reported like a lost lock: on_lost, dlock_lock_is_valid 0, DLOCK_NOT_HELD. On an evbase or
 * hooks client, campaign with dlock_acquire_async and wait_ms -1. */
/* Waits until this candidate leads (wait_ms is taken as -1, no limit) and returns the
 * leadership; the options are an acquire's (lease, heartbeat, owner, value, on_lost).
 * DLOCK_EINVAL for a shared kind or permits. Blocking, like dlock_acquire with no wait limit. */
DLOCK_API dlock_status dlock_campaign(dlock_client *c, const char *name, const dlock_options *o,
                                      dlock_lock **out);
/* The current leader: *out has one holder (its owner label, value, term as its fencing token,
 * and lease left) or none when nobody leads. DLOCK_EINVAL when the name is held shared or is
 * a semaphore. Bounded like dlock_inspect. */
DLOCK_API dlock_status dlock_leader(dlock_client *c, const char *name, dlock_info **out);
/* dlock_leader, asynchronously and queued, as dlock_inspect_async and dlock_inspect_queued. */
DLOCK_API dlock_status dlock_leader_async(dlock_client *c, const char *name, dlock_info_fn done,
                                          void *arg);
DLOCK_API dlock_status dlock_leader_queued(dlock_client *c, const char *name, struct dlock_queue *q,
                                           uint64_t tag);

/* Observing a leadership: fn is told who leads name, first as it stands when dlock_observe is
 * called, then at each change of leader or of the leader's value, including "nobody leads"
 * (leader NULL). leader is a snapshot with one holder (owner label, value, term as its fencing
 * token, lease left), valid during the call only. Never an older state after a newer one, and
 * terms never decrease; states that come and go faster than the observer reads may merge into
 * the latest. How late: a release or hand-over is read at once on backends with
 * DLOCK_CAP_NOTIFIES, and so is a new value on Redis (one server, Cluster, Sentinel); other
 * changes (a new leader taking a free name, after an expiry or a resignation nobody waited
 * for; a new value elsewhere) within the poll interval,
 * 500 ms, plus the read's own bound (timeout_ms). fn runs on the client's loop thread
 * (as on_lost does), never inside dlock_observe. A name held shared or as a semaphore reads as
 * nobody leading. Closing the client ends every observer of it (no call after close returns);
 * the handle is still freed by dlock_observer_cancel. */
typedef struct dlock_observer dlock_observer;
typedef void (*dlock_observe_fn)(const char *name, const dlock_info *leader, void *arg);
DLOCK_API dlock_status dlock_observe(dlock_client *c, const char *name, dlock_observe_fn fn,
                                     void *arg, dlock_observer **out);
/* Stops the observer and frees ob: once it returns fn is neither running nor going to run
 * (unless called from inside fn, whose call then finishes). NULL is ok. Any thread. */
DLOCK_API void dlock_observer_cancel(dlock_observer *ob);
/* dlock_observe, its reports queued (see "completion queues") as DLOCK_QUEUE_LEADER entries
 * with tag, for runtimes that cannot take a call on the client's thread: pop them with
 * dlock_queue_pop_leader. Reports still in the queue when the observer is cancelled stay there;
 * ignore them. The observer keeps q alive. */
DLOCK_API dlock_status dlock_observe_queued(dlock_client *c, const char *name, struct dlock_queue *q,
                                            uint64_t tag, dlock_observer **out);

/* ----- metrics and loss causes ---------------------------------------------------------------
 *
 * Every client counts what its calls and heartbeats did, always (each event costs an atomic
 * add). No lock name is a label: names are unbounded, and a label's values must not be. The
 * families (counters end in _total, times are in seconds):
 *   dlock_acquire_attempts_total{kind}      attempts sent (a confirmed fair hand-over is not one)
 *   dlock_acquires_total{kind,outcome}      acquisitions ended: acquired, not_acquired (the wait
 *                                           ran out), error, cancelled
 *   dlock_handovers_total                   acquisitions a fair hand-over ended
 *   dlock_releases_total{outcome}           the caller's releases: ok, not_held, error
 *   dlock_extends_total{outcome}            the caller's extends: ok, not_held, error
 *   dlock_renewals_sent_total               lease renewals sent by the heartbeats
 *   dlock_renewals_total{outcome}           renewals answered: succeeded, failed (an error,
 *                                           retried until the local deadline), refused
 *   dlock_losses_total{cause}               locks lost while held, by cause (below)
 *   dlock_locks_held, dlock_acquires_waiting  gauges: held now, acquisitions under way now
 *   dlock_connections                       gauge: connections to the backend's servers open now
 *   dlock_acquire_wait_seconds              histogram: start to end of acquisitions that ended
 *                                           acquired or not_acquired
 *   dlock_acquire_attempt_seconds           histogram: each attempt's round trip
 *   dlock_hold_seconds                      histogram: acquired to released or lost
 *   dlock_renewal_seconds                   histogram: each answered renewal's round trip
 * kind is exclusive, shared or semaphore. Counters start at 0 with the client and never go
 * down. With the URL parameter metrics_groups=N, dlock_group_acquires_total{group,outcome},
 * dlock_group_losses_total{group,cause}, dlock_group_acquire_wait_seconds{group} and
 * dlock_group_hold_seconds{group} count per group of names (a name up to its first '/'): the
 * first N groups seen have series of their own, later ones share group="other". Any thread; takes a few microseconds (one short lock to count the locks held). */

/* The client's metrics in the Prometheus text exposition format (version 0.0.4: HELP and TYPE
 * lines, then samples), as a scrape handler serves them. *needed gets the text's length (its
 * NUL not counted). With buf NULL and len 0 it only sets *needed (DLOCK_OK). The text and its
 * NUL are written when len > *needed; otherwise DLOCK_EINVAL, and buf gets "" (len > 0). The
 * text may grow between calls: call again with a larger buffer. */
DLOCK_API dlock_status dlock_client_metrics_text(dlock_client *c, char *buf, size_t len,
                                                 size_t *needed);

/* The same samples, for programs that feed another metrics system: a snapshot to free with
 * dlock_metrics_free. Sample k (0 <= k < dlock_metrics_count) has its family's name, type
 * ("counter", "gauge" or "histogram") and help; its own name (the family's, or for a histogram
 * with _bucket, _sum or _count); its labels as the text writes them between braces
 * (kind="shared",outcome="acquired"; "" for none); and its value. The strings live as long as
 * the snapshot. Out-of-range k gives NULL strings and 0. */
typedef struct dlock_metrics dlock_metrics;
DLOCK_API dlock_status dlock_client_metrics(dlock_client *c, dlock_metrics **out);
DLOCK_API void         dlock_metrics_free(dlock_metrics *m);
DLOCK_API size_t       dlock_metrics_count(const dlock_metrics *m);
DLOCK_API const char  *dlock_metrics_family(const dlock_metrics *m, size_t k);
DLOCK_API const char  *dlock_metrics_type(const dlock_metrics *m, size_t k);
DLOCK_API const char  *dlock_metrics_help(const dlock_metrics *m, size_t k);
DLOCK_API const char  *dlock_metrics_name(const dlock_metrics *m, size_t k);
DLOCK_API const char  *dlock_metrics_labels(const dlock_metrics *m, size_t k);
DLOCK_API double       dlock_metrics_value(const dlock_metrics *m, size_t k);

/* Why l is no longer valid: NULL while it is held and valid, else "CAUSE: details", where
 * CAUSE is a stable code (the cause label of dlock_losses_total). When the server refuses this
 * owner (a renewal, extend, release or set_value) while the lease still holds here, dlock looks
 * at the name once more (as dlock_inspect does, within its bound) to say which:
 *   deleted     nobody holds it (deleted by hand, or its lease ran out on the server), or a
 *               shared or semaphore hold vanished while others stand;
 *   taken_over  another owner holds it (the details name its fencing token, and its label);
 *   refused     that look failed (the details say why), or still lists this hold;
 *   expired     the lease ran out first: renewals failed until the local deadline passed (the
 *               details end with the last error), or the deadline passed before a renewal
 *               answered, or there were no renewals and the server then no longer had it;
 *   max_hold    max_hold_ms passed (dlock_options_set_max_hold_ms): renewals stopped, and the
 *               lease ran out;
 *   broken      an operator broke the lock (dlock_break); the details carry the reason given.
 *               Heard at the next renewal (within a heartbeat period), or, without heartbeats,
 *               at the next extend or release, for a day after the break.
 * Valid until the next call on l or its
 * release; not at the same time as another call on l. */
DLOCK_API const char *dlock_lock_lost_cause(const dlock_lock *l);

/* ----- breaking a lock: an operator's takeover ------------------------------------------------
 *
 * dlock_break deletes every hold of name (exclusive, shared or semaphore) and any job rule's
 * marker (min hold, lock-delay), never its fencing counter: the next token is greater than every token issued
 * to the broken holders. Each broken holder is reported lost with the cause "broken" and the
 * reason (dlock_lock_lost_cause, on_lost, DLOCK_EVENT_LOST) at its next renewal, so within its
 * heartbeat period; a holder without heartbeats hears it at its next extend or release. Broken
 * holders keep working until they hear, so the name then stays closed (dlock_inspect shows no
 * holder and dlock_info_closed_ms > 0) until their leases would have ended on the server (an
 * earlier break's closed time left stands too); a hold with no lease is freed at once. Waiters are woken, and wait out the closed time.
 * reason: operator's words for the holders, at most DLOCK_MAX_REASON_BYTES; NULL or "" = none.
 * Bounded like dlock_inspect (docs/urls.md: C + T on Redis, every Redlock master at once; T on
 * DynamoDB and etcd, where a read and a conditional write are retried if the name changed).
 * A backend without DLOCK_CAP_BREAK answers DLOCK_EINVAL and changes nothing. DLOCK_OK also
 * when nobody held the name. */
DLOCK_API dlock_status dlock_break(dlock_client *c, const char *name, const char *reason);
/* dlock_break with flags, and what it broke. flags: 0, or DLOCK_BREAK_NOW to free the name at
 * once, whatever closed it (for a resource that checks fencing tokens: a broken holder that has not heard yet is
 * refused there). broken (NULL = not wanted): a dlock_info listing the holds it broke (owner
 * label, fencing token, what was left of its lease; 0 holders when nobody held it), whose
 * dlock_info_closed_ms says how long the name now stays closed; free it with dlock_info_free. */
#define DLOCK_BREAK_NOW 0x1u
DLOCK_API dlock_status dlock_break_with(dlock_client *c, const char *name, const char *reason,
                                        uint32_t flags, dlock_info **broken);
/* A marker with no holder that keeps the name closed: for how many ms more (0 = none; a name
 * with holders reports 0), and what left it ("broken"; "" when none). From dlock_inspect and
 * dlock_break_with. 0 and "" for NULL. */
DLOCK_API int64_t dlock_info_closed_ms(const dlock_info *i);
DLOCK_API const char *dlock_info_closed_by(const dlock_info *i);

/* ----- asking a holder to let go: a cooperative takeover, short of a break --------------------
 *
 * dlock_request_release tells every current holder of name that someone asks it to let go,
 * with reason. Nothing is taken: each holder is free to release or to ignore it (dlock_break is
 * for taking by force). A holder hears it only when its acquire's options asked to
 * (dlock_options_set_on_release_requested or its _queued form), and only while it holds the
 * lock and its client is open. How it travels: Redis (every topology) publishes it on the
 * lock's release channel, where the holder's client subscribes from its acquire on; etcd puts
 * it on a request key the holder's client watches; both reach the holder within a round trip.
 * DynamoDB stores it on the lock's item, and the holder hears it with its next renewal (within
 * its heartbeat period; a holder without heartbeats does not hear it). A request sent before
 * the holder's subscription or watch was live (its first round trip after the acquire) or
 * while it was down is not heard: ask again. A holder hears one request once (Redlock's
 * masters each carry it).
 * reason: at most DLOCK_MAX_REASON_BYTES; NULL or "" = none.
 * Returns DLOCK_OK when the name had holders to ask, DLOCK_NOT_HELD when nobody holds it
 * (nothing is sent). A backend without DLOCK_CAP_RELEASE_REQUEST answers DLOCK_EINVAL. Bounded
 * like dlock_inspect (C + T on Redis, every Redlock master at once; T on DynamoDB and etcd). */
DLOCK_API dlock_status dlock_request_release(dlock_client *c, const char *name, const char *reason);
DLOCK_API dlock_status dlock_request_release_errbuf(dlock_client *c, const char *name,
                                                    const char *reason, char *buf, size_t len);
/* Called on the client's loop thread (as on_lost) when someone asked the holder of a lock
 * acquired with these options to let go: the lock's name and the reason ("" when none). It may
 * release the lock. Once dlock_release returns, it is neither running nor going to run.
 * fn NULL stops listening; the last of this and the _queued form wins. An acquire with it on a
 * backend without DLOCK_CAP_RELEASE_REQUEST is DLOCK_EINVAL. */
typedef void (*dlock_release_requested_fn)(const char *name, const char *reason, void *arg);
DLOCK_API dlock_status dlock_options_set_on_release_requested(dlock_options *o,
                                                             dlock_release_requested_fn fn,
                                                             void *arg);
/* Instead of the callback: each request queues a DLOCK_QUEUE_RELEASE_REQUESTED entry with tag
 * in q (status DLOCK_OK; dlock_last_error() after the pop is the reason). As with
 * DLOCK_QUEUE_LOST, an entry may still wait in the queue after the lock was released: ignore it
 * for tags you are done with. NULL q stops listening. The options keep q alive. */
DLOCK_API dlock_status dlock_options_set_on_release_requested_queued(dlock_options *o,
                                                                    dlock_queue *q, uint64_t tag);

/* ----- events, for logs and traces ------------------------------------------------------------
 *
 * A client can tell one hook what happens to its locks as it happens: an acquire started, ended
 * (acquired, or not: the wait ran out, an error, a cancel), a release answered, a renewal that
 * failed (it is retried until the local deadline), a lock lost. The hook runs on the thread that
 * did the work: the caller's for blocking calls, the client's loop thread for heartbeats,
 * losses and the _async and _queued calls. It must return quickly and must not block: it
 * delays that work (and on the loop thread, every lock of the client). In it, call only the
 * dlock_event_* accessors; the event and its strings are valid only during the call. */
typedef enum dlock_event_type {
  DLOCK_EVENT_ACQUIRING = 0,       /* an acquire started */
  DLOCK_EVENT_ACQUIRED = 1,        /* attempts, elapsed (waited) and fencing token */
  DLOCK_EVENT_NOT_ACQUIRED = 2,    /* attempts, elapsed, status (DLOCK_NOT_ACQUIRED when the
                                      wait ran out, DLOCK_ECANCELLED, or the error) and detail */
  DLOCK_EVENT_RELEASED = 3,        /* the caller's release answered: status, elapsed (held),
                                      token; detail when not DLOCK_OK */
  DLOCK_EVENT_RENEWAL_FAILED = 4,  /* status, detail (the error), elapsed (its round trip), token */
  DLOCK_EVENT_LOST = 5             /* elapsed (held), token, detail (dlock_lock_lost_cause's text) */
} dlock_event_type;
typedef struct dlock_event dlock_event;
typedef void (*dlock_event_fn)(const dlock_event *e, void *arg);
/* Sets c's hook (fn NULL is DLOCK_EINVAL); once per client, best right after opening it: a
 * second call is DLOCK_EINVAL. Any thread. The hook sees what happens after this call. */
DLOCK_API dlock_status dlock_client_set_event_hook(dlock_client *c, dlock_event_fn fn, void *arg);
DLOCK_API dlock_event_type dlock_event_type_of(const dlock_event *e);
/* "acquiring", "acquired", "not_acquired", "released", "renewal_failed", "lost"; static. */
DLOCK_API const char  *dlock_event_type_name(dlock_event_type t);
DLOCK_API const char  *dlock_event_lock_name(const dlock_event *e);
DLOCK_API uint32_t     dlock_event_attempts(const dlock_event *e);
DLOCK_API int64_t      dlock_event_elapsed_ms(const dlock_event *e);
DLOCK_API uint64_t     dlock_event_fencing_token(const dlock_event *e);  /* 0 when none */
DLOCK_API dlock_status dlock_event_status(const dlock_event *e);
DLOCK_API const char  *dlock_event_detail(const dlock_event *e);         /* "" when none */

/* The queued form of the hook, for runtimes that cannot take a call on the library's threads
 * (Node's koffi, LuaJIT) and for consumers that must not hold up the work: instead of calling a
 * hook, c queues each event as a DLOCK_QUEUE_EVENT entry with tag in q (see "completion
 * queues"), in the order they happened, and never waits for the consumer. Either this or
 * dlock_client_set_event_hook, once per client, best right after opening it: a second call of
 * either is DLOCK_EINVAL. NULL c or q is DLOCK_EINVAL. Any thread. The client keeps q alive
 * (dlock_queue_free then only lets go of the handle: later events are dropped). Each event
 * costs the thread that made it a copy of the event (an allocation holding its name and
 * detail) and a short lock of the queue; the fd is written only when the queue was empty. At
 * most 65,536 event entries wait in one queue: beyond that, new events are dropped until the
 * consumer pops (other entries are never dropped). */
DLOCK_API dlock_status dlock_client_set_event_queue(dlock_client *c, dlock_queue *q, uint64_t tag);
/* dlock_queue_pop_leader, and for a DLOCK_QUEUE_EVENT entry *event is the event (*status
 * DLOCK_OK, *lock and *leader NULL, dlock_last_error() ""): the caller's, read with the
 * dlock_event_* accessors (its strings live as long as it does, from any thread) and freed with
 * dlock_event_free; NULL for every other entry. leader and event may be NULL (the snapshot or
 * event is dropped). Never blocks. Events still in a queue when it is freed are dropped with
 * it. */
DLOCK_API int dlock_queue_pop_event(dlock_queue *q, uint64_t *tag, dlock_status *status,
                                    dlock_lock **lock, struct dlock_info **leader,
                                    dlock_event **event);
/* Frees an event dlock_queue_pop_event handed out. NULL is ok (as is an event a hook was given:
 * that is not the caller's, and nothing happens). Any thread. */
DLOCK_API void dlock_event_free(dlock_event *e);

/* ----- job rules ------------------------------------------------------------------------------
 *
 * For scheduled jobs and deploy steps (docs/jobs.md). Every backend; the rules are kept by the
 * holder's heartbeats, on its monotonic clock. */

/* The longest the lock is kept by heartbeats: once max_hold_ms has passed since the acquire
 * returned, they renew it no more, the lock ends with the lease its last renewal gave (so at
 * most max_hold_ms + lease_ms after the acquire), and it is reported lost with the cause
 * "max_hold" (on_lost, DLOCK_QUEUE_LOST, dlock_lock_lost_cause). A job timeout that holds
 * across machines. An explicit dlock_extend is still the caller's to make (lease 0 is refused
 * then). 0 = none (default); at most ten years. With lease_ms 0 (no expiry) or heartbeat_ms 0
 * (no renewals to stop) the acquire is DLOCK_EINVAL. */
DLOCK_API dlock_status dlock_options_set_max_hold_ms(dlock_options *o, uint64_t ms);

/* The shortest the name stays taken (ShedLock's lockAtLeastFor): however the hold ends, by a
 * release or an expiry (even a crashed holder's lease shorter than this), the name is not
 * free before the acquire + min_hold_ms on the server's clock. A release before then is still
 * checked against the owner and returns at once, leaving a marker with no owner: dlock_inspect
 * shows no holder and dlock_info_closed_ms > 0, closed_by "min_hold"; waiters wait out the time
 * left; dlock_break clears it. With shared or semaphore holds, the longest applies. The next
 * token is greater, as always. A cron job run every minute on ten machines with a min hold of
 * 50 s runs once a minute. 0 = none (default); at most ten years, and at most max_hold_ms when
 * that is set (else the acquire is DLOCK_EINVAL naming both). A backend without
 * DLOCK_CAP_MIN_HOLD refuses the acquire with DLOCK_EINVAL. */
DLOCK_API dlock_status dlock_options_set_min_hold_ms(dlock_options *o, uint64_t ms);

/* Lock-delay, as in Chubby and Consul, for resources that cannot check a fencing token: when
 * the hold ends uncleanly (its lease ran out: the holder crashed, hung or lost the server)
 * nobody may acquire the name for ms more (dlock_inspect: no holder, closed_by "lock_delay";
 * waiters wait it out). A release is a clean end: no delay. Renewals and extends carry it past
 * each new lease. With shared holds, the longest applies. 0 = none (default); at most
 * DLOCK_MAX_LOCK_DELAY_MS (60 s), above is DLOCK_EINVAL. A hold with no lease never ends
 * uncleanly: nothing to delay. A backend without DLOCK_CAP_LOCK_DELAY refuses the acquire with
 * DLOCK_EINVAL. */
#define DLOCK_MAX_LOCK_DELAY_MS 60000
DLOCK_API dlock_status dlock_options_set_lock_delay_ms(dlock_options *o, uint64_t ms);

/* ----- limits and helpers, for bindings that cannot read #defines ------------------------- */

typedef enum dlock_limit {
  DLOCK_LIMIT_NAME_BYTES = 0,  /* DLOCK_MAX_NAME_BYTES */
  DLOCK_LIMIT_OWNER_BYTES = 1, /* DLOCK_MAX_OWNER_BYTES */
  DLOCK_LIMIT_LEASE_MS = 2,    /* the longest lease (and wait) accepted */
  DLOCK_LIMIT_VALUE_BYTES = 3, /* DLOCK_MAX_VALUE_BYTES */
  DLOCK_LIMIT_REASON_BYTES = 4, /* DLOCK_MAX_REASON_BYTES */
  DLOCK_LIMIT_LOCK_DELAY_MS = 5 /* DLOCK_MAX_LOCK_DELAY_MS */
} dlock_limit;
/* The limit's value; 0 for an unknown limit. */
DLOCK_API uint64_t dlock_limit_value(dlock_limit which);
/* Copies url with its secrets replaced by "***" into buf (NUL-terminated, cut to len - 1
 * bytes; buf NULL or len 0 copies nothing) and returns the redacted URL's full length. The
 * secrets: the password, from the first ':' after "scheme://" to the LAST '@' of url (so a
 * password holding an unencoded '/', '?', '#' or '@' is hidden whole; when that '@' is in a
 * path or query, more than the password is hidden), and the values of secret query parameters
 * (sentinel_password=). What the library's own messages show; for logs and error messages of
 * code that holds URLs. 0 for a NULL url. */
DLOCK_API size_t dlock_url_redact(const char *url, char *buf, size_t len);

/* ----- DynamoDB --------------------------------------------------------------------------- */

/* The older, DynamoDB-only name of dlock_backend_prepare, kept for the ABI: new code calls
 * dlock_backend_prepare, which takes every scheme (here other schemes are DLOCK_EINVAL).
 * Creates the lock table a dynamodb:// URL names (see URLs above): key schema partition_key
 * (HASH, string) [+ sort_key (RANGE, string)], on-demand billing (PAY_PER_REQUEST). Then waits
 * until DynamoDB reports it ACTIVE: up to wait_ms, -1 = no limit, 0 = do not wait. A table that
 * already exists with the same key schema is DLOCK_OK; with another key schema, DLOCK_EINVAL.
 * DLOCK_EIO when it is not ACTIVE in time or the endpoint cannot be reached, DLOCK_EAUTH when
 * the credentials are refused. Uses the same credentials chain as dlock_client_open. */
DLOCK_API dlock_status dlock_dynamodb_create_table(const char *url, int64_t wait_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLOCK_DLOCK_H_ */
