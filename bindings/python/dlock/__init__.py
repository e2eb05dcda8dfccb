"""dlock: distributed locks with fencing tokens and lease heartbeats (Python binding).

A thin ctypes layer over libdlock.so. See README.md beside this package for the full guide.

    import dlock
    with dlock.Client("redis://127.0.0.1:6379") as client:
        with client.lock("jobs/nightly", lease_ms=10_000, wait_ms=5_000) as lock:
            print(lock.fencing_token)  # pass it to your storage; refuse older tokens there

Threads: a Client may be shared by any number of threads; a Lock may be used from any thread
(calls on one Lock are serialized). on_lost callbacks run on the "dlock-events" thread.
asyncio: `async with client.alock(...)`, `await client.aacquire(...)`, `await lock.arelease()`,
`await lock.aextend(ms)` never block the event loop (see README.md, "asyncio").
"""

import asyncio
import collections
import ctypes
import itertools
import math
import operator
import os
import select
import sys
import threading
import traceback
import warnings
import weakref

from . import _lib
from ._errors import (AuthError, BackendError, Cancelled, ConnectionError, Error, InternalError,
                      InvalidArgument, NotAcquired, NotHeld, OutOfMemory)
from ._errors import make as _errors_make
from ._errors import name_codes as _name_codes

__all__ = [
    "Client", "Lock", "LockInfo", "Holder", "version", "library_path",
    "Error", "NotAcquired", "NotHeld", "InvalidArgument", "ConnectionError", "BackendError",
    "AuthError", "Cancelled", "OutOfMemory", "InternalError",
    "MAX_NAME_BYTES", "MAX_OWNER_BYTES",
]
__version__ = "0.1.0"

_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1
_I64_MIN, _I64_MAX = -2**63, 2**63 - 1

_c, library_path = _lib.load()

# The library's limits (dlock_limit_value): the longest lock name and owner label, in bytes.
MAX_NAME_BYTES = int(_c.dlock_limit_value(0))   # DLOCK_LIMIT_NAME_BYTES
MAX_OWNER_BYTES = int(_c.dlock_limit_value(1))  # DLOCK_LIMIT_OWNER_BYTES
# The longest lease (and heartbeat period) the library takes (DLOCK_LIMIT_LEASE_MS, dlock.h's
# "At most 10 years"), and how its messages word that bound. Only for errors about values a
# uint64_t cannot carry; every other value reaches the library's own checks.
# tests/test_dlock.py checks that the words agree.
_MAX_LEASE_MS = int(_c.dlock_limit_value(2))
_LEASE_BOUND = f"at most ten years, {_MAX_LEASE_MS} ms; 0 means no expiry"
_HEARTBEAT_BOUND = "at most ten years; 0 means no heartbeats"

# dlock_kind and the capability bits of dlock_client_capabilities, by the names this binding
# gives them (the library has numbers only).
_KINDS = {"exclusive": 0, "shared": 1}
_KIND_NAMES = {n: k for k, n in _KINDS.items()}
_CAPABILITIES = {0x1: "fencing_strict", 0x2: "notifies", 0x4: "shared", 0x8: "permits", 0x10: "fair"}

# Set DLOCK_PY_FORCE_THREADS=1 to make asyncio use the thread-pool path even when the library
# has the async C API (the test suite runs both ways).
_use_async_c = os.environ.get("DLOCK_PY_FORCE_THREADS") != "1"


def version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _c.dlock_version().decode()


def _status_name(status):
    """The library's name for a status number, e.g. "DLOCK_NOT_HELD" ("DLOCK_UNKNOWN")."""
    return _c.dlock_status_str(status).decode()


_name_codes(_status_name)


def _url_shown(url):
    """url (bytes) as the library shows it: any password replaced by "***" (dlock_url_redact)."""
    n = _c.dlock_url_redact(url, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    _c.dlock_url_redact(url, buf, n + 1)
    return buf.value.decode("utf-8", "replace")


def _error(status, message=None):
    """The exception for a failed call; reads dlock_last_error() unless a message is given.
    Must run on the thread that made the call (the message is per thread)."""
    if message is None:
        message = _c.dlock_last_error().decode("utf-8", "replace")
    return _errors_make(status, message, _status_name(status))



def _report_callback_exception(what):
    print(f"dlock: exception in {what} (ignored):", file=sys.stderr)
    traceback.print_exc()


# ----- argument checks: the language's natural errors, before anything reaches C ------------

def _name_arg(name):
    if isinstance(name, str):
        b = name.encode("utf-8")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        b = bytes(name)
    else:
        raise TypeError(f"lock name must be str or bytes, not {type(name).__name__}")
    if b"\0" in b:
        raise InvalidArgument("lock name must not contain NUL bytes")
    # Length (1..1024 bytes) is checked by the library, whose message says which.
    return b


# Ranges are the library's to check, in its own words: these only keep values inside the C
# parameter's type, because ctypes would wrap the others modulo 2**64 (2**64 would become 0,
# "no expiry").

def _ms_arg(what, value, unit="milliseconds"):
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)  # int, or anything with __index__; never float or str
    except TypeError:
        raise TypeError(f"{what} must be an int ({unit}), not {type(value).__name__}") from None


def _lease_arg(what, value, bound):
    """lease_ms or heartbeat_ms, for a uint64_t. 0 is valid, so a negative number cannot be
    turned into one the library refuses: this says what the library would, with its bound."""
    value = _ms_arg(what, value)
    if not 0 <= value <= _U64_MAX:
        raise InvalidArgument(f"{what} {value} is {'negative' if value < 0 else 'too long'} ({bound})")
    return value


def _wait_arg(value):
    """wait_ms, for an int64_t. Clamping keeps its meaning: the library refuses anything below
    -1 (a refused value under -2**63 is named as -2**63), and 2**63-1 ms is as unbounded as any
    longer wait."""
    return min(max(_ms_arg("wait_ms", value), _I64_MIN), _I64_MAX)


def _retry_arg(what, value):
    """One bound of retry_ms, for a uint64_t. Clamping keeps the library's verdict: it refuses
    anything below 1 or above an hour, and its message names no number."""
    return min(max(_ms_arg(what, value), 0), _U64_MAX)


def _check(status):
    if status != 0:
        raise _error(status)


# ----- outcomes from the library ------------------------------------------------------------------
# The library gets small integer tags, never Python objects; these dicts map the tags back.

_ids = itertools.count(1)
_lost_slots = {}      # id -> _LostSlot, from acquire until release has returned
_pending = {}         # id -> callable(status, handle, message), for async completions


class _LostSlot:
    __slots__ = ("id", "callback", "lock_ref", "fired_early", "mu")

    def __init__(self, callback):
        self.id = next(_ids)
        self.callback = callback
        self.lock_ref = None
        self.fired_early = False
        self.mu = threading.Lock()
        _lost_slots[self.id] = self

    def attach(self, lock):
        """Called once the Lock object exists; runs a callback that came before it did."""
        with self.mu:
            self.lock_ref = weakref.ref(lock)
            early = self.fired_early
        if early:
            self.run(lock)

    def fire(self):
        with self.mu:
            if self.lock_ref is None:
                self.fired_early = True
                return
            lock = self.lock_ref()
        if lock is not None:
            self.run(lock)

    def run(self, lock):
        try:
            self.callback(lock)
        except BaseException:
            _report_callback_exception("on_lost callback")

    def drop(self):
        _lost_slots.pop(self.id, None)


def _on_lost(arg):
    slot = _lost_slots.get(arg)
    if slot is not None:  # else released meanwhile
        slot.fire()


def _on_async_done(status, arg, handle, message):
    entry = _pending.pop(arg, None)
    if entry is None:  # nobody waits any more: give back what we were handed
        if handle:
            _c.dlock_release_queued(handle, _queue, 0)
        return
    try:
        entry(status, handle, message)
    except BaseException:
        _report_callback_exception("async completion")


# ----- the completion queue --------------------------------------------------------------------
# One dlock_queue per process. The library appends outcomes (async calls, lost locks) and makes
# its fd readable; the "dlock-events" daemon thread drains it and runs the Python side. So the
# library's thread never takes the GIL, and a slow on_lost holds up no heartbeat.
_QUEUE_DONE = 1
_QUEUE_LOST = 2


def _new_queue():
    q = _lib.c_queue_p()
    status = _c.dlock_queue_new(ctypes.byref(q))
    if status != 0:
        raise OSError(f"dlock: cannot create the completion queue: {_c.dlock_last_error().decode()}")
    return q


_queue = _new_queue()


def _give_back(h, slot):
    """Releases a lock handle nobody wants, without waiting or raising; its on_lost slot goes
    once the release is done (so on_lost is neither running nor going to run)."""
    op_id = next(_ids)
    _pending[op_id] = lambda status, handle, message: slot and slot.drop()
    if _c.dlock_release_queued(h, _queue, op_id) != 0:  # e.g. client closed: nothing queued
        _pending.pop(op_id, None)
        if slot is not None:
            slot.drop()


# Locks garbage collected while held, as (handle, on_lost slot): Lock.__del__ leaves them here
# for the dlock-events thread to release. A finalizer runs on whatever thread the collector
# interrupts, possibly between a failed dlock call and its dlock_last_error() read; a dlock call
# made there would overwrite that thread's message.
_orphans = collections.deque()
_wake_r, _wake_w = os.pipe()
os.set_blocking(_wake_w, False)


def _drain_forever():
    fd = _c.dlock_queue_fd(_queue)
    tag = ctypes.c_uint64()
    status = _lib.c_status()
    handle = _lib.c_lock_p()
    pop = _c.dlock_queue_pop
    while True:
        readable, _, _ = select.select([fd, _wake_r], [], [])
        if _wake_r in readable:
            os.read(_wake_r, 4096)
            while _orphans:
                _give_back(*_orphans.popleft())
        while True:
            kind = pop(_queue, ctypes.byref(tag), ctypes.byref(status), ctypes.byref(handle))
            if kind <= 0:
                break
            if kind == _QUEUE_DONE:
                message = _c.dlock_last_error().decode("utf-8", "replace") if status.value else None
                _on_async_done(status.value, tag.value, handle.value, message)
            elif kind == _QUEUE_LOST:
                _on_lost(tag.value)


threading.Thread(target=_drain_forever, name="dlock-events", daemon=True).start()


def _deliver(loop, fut, status, value, message, on_unwanted=None):
    """From the dlock-events thread: settle an asyncio future on its loop. on_unwanted(value) runs
    when the future was cancelled meanwhile (or its loop is gone) and the value must be undone."""

    def settle():
        if fut.done():
            if on_unwanted is not None:
                on_unwanted(value)
        elif status != 0:
            fut.set_exception(_error(status, message))
        else:
            fut.set_result(value)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed
        if on_unwanted is not None:
            on_unwanted(value)


# ----- inspection ------------------------------------------------------------------------------

Holder = collections.namedtuple("Holder", "owner remaining_ms fencing_token")
Holder.__doc__ = """One holder of a lock, as Client.inspect saw it.

owner          its label (acquire's owner=), or None when it set none
remaining_ms   its remaining lease as the server sees it, in ms; None for no expiry
fencing_token  the token of its acquisition (int); None when the backend does not know it
"""
# permits came later: last, with a default, so LockInfo(kind, holders) still makes one.
LockInfo = collections.namedtuple("LockInfo", "kind holders permits", defaults=(0,))
LockInfo.__doc__ = """Who holds a lock: Client.inspect's answer.

kind     "exclusive" or "shared": the kind of hold the holders have ("exclusive" when free and
         for a semaphore)
holders  a list of Holder; empty when nobody holds it
permits  the semaphore's number of permits while the name is one; 0 for a lock or a free name
"""


def _lock_info(info):
    holders = []
    for k in range(_c.dlock_info_holders(info)):
        owner = _c.dlock_info_owner(info, k)
        left = _c.dlock_info_remaining_ms(info, k)
        token = _c.dlock_info_fencing_token(info, k)
        holders.append(Holder(owner.decode("utf-8", "replace") if owner else None,
                              None if left < 0 else left, token or None))
    kind = _c.dlock_info_kind(info)
    return LockInfo(_KIND_NAMES.get(kind, kind), holders, int(_c.dlock_info_permits(info)))


# ----- Client ----------------------------------------------------------------------------------

class Client:
    """A connection to one backend, named by a URL:

        redis://[[user]:password@]host[:port][/db][?prefix=..&connect_timeout_ms=..&timeout_ms=..]
        redis+unix://[[user]:password@]/path/to.sock[?db=N&...]

    Opening connects and authenticates once (raises InvalidArgument, ConnectionError or
    AuthError). Thread-safe. close() (or leaving a `with` block) releases every lock it holds.
    """

    def __init__(self, url):
        if not isinstance(url, str):
            raise TypeError(f"url must be str, not {type(url).__name__}")
        self._h = None
        self._mu = threading.Condition(threading.Lock())
        self._inflight = 0
        self._closed = False
        burl = url.encode("utf-8")
        if b"\0" in burl:
            raise InvalidArgument("url must not contain NUL bytes")
        self._url_redacted = _url_shown(burl)
        handle = ctypes.c_void_p()
        _check(_c.dlock_client_open(burl, ctypes.byref(handle)))
        self._h = handle.value

    # -- lifetime

    def close(self):
        """Releases every lock this client still holds, closes its connections and stops its
        thread. Waits for calls in progress on other threads. Idempotent. Locks still referenced
        stay safe to use: their release() then raises NotHeld."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            while self._inflight:
                self._mu.wait()
            h, self._h = self._h, None
        if h:
            _c.dlock_client_close(h)

    async def aclose(self):
        """close() in a worker thread."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def __del__(self):
        try:
            if not self._closed and self._h:
                self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"<dlock.Client {self._url_redacted}{' closed' if self._closed else ''}>"

    def _enter(self):
        with self._mu:
            if self._closed:  # the library's handle is gone: nothing to ask
                raise InvalidArgument(f"client {self._url_redacted} is closed")
            self._inflight += 1
            return self._h

    def _leave(self):
        with self._mu:
            self._inflight -= 1
            if self._inflight == 0 and self._closed:
                self._mu.notify_all()

    # -- options

    @staticmethod
    def _options(lease_ms, wait_ms, heartbeat_ms, retry_ms, owner, on_lost, kind=None, permits=None,
                 shared=None, fair=None):
        """Checks every argument (TypeError / InvalidArgument), then builds a dlock_options and
        the on_lost slot. Returns (options pointer or None, slot or None)."""
        if lease_ms is not None:
            lease_ms = _lease_arg("lease_ms", lease_ms, _LEASE_BOUND)
        wait_ms = -1 if wait_ms is None else _wait_arg(wait_ms)
        if heartbeat_ms is not None:
            heartbeat_ms = _lease_arg("heartbeat_ms", heartbeat_ms, _HEARTBEAT_BOUND)
        if retry_ms is not None:
            if not isinstance(retry_ms, (tuple, list)) or len(retry_ms) != 2:
                raise TypeError("retry_ms must be a (min_ms, max_ms) pair")
            retry_ms = (_retry_arg("retry_ms[0]", retry_ms[0]), _retry_arg("retry_ms[1]", retry_ms[1]))
        if owner is not None:
            if isinstance(owner, str):
                owner = owner.encode("utf-8")
            elif isinstance(owner, (bytes, bytearray)):
                owner = bytes(owner)
            else:
                raise TypeError(f"owner must be str or bytes, not {type(owner).__name__}")
            if b"\0" in owner:
                raise InvalidArgument("owner must not contain NUL bytes")
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        if kind is not None:
            if not isinstance(kind, str):
                raise TypeError(f"kind must be a str, not {type(kind).__name__}")
            if kind not in _KINDS:
                raise InvalidArgument(f"kind {kind!r} is none of {', '.join(map(repr, _KINDS))}")
        if permits is not None:
            permits = _ms_arg("permits", permits, "a count")
            if not 0 <= permits <= _U32_MAX:
                raise InvalidArgument(f"permits {permits} is out of range (0..{_U32_MAX}; 0 means off)")
        if shared is not None:
            # shared=True is kind="shared", shared=False kind="exclusive"; saying both must agree.
            if not isinstance(shared, bool):
                raise TypeError(f"shared must be a bool, not {type(shared).__name__}")
            said = "shared" if shared else "exclusive"
            if kind is not None and kind != said:
                raise InvalidArgument(f"shared={shared} contradicts kind={kind!r} (give one of them)")
            if shared and permits:
                raise InvalidArgument(f"shared=True and permits={permits}: a name is shared or a "
                                      "semaphore, not both (drop shared, or permits=0)")
            kind = said
        if fair is not None and not isinstance(fair, bool):
            raise TypeError(f"fair must be a bool, not {type(fair).__name__}")

        if (lease_ms is None and wait_ms == 0 and heartbeat_ms is None and retry_ms is None
                and owner is None and on_lost is None and kind is None and permits is None
                and fair is None):
            return None, None
        o = _c.dlock_options_new()
        if not o:
            raise MemoryError("dlock_options_new")
        try:
            if lease_ms is not None:
                _check(_c.dlock_options_set_lease_ms(o, lease_ms))
            if heartbeat_ms is not None:
                _check(_c.dlock_options_set_heartbeat_ms(o, heartbeat_ms))
            if wait_ms != 0:
                _check(_c.dlock_options_set_wait_ms(o, wait_ms))
            if retry_ms is not None:
                _check(_c.dlock_options_set_retry_ms(o, *retry_ms))
            if owner is not None:
                _check(_c.dlock_options_set_owner(o, owner))
            if kind is not None:
                _check(_c.dlock_options_set_kind(o, _KINDS[kind]))
            if permits is not None:
                _check(_c.dlock_options_set_permits(o, permits))
            if fair is not None:
                _check(_c.dlock_options_set_fair(o, 1 if fair else 0))
            slot = None
            if on_lost is not None:
                slot = _LostSlot(on_lost)
                _check(_c.dlock_options_set_on_lost_queued(o, _queue, slot.id))
        except BaseException:
            _c.dlock_options_free(o)
            raise
        return o, slot

    # -- inspection

    @property
    def capabilities(self):
        """What this client's backend offers, as a frozenset of names (dlock_client_capabilities):
        "fencing_strict" (tokens strictly increasing under every fault its docs list),
        "notifies" (waiters woken by releases), "shared" (kind="shared"), "permits"."""
        h = self._enter()
        try:
            bits = _c.dlock_client_capabilities(h)
        finally:
            self._leave()
        return frozenset(name for bit, name in _CAPABILITIES.items() if bits & bit)

    def inspect(self, name):
        """Who holds the lock called `name` now: a LockInfo(kind, holders, permits), holders being a
        list of Holder(owner, remaining_ms, fencing_token) (empty when free), permits the
        semaphore's size (0 for a lock or a free name). A snapshot read from the server in one
        call, stale as soon as it returns: never decide from it whether to take the lock. Owner
        tokens are never shown, only the owner labels."""
        bname = _name_arg(name)
        out = _lib.c_info_p()
        h = self._enter()
        try:
            status = _c.dlock_inspect(h, bname, ctypes.byref(out))
            err = _error(status) if status != 0 else None
        finally:
            self._leave()
        if err is not None:
            raise err
        try:
            return _lock_info(out)
        finally:
            _c.dlock_info_free(out)

    async def ainspect(self, name):
        """inspect() in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, self.inspect, name)

    # -- acquire

    def acquire(self, name, *, lease_ms=None, wait_ms=0, heartbeat_ms=None, retry_ms=None,
                owner=None, on_lost=None, kind=None, permits=None, shared=None, fair=None):
        """Acquires the lock called `name` (str or bytes, 1..MAX_NAME_BYTES bytes) and returns a Lock.

        lease_ms      server-side lease (default 10000; 0 = never expires until released)
        wait_ms       0 = one try (default), N = wait up to N ms, -1 or None = wait forever
        heartbeat_ms  renewal period (default lease/3; 0 = no heartbeats)
        retry_ms      (min, max) of the fallback retry while waiting (default (50, 1000))
        owner         a label stored with the lock for people and tools
        on_lost       callback(lock), run once on the "dlock-events" thread if the lock is found lost
        kind          "exclusive" (default) or "shared"; shared=True is kind="shared" (and
                      shared=False kind="exclusive"); permits: a semaphore of that many holders
                      (0 = off). A shared semaphore, or shared= contradicting kind=, is
                      InvalidArgument; so are kinds the backend does not offer (capabilities).
        fair          True (default): a waiting exclusive acquire takes a place in line and is
                      handed the lock by a release, in arrival order (backends with the "fair"
                      capability); False: it competes with every other waiter at each release

        Raises NotAcquired when someone else holds it and the wait ran out. Blocks the calling
        thread only (the GIL is released while waiting).
        """
        bname = _name_arg(name)
        opts, slot = self._options(lease_ms, wait_ms, heartbeat_ms, retry_ms, owner, on_lost, kind,
                                   permits, shared, fair)
        out = ctypes.c_void_p()
        err = None
        try:
            h = self._enter()
            try:
                status = _c.dlock_acquire(h, bname, opts, ctypes.byref(out))
                if status != 0:
                    err = _error(status)
            finally:
                self._leave()
        except BaseException:
            if slot is not None:
                slot.drop()
            raise
        finally:
            if opts:
                _c.dlock_options_free(opts)
        if err is not None:
            if slot is not None:
                slot.drop()
            raise err
        return Lock(self, out.value, name, slot)

    def lock(self, name, **options):
        """Acquires like acquire() and returns the Lock, which is a context manager: leaving
        the `with` block releases it (raising NotHeld if it had been lost meanwhile, unless the
        block is already raising)."""
        return self.acquire(name, **options)

    # -- asyncio

    async def aacquire(self, name, *, lease_ms=None, wait_ms=0, heartbeat_ms=None, retry_ms=None,
                       owner=None, on_lost=None, kind=None, permits=None, shared=None, fair=None):
        """acquire() for asyncio: waits without blocking the event loop or holding a thread
        (the library's async API and completion queue; with DLOCK_PY_FORCE_THREADS=1, a worker
        thread per waiting call).
        Cancelling the awaiting task cancels the acquire (and gives back a lock that arrived at
        the same moment). on_lost(lock) runs on this event loop (call_soon_threadsafe)."""
        loop = asyncio.get_running_loop()
        if on_lost is not None:
            if not callable(on_lost):
                raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
            user_on_lost = on_lost

            def on_lost(lock, _loop=loop, _cb=user_on_lost):
                try:
                    _loop.call_soon_threadsafe(_cb, lock)
                except RuntimeError:  # loop closed: nobody to tell
                    pass
        kwargs = dict(lease_ms=lease_ms, wait_ms=wait_ms, heartbeat_ms=heartbeat_ms,
                      retry_ms=retry_ms, owner=owner, on_lost=on_lost, kind=kind, permits=permits,
                      shared=shared, fair=fair)
        if not _use_async_c:
            return await _in_thread(loop, lambda: self.acquire(name, **kwargs), _release_quietly,
                                    dedicated=wait_ms != 0)

        bname = _name_arg(name)
        opts, slot = self._options(**kwargs)
        fut = loop.create_future()
        op_id = next(_ids)

        def unwanted(lock):
            if isinstance(lock, Lock):
                lock._release_async_quietly()

        def completed(status, handle, message):
            if status != 0:
                if slot is not None:
                    slot.drop()
                _deliver(loop, fut, status, None, message)
            else:
                lock = Lock(self, handle, name, slot)
                _deliver(loop, fut, 0, lock, None, unwanted)

        _pending[op_id] = completed
        try:
            h = self._enter()
            try:
                status = _c.dlock_acquire_queued(h, bname, opts, _queue, op_id)
                err = _error(status) if status != 0 else None
            finally:
                self._leave()
        except BaseException:
            _pending.pop(op_id, None)
            if slot is not None:
                slot.drop()
            raise
        finally:
            if opts:
                _c.dlock_options_free(opts)
        if err is not None:
            _pending.pop(op_id, None)
            if slot is not None:
                slot.drop()
            raise err
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                h = self._enter()
            except InvalidArgument:
                h = None  # closed: close() cancelled it already
            if h:
                try:
                    _c.dlock_acquire_cancel_queued(h, _queue, op_id)  # EINVAL if it completed meanwhile: fine
                finally:
                    self._leave()
            raise

    def alock(self, name, **options):
        """`async with client.alock(name, ...) as lock:` acquires without blocking the event
        loop and releases on the way out. Also awaitable: `lock = await client.alock(...)`."""
        return _AsyncLockContext(self, name, options)


class _AsyncLockContext:
    __slots__ = ("_client", "_name", "_options", "_lock")

    def __init__(self, client, name, options):
        self._client, self._name, self._options, self._lock = client, name, options, None

    def __await__(self):
        return self._client.aacquire(self._name, **self._options).__await__()

    async def __aenter__(self):
        self._lock = await self._client.aacquire(self._name, **self._options)
        return self._lock

    async def __aexit__(self, exc_type, exc, tb):
        lock, self._lock = self._lock, None
        return await lock.__aexit__(exc_type, exc, tb)


async def _in_thread(loop, fn, undo, dedicated):
    """The thread-pool fallback (DLOCK_PY_FORCE_THREADS=1): runs fn off the event
    loop; if the awaiting task is cancelled meanwhile, undo(result) runs when fn finishes.
    Calls that may wait for another holder get a thread of their own (dedicated): in the loop's
    bounded default executor, waiters could take every worker and starve the releases they
    wait for."""
    if dedicated:
        cfut = loop.create_future()

        def run():
            try:
                result, error = fn(), None
            except BaseException as e:  # delivered to the awaiting task
                result, error = None, e
            _deliver_result(loop, cfut, result, error, undo)

        threading.Thread(target=run, name="dlock-acquire", daemon=True).start()
    else:
        cfut = loop.run_in_executor(None, fn)
    try:
        return await asyncio.shield(cfut)
    except asyncio.CancelledError:
        if not dedicated:
            def after(f):
                if not f.cancelled() and f.exception() is None:
                    undo(f.result())
            cfut.add_done_callback(after)
        else:
            cfut.cancel()  # run() sees it done and undoes the result
        raise


def _deliver_result(loop, fut, result, error, undo):
    def settle():
        if fut.done():
            if error is None and undo is not None:
                undo(result)
        elif error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # loop closed
        if error is None and undo is not None:
            undo(result)


def _release_quietly(lock):
    try:
        lock.release()
    except Error:
        pass


# ----- Lock ------------------------------------------------------------------------------------

class Lock:
    """A held lock. Made by Client.acquire / lock / aacquire / alock.

    name           as given to acquire (str or bytes)
    fencing_token  int, greater than every token issued before for this name; pass it to the
                   storage you write to, and have it refuse older tokens
    attempts       how many tries the acquire took (1 = first try)
    valid          True while the local deadline holds and the lock was not found lost
    remaining_ms   ms before the local deadline (math.inf for no expiry; 0 once lost/released)
    extend(ms) / release()   NotHeld if the lock was lost (expired, taken over, released)

    A context manager (with / async with) that releases on exit. A Lock that is garbage
    collected while still held is released then (with a ResourceWarning).
    """

    __slots__ = ("_client", "_h", "_mu", "_slot", "name", "fencing_token", "attempts", "__weakref__")

    def __init__(self, client, handle, name, slot):
        self._client = client   # keeps the client (and so its locks) alive while this lock is
        self._h = handle
        self._mu = threading.Lock()
        self._slot = slot
        self.name = name
        self.fencing_token = int(_c.dlock_lock_fencing_token(handle))
        self.attempts = int(_c.dlock_lock_attempts(handle))
        if slot is not None:
            slot.attach(self)

    @property
    def valid(self):
        with self._mu:
            return bool(self._h) and _c.dlock_lock_is_valid(self._h) == 1

    @property
    def remaining_ms(self):
        with self._mu:
            if not self._h:
                return 0
            left = _c.dlock_lock_remaining_ms(self._h)
        return math.inf if left == _I64_MAX else left

    @property
    def released(self):
        """True once release() (or arelease()) was called."""
        return self._h is None

    def _released_error(self):
        return NotHeld(f"lock {self.name!r} was already released")

    def extend(self, lease_ms):
        """Sets the lease to lease_ms from now (0 = no expiry). NotHeld if it was lost."""
        lease_ms = _lease_arg("lease_ms", lease_ms, _LEASE_BOUND)
        with self._mu:
            if not self._h:
                raise self._released_error()
            _check(_c.dlock_extend(self._h, lease_ms))

    def release(self):
        """Releases the lock. Raises NotHeld if it had been lost (expired, taken over, released
        by Client.close) or was already released; the lock is gone either way."""
        with self._mu:
            h, self._h = self._h, None
        if not h:
            raise self._released_error()
        status = _c.dlock_release(h)
        err = _error(status) if status != 0 else None
        self._drop_slot()
        if err is not None:
            raise err

    def _drop_slot(self):
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.drop()

    def _take(self):
        """Takes the handle and slot out of this Lock: (None, None) if already released."""
        with self._mu:
            h, self._h = self._h, None
        if not h:
            return None, None  # and the slot stays for whoever took the handle
        slot, self._slot = self._slot, None
        return h, slot

    def _release_async_quietly(self):
        """Releases without waiting and without raising (for locks nobody wants)."""
        h, slot = self._take()
        if h:
            _give_back(h, slot)

    async def arelease(self):
        """release() without blocking the event loop."""
        loop = asyncio.get_running_loop()
        if not _use_async_c:
            return await loop.run_in_executor(None, self.release)
        with self._mu:
            h, self._h = self._h, None
        if not h:
            raise self._released_error()
        fut = loop.create_future()
        op_id = next(_ids)

        def completed(status, handle, message):
            self._drop_slot()  # release is done: on_lost is neither running nor going to run
            _deliver(loop, fut, status, None, message)

        _pending[op_id] = completed
        status = _c.dlock_release_queued(h, _queue, op_id)
        if status != 0:  # only argument errors come back here; h was freed either way
            _pending.pop(op_id, None)
            self._drop_slot()
            raise _error(status)
        await fut

    async def aextend(self, lease_ms):
        """extend() without blocking the event loop."""
        lease_ms = _lease_arg("lease_ms", lease_ms, _LEASE_BOUND)
        loop = asyncio.get_running_loop()
        if not _use_async_c:
            return await loop.run_in_executor(None, self.extend, lease_ms)
        fut = loop.create_future()
        op_id = next(_ids)
        _pending[op_id] = lambda status, handle, message: _deliver(loop, fut, status, None, message)
        with self._mu:
            if not self._h:
                _pending.pop(op_id, None)
                raise self._released_error()
            status = _c.dlock_extend_queued(self._h, lease_ms, _queue, op_id)
            if status != 0:
                _pending.pop(op_id, None)
                raise _error(status)
        await fut

    # -- context managers

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._h is None:  # released inside the block
            return False
        try:
            self.release()
        except Error:
            if exc_type is None:
                raise  # a lost lock is never silent
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if self._h is None:
            return False
        try:
            await self.arelease()
        except Error:
            if exc_type is None:
                raise
        return False

    def __del__(self):
        try:
            if self._h:
                warnings.warn(f"unreleased {self!r}", ResourceWarning, source=self)
                h, slot = self._take()
                if h:  # no dlock call here: see _orphans
                    _orphans.append((h, slot))
                    try:
                        os.write(_wake_w, b"\0")
                    except BlockingIOError:  # the pipe is full: a wake-up is pending anyway
                        pass
        except Exception:
            pass

    def __repr__(self):
        state = "released" if self._h is None else ("held" if self.valid else "lost")
        return f"<dlock.Lock {self.name!r} token={self.fencing_token} {state}>"
