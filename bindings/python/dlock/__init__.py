"""dlock: distributed locks with fencing tokens and lease heartbeats (Python binding).

A thin ctypes layer over libdlock.so. See README.md beside this package for the full guide.

    import dlock
    with dlock.Client("redis://127.0.0.1:6379") as client:
        lock = client.lock("jobs/nightly", lease=10)   # not acquired yet; reusable
        with lock:                                     # waits for it (no limit by default)
            print(lock.fencing_token)  # pass it to your storage; refuse older tokens there
        if lock.acquire(timeout=5):                    # or by hand: False after 5 s
            lock.release()

The URL names the backend (docs/urls.md): redis:// (one Redis server), rediss:// (over TLS),
redis+unix:// (on a unix socket), redis-cluster:// (a Redis Cluster), redis-sentinel:// (the
master Sentinel names), redlock:// (a quorum of independent Redis masters), dynamodb:// (a
DynamoDB table), etcd:// (an etcd v3 cluster), postgres:// (a PostgreSQL lock table). See
Client.

Durations are float seconds or datetime.timedelta (lease=, timeout=, heartbeat=, retry=); the
integer-millisecond keywords (lease_ms=, wait_ms=, ...) are accepted too. Waits are unlimited by
default, like threading.Lock; timeout= bounds them and blocking=False makes one try.
Threads: a Client may be shared by any number of threads; a Lock is one holder (acquire() while
it holds raises AlreadyHeld): give each thread or task its own client.lock(name). on_lost
callbacks run on the "dlock-events" thread.
asyncio: `async with client.lock(...)`, `await lock.aacquire()`, `await lock.arelease()`,
`await lock.aextend()`, `await lock.aset_value(v)`, `await client.aacquire(...)`,
`await client.ainspect()` and `aleader()` never block the event loop, and run on it: the loop
drives a client of its own (dlock_client_open_hooks), with no thread hop (README.md).
`async with lock.guard():` also cancels the block if the lock is lost (it leaves with LockLost).
Several names, all or none: `with client.lock_many(["acct/1", "acct/2"], timeout=5) as (a, b):`
(a LockGroup of Locks, each with its own fencing token; taken in one fixed order, so no two
groups deadlock); `async with client.alock_many([...]) as (a, b):` for asyncio.
Values and leaders: value= stores bytes with a hold (Holder.value shows them, lock.set_value
replaces them); client.campaign(name, value=...) waits until this candidate leads and returns
the leadership (a Lock whose fencing token is the term), client.leader(name) the current
leader's Holder or None. client.observe(name, callback) calls callback(leader) with who leads
now, then at each change (an Observer: cancel() it, or use it as `with`); asyncio:
`async for leader in client.aobserve(name):`.
fork: a forked child gets its own dlock-events thread and queue; a Client inherited from the
parent raises ForkedClient on use: open a new Client in the child.
Metrics: client.metrics() (a Metrics of MetricFamily, no metrics library needed) and
client.metrics_text() (Prometheus text) say what the client counted (docs/metrics.md);
dlock.prometheus.register(client) exports them through prometheus_client. lock.lost_cause (and
a NotHeld's or LockLost's cause) says why a hold was lost.
Release requests: client.request_release(name, reason) asks the holders of name to let go (True
when there were holders to ask); a hold acquired with on_release_requested=fn hears it as
fn(lock, reason), where on_lost would run, and may release or ignore it.
Events: client.on_event(fn) calls fn(event) (an Event: acquiring, acquired, not_acquired,
released, renewal_failed, lost) as it happens, on the thread that did the work (keep fn quick);
dlock.log_events(client) logs them through logging.getLogger("dlock").

Traces: dlock.otel.instrument() makes OpenTelemetry spans ('dlock.acquire', 'dlock.hold') around
acquires and holds where opentelemetry-api is installed (never a dependency).
"""

import asyncio
import atexit
import collections
import ctypes
import datetime
import functools
import itertools
import logging
import math
import numbers
import operator
import os
import select
import sys
import threading
import time
import traceback
import warnings
import weakref
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Callable, Deque, Dict, FrozenSet, Generator, Iterable,
                    Iterator, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple, Type,
                    TypeVar, Union, overload)

from . import _lib
from ._errors import (AlreadyHeld, AuthError, BackendError, Cancelled, Error, ForkedClient,
                      InternalError, InvalidArgument, LockLost, NotAcquired, NotHeld, OutOfMemory)
# dlock.ConnectionError, deliberately left out of __all__ (see there)
from ._errors import ConnectionError as ConnectionError  # noqa: F401, A004
from ._errors import _LOST_CAUSE
from ._errors import make as _errors_make
from ._errors import name_codes as _name_codes

__all__ = [
    "Client", "Lock", "LockGroup", "LockInfo", "Holder", "Observer", "AsyncObserver", "version",
    "library_path",
    "Metrics", "MetricFamily", "MetricSample",
    "Event", "log_events",
    # Not "ConnectionError": `from dlock import *` must not shadow the builtin (which catches
    # dlock.ConnectionError too).
    "Error", "NotAcquired", "NotHeld", "AlreadyHeld", "InvalidArgument", "BackendError",
    "AuthError", "Cancelled", "OutOfMemory", "InternalError", "LockLost", "ForkedClient",
    "MAX_NAME_BYTES", "MAX_OWNER_BYTES", "MAX_VALUE_BYTES", "MAX_REASON_BYTES",
    "MAX_LOCK_DELAY_MS",
]
__version__: str = "0.1.0"

# The longest reason break_lock takes, in bytes (DLOCK_MAX_REASON_BYTES; the library has no
# dlock_limit for it).
MAX_REASON_BYTES: int = 1024
# The longest lock_delay= taken, in ms (DLOCK_MAX_LOCK_DELAY_MS, 60 s).
MAX_LOCK_DELAY_MS: int = 60_000

_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1
_I64_MIN, _I64_MAX = -2**63, 2**63 - 1

# The library is loaded on first use, not at import, so that `import dlock` works (and says
# nothing) on a machine without libdlock until a Client is opened; _lib.load()'s error then says
# what to install. Until then _c is a stand-in whose first attribute read loads the library and
# puts the real ctypes library in its place: every later call goes straight to ctypes.
_load_lock = threading.Lock()


class _Unloaded:
    def __getattr__(self, name: str) -> Any:
        return getattr(_loaded(), name)


_c: Any = _Unloaded()
_library_path: Optional[str] = None
_limits: Dict[str, int] = {}


def _loaded() -> Any:
    global _c, _library_path
    with _load_lock:
        if isinstance(_c, _Unloaded):
            lib, path = _lib.load()
            # The library's limits (dlock_limit_value): the longest lock name and owner label in
            # bytes, and the longest lease (and heartbeat period; dlock.h's "At most 10 years").
            _limits.update(MAX_NAME_BYTES=int(lib.dlock_limit_value(0)),
                           MAX_OWNER_BYTES=int(lib.dlock_limit_value(1)),
                           MAX_LEASE_MS=int(lib.dlock_limit_value(2)),
                           MAX_VALUE_BYTES=int(lib.dlock_limit_value(3)))
            _name_codes(lambda status: lib.dlock_status_str(status).decode())
            _library_path, _c = path, lib
    return _c


# Module attributes read from the library, so reading one loads it (PEP 562).
library_path: str            # the libdlock file loaded
MAX_NAME_BYTES: int          # DLOCK_LIMIT_NAME_BYTES
MAX_OWNER_BYTES: int         # DLOCK_LIMIT_OWNER_BYTES
MAX_VALUE_BYTES: int         # DLOCK_LIMIT_VALUE_BYTES


def __getattr__(name: str) -> Any:
    if name == "library_path":
        _loaded()
        return _library_path
    if name in ("MAX_NAME_BYTES", "MAX_OWNER_BYTES", "MAX_VALUE_BYTES"):
        _loaded()
        return _limits[name]
    raise AttributeError(f"module 'dlock' has no attribute {name!r}")


def _lease_bound() -> str:
    """How messages word the longest lease. Only for errors about values a uint64_t cannot
    carry; every other value reaches the library's own checks. tests/test_dlock.py checks
    that the words agree."""
    _loaded()
    return f"at most ten years, {_limits['MAX_LEASE_MS']} ms; 0 means no expiry"


def _heartbeat_bound() -> str:
    return "at most ten years; 0 means no heartbeats"


def _max_hold_bound() -> str:
    return "at most ten years; 0 means no maximum"


def _min_hold_bound() -> str:
    return "at most ten years; 0 means no minimum"


def _lock_delay_bound() -> str:
    return f"at most {MAX_LOCK_DELAY_MS} ms; 0 means none"

# dlock_kind and the capability bits of dlock_client_capabilities, by the names this binding
# gives them (the library has numbers only).
_KINDS = {"exclusive": 0, "shared": 1}
_KIND_NAMES = {n: k for k, n in _KINDS.items()}
_CAPABILITIES = {0x1: "fencing_strict", 0x2: "notifies", 0x4: "shared", 0x8: "permits", 0x10: "fair",
                 0x20: "observe_push", 0x40: "break", 0x80: "min_hold", 0x100: "lock_delay",
                 0x200: "release_request"}
# dlock_break_with's flags
_BREAK_NOW = 0x1

# Set DLOCK_PY_FORCE_THREADS=1 to make asyncio use the thread-pool path even when the library
# has the async C API (the test suite runs both ways).
_use_async_c = os.environ.get("DLOCK_PY_FORCE_THREADS") != "1"


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return str(_c.dlock_version().decode())


def _status_name(status):
    """The library's name for a status number, e.g. "DLOCK_NOT_HELD" ("DLOCK_UNKNOWN")."""
    return _c.dlock_status_str(status).decode()


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


def _reason_arg(reason):
    """break_lock's and request_release's reason: None, or str as UTF-8 (its length, at most
    MAX_REASON_BYTES, is the library's to check, in its words)."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise TypeError(f"reason must be str or None, not {type(reason).__name__}")
    b = reason.encode("utf-8")
    if b"\0" in b:
        raise InvalidArgument("reason must not contain NUL bytes")
    return b


def _value_arg(value):
    """A value stored with a hold: bytes as they are (any byte, NUL included), str as UTF-8.
    Its length (at most MAX_VALUE_BYTES) is the library's to check, in its words."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value must be bytes or str, not {type(value).__name__}")


# Ranges are the library's to check, in its own words: these only keep values inside the C
# parameter's type, because ctypes would wrap the others modulo 2**64 (2**64 would become 0,
# "no expiry"). A value the C type cannot carry is an InvalidArgument (a ValueError) naming
# the option: never clamped, never wrapped.

class _Unset:
    """The default of an option whose None means something (wait_ms=None: no limit)."""
    __slots__ = ()

    def __repr__(self):
        return "<unset>"


_UNSET = _Unset()

# The types of the public signatures (the binding ships py.typed; tests/typed_example.py is
# checked with mypy --strict). Names: str or bytes (a bytearray or memoryview is taken too).
_Name = Union[str, bytes]
_Kind = Literal["exclusive", "shared"]
_Value = Union[bytes, str]
# A duration: seconds (int or float), or a datetime.timedelta.
_Seconds = Union[float, datetime.timedelta]
_OnLost = Callable[["Lock"], object]
_OnReleaseRequested = Callable[["Lock", str], object]
_DEFAULT_LEASE_MS = 10_000  # the library's default lease (dlock.h), for extend() with no lease


def _ms_arg(what, value, unit="milliseconds"):
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)  # int, or anything with __index__; never float or str
    except TypeError:
        raise TypeError(f"{what} must be an int ({unit}), not {type(value).__name__}") from None


def _seconds_arg(what, value):
    """A duration in seconds (int or float, not bool) or a datetime.timedelta, as a number of
    microseconds (int), or math.inf. NaN is refused; the sign is the caller's to check."""
    if isinstance(value, datetime.timedelta):
        return value // _MICROSECOND  # exact: a timedelta counts whole microseconds
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds (int or float) or a datetime.timedelta, "
                        f"not {type(value).__name__}")
    value = float(value) if not isinstance(value, int) else value
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidArgument(f"{what} must be a number of seconds, not NaN")
        if math.isinf(value):
            return math.inf if value > 0 else -math.inf
        return round(value * 1_000_000)
    return value * 1_000_000


_MICROSECOND = datetime.timedelta(microseconds=1)


def _shown(value):
    """A duration as its messages show it: seconds as given, a timedelta in seconds too."""
    return f"{value.total_seconds():g}" if isinstance(value, datetime.timedelta) else value


def _us_to_ms(us):
    """Microseconds to whole milliseconds, rounded up: 0.4 ms of lease or wait is 1 ms, never 0
    (a lease of 0 means no expiry)."""
    return -(-us // 1000)


def _lease_arg(what, value, bound):
    """lease_ms or heartbeat_ms, for a uint64_t. 0 is valid, so a negative number cannot be
    turned into one the library refuses: this says what the library would, with its bound."""
    value = _ms_arg(what, value)
    if not 0 <= value <= _U64_MAX:
        raise InvalidArgument(f"{what} {value} is {'negative' if value < 0 else 'too long'} ({bound()})")
    return value


def _lease_seconds(what, value, bound):
    """lease= or heartbeat= in seconds, as milliseconds for a uint64_t (as _lease_arg)."""
    us = _seconds_arg(what, value)
    if us < 0 or us == math.inf or _us_to_ms(us) > _U64_MAX:
        raise InvalidArgument(f"{what} {_shown(value)} s is {'negative' if us < 0 else 'too long'} ({bound()})")
    return _us_to_ms(us)


def _duration(seconds_what, seconds, ms_what, ms, bound):
    """A lease or heartbeat given in seconds (lease=) or milliseconds (lease_ms=, the older
    spelling): milliseconds, or None when neither is given."""
    if seconds is not None and ms is not None:
        raise TypeError(f"give {seconds_what} (seconds) or {ms_what} (milliseconds), not both")
    if seconds is not None:
        return _lease_seconds(seconds_what, seconds, bound)
    if ms is not None:
        return _lease_arg(ms_what, ms, bound)
    return None


def _wait_ms_arg(value):
    """wait_ms, for an int64_t: None is -1 (no limit). The library refuses anything below -1,
    in its words; a value the type cannot carry is refused here, naming it."""
    if value is None:
        return -1
    value = _ms_arg("wait_ms", value)
    if not _I64_MIN <= value <= _I64_MAX:
        raise InvalidArgument(f"wait_ms {value} is out of range (-1 = no limit, 0 = one try, "
                              f"at most {_I64_MAX} ms)")
    return value


def _timeout_arg(value):
    """timeout= (seconds; -1 or None = no limit) as wait milliseconds for an int64_t."""
    if value is None:
        return -1
    us = _seconds_arg("timeout", value)
    if (us == -1_000_000 and not isinstance(value, datetime.timedelta)) or us == math.inf:
        return -1
    if us < 0:
        raise InvalidArgument(f"timeout {_shown(value)} is negative (seconds >= 0, or -1 for no limit)")
    ms = _us_to_ms(us)
    if ms > _I64_MAX:
        raise InvalidArgument(f"timeout {_shown(value)} is too long (at most {_I64_MAX // 1000} s; "
                              "-1 or None for no limit)")
    return ms


def _wait_of(blocking, timeout, wait_ms):
    """The wait in milliseconds (-1 no limit, 0 one try) that blocking=, timeout= (seconds) and
    wait_ms= (the older spelling) say. blocking or timeout may be _UNSET (not given)."""
    if wait_ms is not _UNSET:
        if blocking is not _UNSET or timeout is not _UNSET:
            raise TypeError("give blocking=/timeout= (seconds) or wait_ms= (milliseconds), not both")
        return _wait_ms_arg(wait_ms)
    if blocking is _UNSET:
        blocking = True
    if not isinstance(blocking, bool):
        raise TypeError(f"blocking must be a bool, not {type(blocking).__name__}")
    if not blocking:
        if timeout is not _UNSET and timeout is not None and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return 0
    return -1 if timeout is _UNSET else _timeout_arg(timeout)


def _retry_arg(what, value):
    """One bound of retry_ms, for a uint64_t. The library refuses anything below 1 or above an
    hour, in its words; a value the type cannot carry is refused here, naming it."""
    value = _ms_arg(what, value)
    if not 0 <= value <= _U64_MAX:
        raise InvalidArgument(f"{what} {value} is out of range (1 ms to an hour)")
    return value


def _retry_pair(retry, retry_ms):
    """retry= (min, max) in seconds or retry_ms= (min_ms, max_ms): a pair of ms, or None."""
    if retry is not None and retry_ms is not None:
        raise TypeError("give retry (seconds) or retry_ms (milliseconds), not both")
    if retry is not None:
        if not isinstance(retry, (tuple, list)) or len(retry) != 2:
            raise TypeError("retry must be a (min, max) pair of seconds")
        pair = []
        for i, v in enumerate(retry):
            us = _seconds_arg(f"retry[{i}]", v)
            if us < 0 or us == math.inf or _us_to_ms(us) > _U64_MAX:
                raise InvalidArgument(f"retry[{i}] {_shown(v)} s is out of range (1 ms to an hour)")
            pair.append(_us_to_ms(us))
        return tuple(pair)
    if retry_ms is not None:
        if not isinstance(retry_ms, (tuple, list)) or len(retry_ms) != 2:
            raise TypeError("retry_ms must be a (min_ms, max_ms) pair")
        return (_retry_arg("retry_ms[0]", retry_ms[0]), _retry_arg("retry_ms[1]", retry_ms[1]))
    return None


def _check(status):
    if status != 0:
        raise _error(status)


def _lost_cause_of(h):
    """dlock_lock_lost_cause of the lock handle h: "CAUSE: details", or None while valid."""
    cause = _c.dlock_lock_lost_cause(h)
    return cause.decode("utf-8", "replace") if cause else None


def _cause_code(cause):
    """The stable code that starts a lost cause ("deleted: ..." -> "deleted"), or None."""
    return cause.split(":", 1)[0] if cause else None


def _with_cause(err, cause):
    """err, a NotHeld of a lost hold, with the stable code of its cause (err.cause)."""
    if isinstance(err, NotHeld) and err.cause is None and cause:
        err.cause = _cause_code(cause)
    return err


# ----- outcomes from the library ------------------------------------------------------------------
# The library gets small integer tags, never Python objects; these dicts map the tags back.

_ids = itertools.count(1)
# id -> _LostSlot (or a LockGroup acquire's _GroupSlot), from acquire until release has returned
_lost_slots: "Dict[int, Union[_LostSlot, _GroupSlot]]" = {}
# id -> callable(status, handle, message), for async completions
_pending: Dict[int, Callable[[int, Any, Any], None]] = {}


class _LostSlot:
    """One hold's callbacks, under one tag: on_lost (callback) and on_release_requested
    (on_release); either may be None."""
    __slots__ = ("id", "callback", "on_release", "lock_ref", "fired_early", "early_requests", "mu")

    def __init__(self, callback, on_release=None):
        self.id = next(_ids)
        self.callback = callback
        self.on_release = on_release
        self.lock_ref = None
        self.fired_early = False
        self.early_requests: List[str] = []  # release requests heard before attach
        self.mu = threading.Lock()
        _lost_slots[self.id] = self

    def attach(self, lock):
        """Called once the Lock object exists; runs the callbacks that came before it did."""
        with self.mu:
            self.lock_ref = weakref.ref(lock)
            early = self.fired_early
            requests, self.early_requests = self.early_requests, []
        for reason in requests:
            self.run_release(lock, reason)
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

    def fire_release(self, reason):
        with self.mu:
            if self.lock_ref is None:
                self.early_requests.append(reason)
                return
            lock = self.lock_ref()
        if lock is not None:
            self.run_release(lock, reason)

    def run(self, lock):
        if self.callback is None:
            return
        try:
            self.callback(lock)
        except BaseException:
            _report_callback_exception("on_lost callback")

    def run_release(self, lock, reason):
        # Only while the Lock still holds this hold (a release under way has taken it out).
        if self.on_release is None or lock._slot is not self:
            return
        try:
            self.on_release(lock, reason)
        except BaseException:
            _report_callback_exception("on_release_requested callback")

    def drop(self):
        _lost_slots.pop(self.id, None)


class _MemberSlot(_LostSlot):
    """The on_lost slot of one Lock of a LockGroup. The library has one tag for the group (one
    dlock_options serves every name of a dlock_acquire_many); its _GroupSlot hands each loss to
    the member it names. Registered under an id of its own too, which C never sees."""
    __slots__ = ("group", "dropped")

    def __init__(self, callback, group):
        super().__init__(callback)
        self.group = group
        self.dropped = False

    def drop(self):
        with self.mu:
            if self.dropped:
                return
            self.dropped = True
        super().drop()
        self.group.member_dropped()


class _GroupSlot:
    """One LockGroup acquire's on_lost tag: a loss reported under it goes to the member whose
    name the entry's message names ("lock 'NAME' (fencing token N) was lost..."; the names of
    one group are distinct). Gone from _lost_slots once every member's slot is dropped."""
    __slots__ = ("id", "members", "left", "mu")

    def __init__(self, callback, bnames):
        self.id = next(_ids)
        self.members = [(bname, _MemberSlot(callback, self)) for bname in bnames]
        self.left = len(bnames)
        self.mu = threading.Lock()
        _lost_slots[self.id] = self

    def fire(self, message=None):
        found = None
        if message:
            for bname, member in self.members:
                if (message.startswith(b"lock '" + bname + b"' (fencing token ")
                        and (found is None or len(bname) > len(found[0]))):
                    found = (bname, member)
        if found is not None:
            targets = [found[1]]
        else:  # no name to go by: every member whose hold is no longer valid
            targets = []
            for _, member in self.members:
                lock = member.lock_ref() if member.lock_ref is not None else None
                if lock is not None and not lock.valid:
                    targets.append(member)
        for member in targets:
            if not member.dropped:
                member.fire()

    def member_dropped(self):
        with self.mu:
            self.left -= 1
            done = self.left == 0
        if done:
            _lost_slots.pop(self.id, None)

    def drop(self):
        for _, member in self.members:
            member.drop()


def _on_lost(arg, message=None):
    """A lost lock's report under tag arg; message (bytes): the entry's, naming the lock."""
    slot = _lost_slots.get(arg)
    if slot is not None:  # else released meanwhile
        if isinstance(slot, _GroupSlot):
            slot.fire(message)
        else:
            slot.fire()


def _on_release_requested(arg, reason):
    slot = _lost_slots.get(arg)
    if slot is not None:  # else released meanwhile
        slot.fire_release(reason)


def _on_async_done(status, arg, handle, message, queue):
    entry = _pending.pop(arg, None)
    if entry is None:  # nobody waits any more: give back what we were handed
        if handle:
            _c.dlock_release_queued(handle, queue, 0)
        return
    try:
        entry(status, handle, message)
    except BaseException:
        _report_callback_exception("async completion")


# ----- the completion queue --------------------------------------------------------------------
# One dlock_queue per process. The library appends outcomes (async calls, lost locks) and makes
# its fd readable; the "dlock-events" daemon thread drains it and runs the Python side. So the
# library's thread never takes the GIL, and a slow on_lost holds up no heartbeat.
#
# Both are made on first use (_events()), and again in a child made by fork: fork copies the
# parent's queue but not its thread, so the child would wait forever for outcomes that the
# parent's thread (in another process) drains, or nobody does. The child drops the parent's
# pending state and makes its own queue, thread and wake-up pipe when it first needs them
# (_after_fork_in_child, and a pid check for forks that bypass os.fork).
_QUEUE_DONE = 1
_QUEUE_LOST = 2
_QUEUE_LEADER = 3  # an observer's report (dlock_observe_queued)
_QUEUE_RELEASE_REQUESTED = 5  # a release request for a hold (its message is the reason)


class _Events:
    """One process's completion queue, the dlock-events thread that drains it, and the pipe
    that wakes that thread for _orphans."""

    __slots__ = ("pid", "queue", "wake_r", "wake_w")

    def __init__(self):
        q = _lib.c_queue_p()
        status = _c.dlock_queue_new(ctypes.byref(q))
        if status != 0:
            raise OSError(f"dlock: cannot create the completion queue: {_c.dlock_last_error().decode()}")
        self.pid = os.getpid()
        self.queue = q
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        threading.Thread(target=_drain_forever, args=(self,), name="dlock-events",
                         daemon=True).start()

    def wake(self):
        try:
            os.write(self.wake_w, b"\0")
        except BlockingIOError:  # the pipe is full: a wake-up is pending anyway
            pass


_events_now = None             # this process's _Events, once made
_events_mu = threading.Lock()


def _events():
    """This process's _Events, made on first use (and again after a fork)."""
    global _events_now
    ev = _events_now
    if ev is not None and ev.pid == os.getpid():
        return ev
    with _events_mu:
        if _events_now is not None and _events_now.pid != os.getpid():
            _forget_parent()  # forked by other means than os.fork (no at-fork hook ran)
        if _events_now is None:
            _events_now = _Events()
        return _events_now


def _queue_now():
    """This process's dlock_queue."""
    return _events().queue


def _forget_parent():
    """In a forked child: drop what belongs to the parent. Its queue is left alone (not freed:
    the parent's threads, which are not here, may have held its mutex at the fork), its
    pending calls and on_lost slots were the parent's, and its orphans are the parent's holds."""
    global _events_now
    ev, _events_now = _events_now, None
    _pending.clear()
    _lost_slots.clear()
    _orphans.clear()
    _observers.clear()     # the parent's observers: their reports go to the parent
    _ops.clear()
    _loop_clients.clear()  # the parent's loop clients: never driven or closed here
    if ev is not None:
        for fd in (ev.wake_r, ev.wake_w):  # the parent's wake-up pipe: keep none of its bytes
            try:
                os.close(fd)
            except OSError:
                pass


def _after_fork_in_child():
    global _events_mu
    _events_mu = threading.Lock()  # another thread may have held it at the fork
    _forget_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _running_loop():
    """The event loop running on this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _give_back(h, slot, queue=None):
    """Releases a lock handle nobody wants, without waiting or raising; its on_lost slot goes
    once the release is done (so on_lost is neither running nor going to run)."""
    op_id = next(_ids)
    _pending[op_id] = lambda status, handle, message: slot and slot.drop()
    if _c.dlock_release_queued(h, queue if queue is not None else _queue_now(), op_id) != 0:
        _pending.pop(op_id, None)
        if slot is not None:
            slot.drop()


# Locks garbage collected while held, as (handle, on_lost slot): Lock.__del__ leaves them here
# for the dlock-events thread to release. A finalizer runs on whatever thread the collector
# interrupts, possibly between a failed dlock call and its dlock_last_error() read; a dlock call
# made there would overwrite that thread's message.
_orphans: "Deque[Tuple[Any, Optional[_LostSlot]]]" = collections.deque()


def _drain_forever(ev):
    queue = ev.queue
    fd = _c.dlock_queue_fd(queue)
    wake_r = ev.wake_r
    tag = ctypes.c_uint64()
    status = _lib.c_status()
    handle = _lib.c_lock_p()
    info = _lib.c_info_p()
    pop = _c.dlock_queue_pop_leader
    while True:
        readable, _, _ = select.select([fd, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            while _orphans:
                _give_back(*_orphans.popleft(), queue)
        while True:
            kind = pop(queue, ctypes.byref(tag), ctypes.byref(status), ctypes.byref(handle),
                       ctypes.byref(info))
            if kind <= 0:
                break
            if kind == _QUEUE_DONE:
                message = _c.dlock_last_error().decode("utf-8", "replace") if status.value else None
                _on_async_done(status.value, tag.value, handle.value, message, queue)
            elif kind == _QUEUE_LOST:
                # the message names the lock: one tag may serve a LockGroup's names
                _on_lost(tag.value, _c.dlock_last_error())
            elif kind == _QUEUE_LEADER:
                _on_leader(tag.value, info.value)
            elif kind == _QUEUE_RELEASE_REQUESTED:
                # the reason is the entry's message: dlock_last_error() right after the pop
                reason = _c.dlock_last_error().decode("utf-8", "replace")
                _on_release_requested(tag.value, reason)


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


# ----- asyncio: a client driven by the event loop itself -------------------------------------
# The async API runs on a client opened with dlock_client_open_hooks on the running event loop,
# one per (Client, loop), made on first use: dlock asks the loop, through the three hooks below,
# to watch its fds (loop.add_reader / add_writer) and to arm one timer (call_later), and the loop
# calls back dlock_loop_fd_ready / dlock_loop_timer_fired. Every completion (done) and loss report
# (on_lost) then runs on the loop's thread, inside those calls: a future is settled right there,
# with no thread hop and no thread of dlock's own. The hooks and callbacks are module-level
# ctypes callback objects (kept for the process's life); C gets small integer ids, never Python objects;
# and none of them lets an exception reach C (_report_callback_exception).

_READ, _WRITE = 1, 2            # DLOCK_LOOP_READ, DLOCK_LOOP_WRITE
_loop_clients: "Dict[int, _LoopClient]" = {}  # loop_ctx id -> _LoopClient, until its cleanup hook
_ops: Dict[int, Callable[[int, Any, Any], None]] = {}  # async op id -> completed(status, h, msg)


class _LoopClient:
    """One Client's dlock client on one asyncio event loop (dlock_client_open_hooks), opened
    on the loop's thread while it runs. Closed by Client.close / aclose, or when the loop shuts
    down (asyncio.run's end: loop.shutdown_asyncgens), which releases the locks it still holds:
    nothing would heartbeat them once the loop is gone."""

    __slots__ = ("id", "pid", "loop", "thread", "h", "ptr", "fds", "timer", "closed", "cleaned",
                 "watch", "observers", "totals")

    def __init__(self, burl, loop, totals, event_id=None):
        self.id = next(_ids)
        self.totals: _MetricsTotals = totals  # its Client's: what it counted goes there at close
        self.pid = os.getpid()
        self.loop = loop
        self.thread = threading.get_ident()
        self.h = None
        self.ptr = None          # the dlock_loop *, as the hooks name it
        self.fds: Dict[int, int] = {}  # fd -> what the loop watches it for
        self.timer: Optional[asyncio.Handle] = None
        self.closed = False
        self.cleaned = False     # the cleanup hook ran: nothing of it is left on the loop
        self.watch = None
        self.observers: "Dict[int, _ObserveSlot]" = {}  # its AsyncObservers' slots
        _loop_clients[self.id] = self
        out = ctypes.c_void_p()
        status = _c.dlock_client_open_hooks(burl, ctypes.byref(_HOOKS), self.id, ctypes.byref(out))
        if status != 0:
            err = _error(status)
            self.closed = True
            self._forget()  # a failed open unwatched what it asked for, and calls no cleanup
            raise err
        self.h = out.value
        if event_id is not None:  # its Client has event handlers: before any lock of it
            _hook_events(_c.on_loop, self.h, event_id)
        # asyncio.run's end (and IsolatedAsyncioTestCase's) calls loop.shutdown_asyncgens()
        # while the loop still runs: that closes this client there, and lets its teardown finish.
        self.watch = _until_shutdown(self)
        try:
            self.watch.asend(None).send(None)  # registers it with the loop (firstiter hook)
        except StopIteration:
            pass

    # -- the hooks' work, on the loop's thread

    def watch_fd(self, fd, events):
        loop, had = self.loop, self.fds.get(fd, 0)
        if events & _READ and not had & _READ:
            loop.add_reader(fd, self.ready, fd, _READ)
        elif had & _READ and not events & _READ:
            loop.remove_reader(fd)
        if events & _WRITE and not had & _WRITE:
            loop.add_writer(fd, self.ready, fd, _WRITE)
        elif had & _WRITE and not events & _WRITE:
            loop.remove_writer(fd)
        if events & (_READ | _WRITE):
            self.fds[fd] = events & (_READ | _WRITE)
        else:
            self.fds.pop(fd, None)

    def set_timer(self, ms):
        t, self.timer = self.timer, None
        if t is not None:
            t.cancel()
        if ms >= 0:  # 0: the loop's next turn (never from inside the hook)
            self.timer = (self.loop.call_later(ms / 1000, self.fire) if ms
                          else self.loop.call_soon(self.fire))

    def ready(self, fd, events):
        if self.ptr is not None and self.pid == os.getpid():
            _c.on_loop.dlock_loop_fd_ready(self.ptr, fd, events)

    def fire(self):
        self.timer = None
        if self.ptr is not None and self.pid == os.getpid():
            _c.on_loop.dlock_loop_timer_fired(self.ptr)

    def _forget(self):
        """The cleanup hook (or a failed open): let go of the loop."""
        _loop_clients.pop(self.id, None)
        self.ptr = None
        self.cleaned = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for fd in list(self.fds):
            try:
                self.watch_fd(fd, 0)
            except Exception:  # the loop is closed: nothing to remove
                self.fds.pop(fd, None)
        w, self.watch = self.watch, None
        if w is not None:  # done with: finish it now, not when it is collected
            try:
                w.aclose().send(None)
            except (StopIteration, RuntimeError):  # RuntimeError: we are inside it
                pass

    # -- closing

    def close(self):
        """dlock_client_close, on the loop's thread. Pending acquires end with Cancelled, held
        locks are released; the teardown may finish on the loop's next turns (cleanup)."""
        if self.closed:
            return
        self.closed = True
        observers, self.observers = list(self.observers.values()), {}
        for slot in observers:  # their iterations end
            slot.end(_c.on_loop)
        h = self._take_handle()
        if h:
            _c.dlock_client_close(h)

    def _take_handle(self):
        """Takes h out of this object (None in a forked child: the parent's), its counts kept
        in its Client's totals."""
        with self.totals.mu:
            h, self.h = self.h, None
            if not h or self.pid != os.getpid():
                return None
            self.totals.retire(h)
        return h

    async def aclose(self):
        """close(), then lets the loop turn until the cleanup hook has run (at most ~5 s)."""
        self.close()
        end = time.monotonic() + 5
        while not self.cleaned and self.pid == os.getpid() and time.monotonic() < end:
            await asyncio.sleep(0.002)

    def close_from_anywhere(self):
        """close() from any thread (Client.close)."""
        if self.closed:
            return
        loop = self.loop
        if self.pid != os.getpid():
            self.closed = True
            return
        if loop.is_closed():
            self._abandon()
            return
        if threading.get_ident() == self.thread:
            self.close()
            if not self.cleaned and not loop.is_running() and not loop.is_closed():
                try:  # the loop is idle on this thread: turn it until the teardown is done
                    asyncio.get_running_loop()
                except RuntimeError:
                    loop.run_until_complete(self.aclose())
            return
        if loop.is_closed():
            self._abandon()
            return
        done = threading.Event()

        def close_there():
            try:
                self.close()
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(close_there)
        except RuntimeError:  # closed meanwhile
            self._abandon()
            return
        if loop.is_running():
            done.wait(5)
        # else: it runs when the loop next turns

    def _abandon(self):
        """The loop closed with this client open (loop.close() with no shutdown_asyncgens):
        nothing can drive it any more. Its locks expire on the server."""
        self.closed = True
        self._take_handle()  # left open: nothing may run on it now
        observers, self.observers = list(self.observers.values()), {}
        for slot in observers:  # nothing can drive them, nor cancel them: left as they are
            slot.cancelled, slot.h = True, None
            _observers.pop(slot.id, None)
        warnings.warn("dlock: an asyncio event loop was closed with a dlock client open on it "
                      "(use asyncio.run, or loop.shutdown_asyncgens() before loop.close(), or "
                      "close the dlock.Client first): its locks are left to expire",
                      ResourceWarning)

    def blocking_ok(self):
        """Whether a blocking dlock call on this client can be answered now from this thread."""
        if self.closed or self.cleaned:
            return True  # answered at once (NotHeld)
        if threading.get_ident() == self.thread:
            return not self.loop.is_closed()
        return self.loop.is_running()


async def _until_shutdown(lc):
    try:
        yield
    finally:
        if not lc.cleaned:
            await lc.aclose()


def _hook_watch_fd(ctx, loop_ptr, fd, events, fd_data):
    try:
        lc = _loop_clients.get(ctx)
        if lc is not None:
            lc.ptr = loop_ptr
            lc.watch_fd(fd, events)
    except BaseException:
        _report_callback_exception("the asyncio watch_fd hook")


def _hook_set_timer(ctx, loop_ptr, ms):
    try:
        lc = _loop_clients.get(ctx)
        if lc is not None:
            lc.ptr = loop_ptr
            lc.set_timer(ms)
    except BaseException:
        _report_callback_exception("the asyncio set_timer hook")


def _hook_cleanup(ctx):
    try:
        lc = _loop_clients.get(ctx)
        if lc is not None:
            lc._forget()
    except BaseException:
        _report_callback_exception("the asyncio cleanup hook")


def _done_acquire(status, handle, arg):
    try:
        op = _ops.pop(arg, None)
        if op is None:  # nobody waits any more: give back what we were handed
            if handle:
                _c.dlock_release_async(handle, None, None)
            return
        message = _c.dlock_last_error().decode("utf-8", "replace") if status else None
        op(status, handle, message)
    except BaseException:
        _report_callback_exception("an async completion")


def _done(status, arg):
    try:
        op = _ops.pop(arg, None)
        if op is not None:
            message = _c.dlock_last_error().decode("utf-8", "replace") if status else None
            op(status, None, message)
    except BaseException:
        _report_callback_exception("an async completion")


def _done_info(status, info, arg):
    """dlock_inspect_async / dlock_leader_async's done, on the loop's thread: the op reads the
    snapshot (NULL unless status is 0), which is freed after it."""
    try:
        try:
            op = _ops.pop(arg, None)
            if op is not None:
                message = _c.on_loop.dlock_last_error().decode("utf-8", "replace") if status else None
                op(status, info, message)
        finally:
            if info:
                _c.on_loop.dlock_info_free(info)
    except BaseException:
        _report_callback_exception("an async completion")


def _lost(name, token, arg):
    try:
        _on_lost(arg)
    except BaseException:
        _report_callback_exception("on_lost callback")


def _release_requested(name, reason, arg):
    try:
        _on_release_requested(arg, (reason or b"").decode("utf-8", "replace"))
    except BaseException:
        _report_callback_exception("on_release_requested callback")


_WATCH_CB = _lib.WATCH_FD_FN(_hook_watch_fd)
_TIMER_CB = _lib.SET_TIMER_FN(_hook_set_timer)
_CLEANUP_CB = _lib.CLEANUP_FN(_hook_cleanup)
_HOOKS = _lib.LoopHooks(_WATCH_CB, _TIMER_CB, _CLEANUP_CB)
_ACQUIRE_CB = _lib.ACQUIRE_FN(_done_acquire)
_DONE_CB = _lib.DONE_FN(_done)
_INFO_CB = _lib.INFO_FN(_done_info)
_LOST_CB = _lib.LOST_FN(_lost)
_RELEASE_REQUESTED_CB = _lib.RELEASE_REQUESTED_FN(_release_requested)


def _give_back_hooked(h, slot):
    """_give_back for a lock of a _LoopClient, on its loop's thread."""
    op_id = next(_ids)
    _ops[op_id] = lambda status, handle, message: slot and slot.drop()
    if _c.on_loop.dlock_release_async(h, _DONE_CB, op_id) != 0:  # closed client: freed, no done
        _ops.pop(op_id, None)
        if slot is not None:
            slot.drop()


def _give_back_on(lc, h, slot):
    """Gives back a lock of lc from any thread, without waiting or raising."""
    if threading.get_ident() == lc.thread:
        _give_back_hooked(h, slot)
        return
    try:
        lc.loop.call_soon_threadsafe(_give_back_hooked, h, slot)
    except RuntimeError:  # the loop is closed: left to expire
        if slot is not None:
            slot.drop()


def _not_on_loop(lock, lc, what):
    return InvalidArgument(
        f"lock {lock.name!r} was acquired through asyncio, on an event loop that "
        f"{'is closed' if lc.loop.is_closed() else 'is not running now'}: {what} it with "
        "await on that loop, or from another thread while the loop runs")


# ----- observing a leadership ------------------------------------------------------------------
# The sync API's observers are queued (dlock_observe_queued): their reports come through the
# completion queue, tagged with the observer's id, and the dlock-events thread runs the user's
# callback (_on_leader), as it runs on_lost; the library's thread never waits for the GIL, and
# a slow callback holds up no heartbeat. An AsyncObserver's, on its loop's client, call
# _OBSERVE_CB (dlock_observe; one ctypes object, kept for the process's life) on the event
# loop's thread, inside a dlock call it made: the report goes straight into its queue.

_observers: "Dict[int, _ObserveSlot]" = {}  # id -> slot, from dlock_observe until cancel
_END = object()  # an AsyncObserver's queue: the observation ended (its client closed)


class _ObserveSlot:
    """One dlock_observer: its handle, and report(leader), run where the reports are wanted:
    on the dlock-events thread (the sync API's client), or on the event loop (lc, a
    _LoopClient). on_end() runs once if the client's close ends it."""

    __slots__ = ("id", "pid", "report", "on_end", "lc", "h", "cancelled", "running", "cond")

    def __init__(self, report, lc=None, on_end=None):
        self.id = next(_ids)
        self.pid = os.getpid()
        self.report = report
        self.on_end = on_end
        self.lc = lc
        self.h = None              # the dlock_observer *, once observing
        self.cancelled = False
        self.running = None        # the thread running report now, if any (its ident)
        self.cond = threading.Condition(threading.Lock())

    def run(self, leader):
        with self.cond:
            if self.cancelled:
                return
            self.running = threading.get_ident()
        try:
            self.report(leader)
        except BaseException:
            _report_callback_exception("observe callback")
        finally:
            with self.cond:
                self.running = None
                self.cond.notify_all()

    def cancel(self, lib=None):
        """Once it returns, report is neither running nor going to run (unless called from
        inside report, which then finishes). Idempotent; any thread; lib: _c.on_loop on an
        event loop's thread. A report still in the completion queue is dropped when it comes
        out (run() sees cancelled)."""
        with self.cond:
            self.cancelled = True
            h, self.h = self.h, None
        if h and self.pid == os.getpid():  # in a forked child the handle is the parent's
            (lib if lib is not None else _c).dlock_observer_cancel(h)  # no report after this
        _observers.pop(self.id, None)
        me = threading.get_ident()
        with self.cond:
            while self.running is not None and self.running != me:
                self.cond.wait()

    def end(self, lib=None):
        """The client closes: cancel, then tell whoever waits for reports."""
        was = self.cancelled
        self.cancel(lib)
        if not was and self.on_end is not None:
            try:
                self.on_end()
            except BaseException:
                _report_callback_exception("observe's end")


def _holder(lib, info, k):
    """Holder k of a dlock_info (lib: _c, or _c.on_loop to keep the GIL)."""
    size = ctypes.c_size_t()
    owner = lib.dlock_info_owner(info, k)
    left = lib.dlock_info_remaining_ms(info, k)
    token = lib.dlock_info_fencing_token(info, k)
    data = lib.dlock_info_value(info, k, ctypes.byref(size))
    value = ctypes.string_at(data, size.value) if data and size.value else b""
    return Holder(owner.decode("utf-8", "replace") if owner else None,
                  None if left < 0 else left, token or None, value)


def _on_leader(tag, info):
    """A DLOCK_QUEUE_LEADER entry, on the dlock-events thread: info (freed here) is the
    leader's snapshot, or None when nobody leads."""
    try:
        try:
            leader = _holder(_c, info, 0) if info and _c.dlock_info_holders(info) else None
        finally:
            if info:
                _c.dlock_info_free(info)
        slot = _observers.get(tag)
        if slot is not None:  # else cancelled meanwhile: a report left in the queue
            slot.run(leader)
    except BaseException:
        _report_callback_exception("an observe report")


def _observed(name, info, arg):
    """_OBSERVE_CB: a report of an AsyncObserver's, on its event loop's thread (inside
    dlock_loop_fd_ready or dlock_loop_timer_fired)."""
    try:
        slot = _observers.get(arg)
        if slot is None or slot.cancelled:
            return
        lib = _c.on_loop  # on the loop's thread, which holds the GIL: keep it
        slot.run(_holder(lib, info, 0) if info and lib.dlock_info_holders(info) else None)
    except BaseException:
        _report_callback_exception("an observe report")


_OBSERVE_CB = _lib.OBSERVE_FN(_observed)


# ----- inspection ------------------------------------------------------------------------------

# value came later: last, with a default, so Holder(owner, remaining_ms, fencing_token) still
# makes one.
class Holder(NamedTuple):
    owner: Optional[str]
    remaining_ms: Optional[int]
    fencing_token: Optional[int]
    value: bytes = b""


Holder.__doc__ = """One holder of a lock, as Client.inspect (or Client.leader) saw it.

owner          its label (acquire's owner=), or None when it set none
remaining_ms   its remaining lease as the server sees it, in ms; None for no expiry
fencing_token  the token of its acquisition (int); None when the backend does not know it;
               a leader's term
value          the value stored with its hold (value=, Lock.set_value), as bytes; b"" when
               it has none
"""
# permits, closed_ms and closed_by came later: last, with defaults, so LockInfo(kind, holders)
# still makes one.
class LockInfo(NamedTuple):
    kind: Union[str, int]  # an int only for a kind newer than this binding
    holders: List[Holder]
    permits: int = 0
    closed_ms: int = 0
    closed_by: str = ""


LockInfo.__doc__ = """Who holds a lock: Client.inspect's answer (and Client.break_lock's: who held it).

kind       "exclusive" or "shared": the kind of hold the holders have ("exclusive" when free and
           for a semaphore)
holders    a list of Holder; empty when nobody holds it (Client.break_lock: the holds it broke)
permits    the semaphore's number of permits while the name is one; 0 for a lock or a free name
closed_ms  while a broken lock's name stays closed (no holder, nobody may take it until the
           broken leases would have ended): how many ms more; 0 when it is not closed (a name
           with holders is never closed). From Client.break_lock, how long the break closed it
closed_by  what closed it: "broken" (Client.break_lock); "" when it is not closed
"""


def _lock_info(info, lib=None):
    """A dlock_info as a LockInfo (lib: _c, or _c.on_loop to keep the GIL)."""
    lib = lib if lib is not None else _c
    holders = [_holder(lib, info, k) for k in range(lib.dlock_info_holders(info))]
    kind = lib.dlock_info_kind(info)
    closed_ms, closed_by = 0, ""
    if hasattr(lib, "dlock_info_closed_ms"):  # a library from before dlock_break has neither
        closed_ms = max(0, int(lib.dlock_info_closed_ms(info)))
        closed_by = (lib.dlock_info_closed_by(info) or b"").decode("utf-8", "replace")
    return LockInfo(_KIND_NAMES.get(kind, kind), holders, int(lib.dlock_info_permits(info)),
                    closed_ms, closed_by)


# ----- metrics ---------------------------------------------------------------------------------
# One Client is one or more C clients: the blocking API's (Client._h) and one per event loop its
# async API ran on (_LoopClient). Each counts its own calls (dlock_client_metrics); a Client's
# metrics are their sum, plus what those already closed had counted (_MetricsTotals: an event
# loop's client closes when its loop shuts down), so that the counters of one Client never go
# down while it lives, not even after close().

class MetricSample(NamedTuple):
    name: str
    labels: Dict[str, str]
    value: float


MetricSample.__doc__ = """One sample of a MetricFamily.

name    the sample's own name: the family's, or for a histogram the family's with _bucket,
        _sum or _count
labels  its labels, e.g. {"kind": "exclusive", "outcome": "acquired"} ({} for none; a
        histogram's buckets have "le")
value   its value (float)
"""


class MetricFamily(NamedTuple):
    name: str
    type: str
    help: str
    samples: List[MetricSample]


MetricFamily.__doc__ = """One metric family of Client.metrics(), as the Prometheus text's HELP and
TYPE lines name it.

name     e.g. "dlock_acquires_total" (counters end in _total, times are in seconds)
type     "counter", "gauge" or "histogram"
help     what it counts
samples  its MetricSample list, in the text's order
"""


class Metrics:
    """Client.metrics(): a snapshot of the client's counters, gauges and histograms, the
    numbers of its Prometheus text (docs/metrics.md), with no metrics library needed.

        m = client.metrics()
        m.value("dlock_acquires_total", kind="exclusive", outcome="acquired")   # 3.0
        m.value("dlock_acquires_total", outcome="acquired")   # the sum over every kind
        m["dlock_hold_seconds"].type                          # "histogram"
        for family in m:                                      # MetricFamily, in order
            for sample in family.samples:                     # MetricSample(name, labels, value)
                ...

    families  the MetricFamily list (iterating a Metrics iterates it; len() counts it)
    """

    __slots__ = ("families",)

    def __init__(self, families: List[MetricFamily]) -> None:
        self.families = families

    def __iter__(self) -> Iterator[MetricFamily]:
        return iter(self.families)

    def __len__(self) -> int:
        return len(self.families)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.families)

    def __getitem__(self, name: str) -> MetricFamily:
        """The family called `name` (e.g. "dlock_acquires_total"); KeyError if none is."""
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(name)

    def value(self, name: str, /, **labels: str) -> float:
        """The value of the sample called `name` with these labels: e.g.
        value("dlock_acquires_total", kind="exclusive", outcome="acquired"). Labels left out
        are summed over (value("dlock_acquires_total", outcome="acquired") counts every kind);
        a histogram's samples are called with _bucket (le="0.005"), _sum or _count. KeyError
        when no sample has that name and those labels (a typo never reads as 0)."""
        total, found = 0.0, False
        for f in self.families:
            for s in f.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
                    found = True
        if not found:
            shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
            raise KeyError(f"no sample {name}{{{shown}}}" if labels else f"no sample {name}")
        return total

    def __repr__(self) -> str:
        return f"<dlock.Metrics {len(self.families)} families>"


# A snapshot of one C client: its families [(name, type, help)] and its samples
# [(family, name, labels as the text writes them, value)], in the library's order.
_Snapshot = Tuple[List[Tuple[str, str, str]], List[Tuple[str, str, str, float]]]


def _read_metrics(h: Any) -> _Snapshot:
    """dlock_client_metrics of the C client h (any thread: through _c, which releases the GIL)."""
    out = _lib.c_metrics_p()
    status = _c.dlock_client_metrics(h, ctypes.byref(out))
    if status != 0:
        raise _error(status)
    m = out.value
    families: List[Tuple[str, str, str]] = []
    samples: List[Tuple[str, str, str, float]] = []
    try:
        last = None
        for k in range(_c.dlock_metrics_count(m)):
            family = _c.dlock_metrics_family(m, k).decode()
            if family != last:
                families.append((family, _c.dlock_metrics_type(m, k).decode(),
                                 _c.dlock_metrics_help(m, k).decode()))
                last = family
            samples.append((family, _c.dlock_metrics_name(m, k).decode(),
                            _c.dlock_metrics_labels(m, k).decode(),
                            float(_c.dlock_metrics_value(m, k))))
    finally:
        _c.dlock_metrics_free(m)
    return families, samples


def _read_metrics_text(h: Any) -> str:
    """dlock_client_metrics_text of the C client h: the library's own text."""
    needed = ctypes.c_size_t()
    _check(_c.dlock_client_metrics_text(h, None, 0, ctypes.byref(needed)))
    for _ in range(8):  # the text may grow between the calls (a new label value): ask again
        size = needed.value + 256
        buf = ctypes.create_string_buffer(size)
        status = _c.dlock_client_metrics_text(h, buf, size, ctypes.byref(needed))
        if status == 0:
            return buf.value.decode()
        if status != InvalidArgument.status or needed.value < size:
            raise _error(status)
    raise _error(InvalidArgument.status, "dlock_client_metrics_text: the text kept growing")


class _MetricsTotals:
    """What a Client's closed C clients counted (their counters and histograms; a closed client
    holds no lock and waits for none, so its gauges add 0). mu is also held while the Client's
    metrics are read, and while a C client's handle is taken to be closed: a read sees each
    count once, either in a live client or here."""

    __slots__ = ("mu", "families", "values")

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.families: List[Tuple[str, str, str]] = []
        self.values: Dict[Tuple[str, str, str], float] = {}  # (family, name, labels) -> value

    def retire(self, h: Any) -> None:
        """Adds the counts of h, about to be closed (under mu). Never raises: a close goes on."""
        try:
            families, samples = _read_metrics(h)
        except Exception:
            return
        types = {name: typ for name, typ, _ in families}
        if not self.families:
            self.families = families
        for family, name, labels, value in samples:
            key = (family, name, labels)
            add = 0.0 if types.get(family) == "gauge" else value
            self.values[key] = self.values.get(key, 0.0) + add


def _merge(snapshots: List[_Snapshot], totals: _MetricsTotals):
    """The sum of the snapshots and the totals: (families, {family: [(name, labels, value)]})."""
    families: Dict[str, Tuple[str, str, str]] = {}
    values: Dict[Tuple[str, str, str], float] = {}
    for fams, samples in snapshots:
        for f in fams:
            families.setdefault(f[0], f)
        for family, name, labels, value in samples:
            key = (family, name, labels)
            values[key] = values.get(key, 0.0) + value
    for f in totals.families:
        families.setdefault(f[0], f)
    for key, value in totals.values.items():
        values[key] = values.get(key, 0.0) + value
    grouped: Dict[str, List[Tuple[str, str, float]]] = {name: [] for name in families}
    for (family, name, labels), value in values.items():
        grouped.setdefault(family, []).append((name, labels, value))
    return list(families.values()), grouped


_label_cache: Dict[str, Tuple[Tuple[str, str], ...]] = {}  # the library's few label strings
_LABEL_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(text: str) -> Dict[str, str]:
    """'kind="shared",outcome="acquired"' (the text's form, with its escapes) as a dict."""
    pairs = _label_cache.get(text)
    if pairs is None:
        parsed = []
        i, n = 0, len(text)
        while i < n:
            eq = text.index("=", i)
            key = text[i:eq].strip()
            i = eq + 2  # past ="
            chars = []
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                    chars.append(_LABEL_ESCAPES.get(text[i], "\\" + text[i]))
                else:
                    chars.append(text[i])
                i += 1
            parsed.append((key, "".join(chars)))
            i += 1  # past the closing quote
            if i < n and text[i] == ",":
                i += 1
        pairs = tuple(parsed)
        if len(_label_cache) < 4096:
            _label_cache[text] = pairs
    return dict(pairs)


def _number(v: float) -> str:
    """A value as the library writes it: integers without a fraction, the rest with the fewest
    %g digits that read back as the same double."""
    if math.isfinite(v) and v == int(v) and -9.0e15 < v < 9.0e15:
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    for digits in range(1, 18):
        text = "%.*g" % (digits, v)
        if float(text) == v:
            return text
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _render_text(families: List[Tuple[str, str, str]],
                 grouped: Dict[str, List[Tuple[str, str, float]]]) -> str:
    """The Prometheus text (0.0.4) of merged samples, written as the library writes its own."""
    out = []
    for name, typ, help_text in families:
        out.append(f"# HELP {name} {_escape_help(help_text)}\n")
        out.append(f"# TYPE {name} {typ}\n")
        for sample, labels, value in grouped.get(name, ()):
            out.append(f"{sample}{{{labels}}} {_number(value)}\n" if labels
                       else f"{sample} {_number(value)}\n")
    return "".join(out)


# ----- events ----------------------------------------------------------------------------------
# dlock_client_set_event_hook, once per C client: a Client's handlers (on_event) are told what
# happens to its locks on every C client it has (the blocking API's, one per event loop). The hook
# is set on a C client when its Client gets its first handler, or when the C client opens after
# that; C gets the Client's event id (a small integer), and _EVENT_CB (one ctypes object, kept for
# the process's life) looks its handlers up here. It runs where the library runs the hook: the
# calling thread for blocking calls, the event loop's for a loop's client, and the library's own
# thread for the blocking API's heartbeats, losses and queued calls (which takes the GIL there:
# the one thing that makes that thread wait for Python).

class Event(NamedTuple):
    type: str
    name: str
    attempts: int
    elapsed: float
    fencing_token: Optional[int]
    status: int
    code: Optional[str]
    detail: str
    cause: Optional[str]


Event.__doc__ = """What happened to one of a Client's locks (dlock_client_set_event_hook): what
Client.on_event handlers are given, as it happens.

type           "acquiring" (an acquire started), "acquired", "not_acquired" (the wait ran out,
               it was cancelled, or an error), "released" (a release answered),
               "renewal_failed" (a heartbeat's renewal failed; retried until the local
               deadline) or "lost" (the lock was found lost while held)
name           the lock's name (str: UTF-8, undecodable bytes replaced)
attempts       tries the acquire took (acquired, not_acquired); 0 for the others
elapsed        seconds (float): waited (acquired, not_acquired), held (released, lost), the
               failed renewal's round trip (renewal_failed); 0.0 for acquiring
fencing_token  the hold's token (acquired, released, renewal_failed, lost); None when none
status         the dlock_status number: 0 for OK, NotAcquired.status (1) when a wait ran out,
               NotHeld.status (2) for a lost lock or a release that found it gone, ...
code           its name as dlock.Error.code spells it ("DLOCK_NOT_ACQUIRED", ...); None for 0
detail         the error's message, or for "lost" the loss cause's text (lock.lost_cause:
               "deleted: ...", "taken_over: ...", "refused: ...", "expired: ...",
               "max_hold: ..." or "broken: ..."); "" when none
cause          "deleted", "taken_over", "refused", "expired", "max_hold" or "broken"
               (NotHeld.cause) for
               "lost", and for a "released" that found the lock lost; None otherwise
"""

_EventFn = Callable[[Event], object]
_R = TypeVar("_R")  # what a handler returns (ignored)
_event_handlers: Dict[int, Tuple[_EventFn, ...]] = {}  # a Client's event id -> its handlers
_event_type_names: Dict[int, str] = {}  # dlock_event_type -> its name (dlock_event_type_name)
_status_codes: Dict[int, str] = {}      # dlock_status -> dlock_status_str


def _read_event(lib, e) -> Event:
    """The dlock_event e as an Event (lib keeps the GIL: the hook holds it already)."""
    t = lib.dlock_event_type_of(e)
    type_name = _event_type_names.get(t)
    if type_name is None:
        type_name = _event_type_names[t] = lib.dlock_event_type_name(t).decode()
    status = int(lib.dlock_event_status(e))
    code = None
    if status:
        code = _status_codes.get(status)
        if code is None:
            code = _status_codes[status] = lib.dlock_status_str(status).decode()
    detail = (lib.dlock_event_detail(e) or b"").decode("utf-8", "replace")
    cause = None
    if type_name == "lost":
        cause = _cause_code(detail) or None
    elif status == NotHeld.status:
        found = _LOST_CAUSE.search(detail)  # "lock 'NAME' was lost: CAUSE: details"
        cause = found.group(1) if found else None
    return Event(type_name, (lib.dlock_event_lock_name(e) or b"").decode("utf-8", "replace"),
                 int(lib.dlock_event_attempts(e)), lib.dlock_event_elapsed_ms(e) / 1000,
                 int(lib.dlock_event_fencing_token(e)) or None, status, code, detail, cause)


def _event_hook(e, arg):
    """_EVENT_CB: one event of the C client whose Client has the event id arg."""
    try:
        handlers = _event_handlers.get(arg)
        if not handlers:
            return
        event = _read_event(_c.on_loop, e)  # during the call only: copied out here
    except BaseException:
        _report_callback_exception("the event hook")
        return
    for fn in handlers:
        try:
            fn(event)
        except BaseException:
            _report_callback_exception("an on_event handler")


_EVENT_CB = _lib.EVENT_FN(_event_hook)


def _hook_events(lib, h, event_id):
    """Sets the event hook of the C client h (once per C client) for the handlers of event_id."""
    lib.dlock_client_set_event_hook(h, _EVENT_CB, event_id)


# The library's own thread (the blocking API's client) must never call into an interpreter that
# is shutting down: at exit (atexit runs before finalization, with every thread still able to
# take the GIL), a Client with event handlers closes its C clients, unless a call of its is in
# progress on another thread (a daemon thread waiting to acquire: closing would wait for it).
_event_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_event_exit_registered = False


def _close_event_clients_at_exit():
    for client in list(_event_clients):
        try:
            client._close(at_exit=True)
        except Exception:  # noqa: BLE001 (exiting: nothing to tell)
            pass


class _Spec:
    """A Lock's checked options: everything each acquire passes to the library but the wait."""

    __slots__ = ("lease_ms", "heartbeat_ms", "retry_ms", "owner", "on_lost", "kind", "permits",
                 "take", "fair", "value", "max_hold_ms", "min_hold_ms", "lock_delay_ms",
                 "on_release_requested", "reentrant")

    def __init__(self, lease, heartbeat, retry, owner, on_lost, kind, permits, shared, fair,
                 lease_ms, heartbeat_ms, retry_ms, value=None, max_hold=None, max_hold_ms=None,
                 min_hold=None, min_hold_ms=None, lock_delay=None, lock_delay_ms=None,
                 on_release_requested=None, reentrant=None, take=None):
        """Checks every option (TypeError / InvalidArgument) before anything reaches C."""
        self.lease_ms = _duration("lease", lease, "lease_ms", lease_ms, _lease_bound)
        self.heartbeat_ms = _duration("heartbeat", heartbeat, "heartbeat_ms", heartbeat_ms,
                                      _heartbeat_bound)
        self.max_hold_ms = _duration("max_hold", max_hold, "max_hold_ms", max_hold_ms,
                                     _max_hold_bound)
        # 0 (none) is the default, which any library has; anything else needs the setter.
        if self.max_hold_ms and not hasattr(_c, "dlock_options_set_max_hold_ms"):
            raise InvalidArgument(f"max_hold: libdlock {version()} at {_library_path} has no "
                                  "max hold (dlock_options_set_max_hold_ms); install a newer one")
        self.min_hold_ms = _duration("min_hold", min_hold, "min_hold_ms", min_hold_ms,
                                     _min_hold_bound)
        if self.min_hold_ms and not hasattr(_c, "dlock_options_set_min_hold_ms"):
            raise InvalidArgument(f"min_hold: libdlock {version()} at {_library_path} has no "
                                  "min hold (dlock_options_set_min_hold_ms); install a newer one")
        self.lock_delay_ms = _duration("lock_delay", lock_delay, "lock_delay_ms", lock_delay_ms,
                                       _lock_delay_bound)
        if self.lock_delay_ms and not hasattr(_c, "dlock_options_set_lock_delay_ms"):
            raise InvalidArgument(f"lock_delay: libdlock {version()} at {_library_path} has no "
                                  "lock delay (dlock_options_set_lock_delay_ms); install a newer one")
        self.retry_ms = _retry_pair(retry, retry_ms)
        if owner is not None:
            if isinstance(owner, str):
                owner = owner.encode("utf-8")
            elif isinstance(owner, (bytes, bytearray)):
                owner = bytes(owner)
            else:
                raise TypeError(f"owner must be str or bytes, not {type(owner).__name__}")
            if b"\0" in owner:
                raise InvalidArgument("owner must not contain NUL bytes")
        self.owner = owner
        if reentrant is not None:
            if isinstance(reentrant, str):
                reentrant = reentrant.encode("utf-8")
            elif isinstance(reentrant, (bytes, bytearray)):
                reentrant = bytes(reentrant)
            else:
                raise TypeError(f"reentrant must be str or bytes (a context), not "
                                f"{type(reentrant).__name__}")
            if not reentrant:
                raise InvalidArgument("reentrant context is empty: name one (a task, a request "
                                      "id), or reentrant=None to turn reentrancy off")
            if b"\0" in reentrant:
                raise InvalidArgument("reentrant context must not contain NUL bytes")
            if not hasattr(_c, "dlock_options_set_reentrant"):
                raise InvalidArgument(f"reentrant: libdlock {version()} at {_library_path} has no "
                                      "reentrancy (dlock_options_set_reentrant); install a newer one")
        self.reentrant = reentrant
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        self.on_lost = on_lost
        if on_release_requested is not None:
            if not callable(on_release_requested):
                raise TypeError("on_release_requested must be callable, not "
                                f"{type(on_release_requested).__name__}")
            if not hasattr(_c, "dlock_options_set_on_release_requested"):
                raise InvalidArgument(f"on_release_requested: libdlock {version()} at "
                                      f"{_library_path} has no release requests "
                                      "(dlock_options_set_on_release_requested); install a newer one")
        self.on_release_requested = on_release_requested
        if kind is not None:
            if not isinstance(kind, str):
                raise TypeError(f"kind must be a str, not {type(kind).__name__}")
            if kind not in _KINDS:
                raise InvalidArgument(f"kind {kind!r} is none of {', '.join(map(repr, _KINDS))}")
        if permits is not None:
            permits = _ms_arg("permits", permits, "a count")
            if not 0 <= permits <= _U32_MAX:
                raise InvalidArgument(f"permits {permits} is out of range (0..{_U32_MAX}; 0 means off)")
        if take is not None:
            take = _ms_arg("take", take, "a count of permits")
            if not 1 <= take <= _U32_MAX:
                raise InvalidArgument(f"take {take} is out of range (1..{_U32_MAX} permits; "
                                      "1 is the default)")
            # 1 (the default) is what any library does; anything else needs the setter.
            if take != 1 and not hasattr(_c, "dlock_options_set_take"):
                raise InvalidArgument(f"take: libdlock {version()} at {_library_path} cannot "
                                      "take several permits at once (dlock_options_set_take); "
                                      "install a newer one")
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
        elif kind == "shared" and permits:
            # the library refuses it too, but only at acquire: lock() says so at once
            raise InvalidArgument(f"kind='shared' and permits={permits}: a name is shared or a "
                                  "semaphore, not both (drop kind, or permits=0)")
        self.kind, self.permits, self.take = kind, permits, take
        if fair is not None and not isinstance(fair, bool):
            raise TypeError(f"fair must be a bool, not {type(fair).__name__}")
        self.fair = fair
        self.value = None if value is None else _value_arg(value)

    def build(self, wait_ms, on_lost, hooked=False, on_release=None):
        """A dlock_options for one acquire, and its on_lost slot: (pointer or None, slot or None).
        on_lost is this acquire's callback (the spec's, or one that hands it to a loop), and
        on_release its on_release_requested callback (likewise; both go in one slot, under one
        tag). hooked: for a _LoopClient, whose callbacks are C callbacks on the loop's thread
        (not the queue)."""
        if (self.lease_ms is None and wait_ms == 0 and self.heartbeat_ms is None
                and self.max_hold_ms is None and self.min_hold_ms is None
                and self.lock_delay_ms is None and self.retry_ms is None and self.owner is None
                and on_lost is None and on_release is None
                and self.kind is None and self.permits is None and self.take is None
                and self.fair is None
                and self.value is None and self.reentrant is None):
            return None, None
        o = _c.dlock_options_new()
        if not o:
            raise MemoryError("dlock_options_new")
        try:
            if self.lease_ms is not None:
                _check(_c.dlock_options_set_lease_ms(o, self.lease_ms))
            if self.heartbeat_ms is not None:
                _check(_c.dlock_options_set_heartbeat_ms(o, self.heartbeat_ms))
            if self.max_hold_ms:  # 0 = none, the default: nothing to set
                _check(_c.dlock_options_set_max_hold_ms(o, self.max_hold_ms))
            if self.min_hold_ms:  # likewise
                _check(_c.dlock_options_set_min_hold_ms(o, self.min_hold_ms))
            if self.lock_delay_ms:  # likewise
                _check(_c.dlock_options_set_lock_delay_ms(o, self.lock_delay_ms))
            if wait_ms != 0:
                _check(_c.dlock_options_set_wait_ms(o, wait_ms))
            if self.retry_ms is not None:
                _check(_c.dlock_options_set_retry_ms(o, *self.retry_ms))
            if self.owner is not None:
                _check(_c.dlock_options_set_owner(o, self.owner))
            if self.reentrant is not None:
                _check(_c.dlock_options_set_reentrant(o, self.reentrant))
            if self.kind is not None:
                _check(_c.dlock_options_set_kind(o, _KINDS[self.kind]))
            if self.permits is not None:
                _check(_c.dlock_options_set_permits(o, self.permits))
            if self.take is not None and (self.take != 1 or hasattr(_c, "dlock_options_set_take")):
                _check(_c.dlock_options_set_take(o, self.take))
            if self.fair is not None:
                _check(_c.dlock_options_set_fair(o, 1 if self.fair else 0))
            if self.value is not None:
                _check(_c.dlock_options_set_value(o, self.value, len(self.value)))
            slot = None
            if on_lost is not None or on_release is not None:
                slot = _LostSlot(on_lost, on_release)
            try:
                if on_lost is not None:
                    if hooked:
                        _check(_c.dlock_options_set_on_lost(o, _LOST_CB, slot.id))
                    else:
                        _check(_c.dlock_options_set_on_lost_queued(o, _queue_now(), slot.id))
                if on_release is not None:
                    if hooked:
                        _check(_c.dlock_options_set_on_release_requested(
                            o, _RELEASE_REQUESTED_CB, slot.id))
                    else:
                        _check(_c.dlock_options_set_on_release_requested_queued(
                            o, _queue_now(), slot.id))
            except BaseException:
                if slot is not None:
                    slot.drop()
                raise
        except BaseException:
            _c.dlock_options_free(o)
            raise
        return o, slot


# ----- Client ----------------------------------------------------------------------------------

if TYPE_CHECKING:
    from typing import ParamSpec, TypeVar
    _Params = ParamSpec("_Params")
    _Result = TypeVar("_Result")

    def _options_of(model: Callable[_Params, Any]) -> Callable[[Callable[..., _Result]],
                                                               Callable[_Params, _Result]]:
        """For type checkers: the decorated method takes the parameters of `model`
        (Client.lock's, written once), and returns what it returns itself."""
else:
    def _options_of(model):
        return lambda method: method  # nothing at run time (ParamSpec is Python 3.10+)


class Client:
    """A connection to one backend, named by a URL (docs/urls.md):

        redis://[[user]:password@]host[:port][/db][?params]           one Redis server
        rediss://[[user]:password@]host[:port][/db][?params]          one Redis server over TLS
        redis+unix://[[user]:password@]/path/to.sock[?db=N&params]    one Redis server, unix socket
        redis-cluster://[[user]:password@]host:port[,host:port...][?params]
                                                                      a Redis Cluster (seed nodes)
        redis-sentinel://[[user]:password@]host:port[,...]/MASTER_NAME[?sentinel_password=P&db=N]
                                                  the master Sentinel names, through failovers
        redlock://[[user]:password@]host:port,host:port,host:port[,...][?params]
                                                  a quorum of N >= 3 independent Redis masters
        dynamodb://TABLE?region=R[&endpoint=URL][&partition_key=K][&sort_key=S]
                                                  one DynamoDB table
        etcd://host[:port][,host[:port]...][?params]
                                                  an etcd v3 cluster (JSON gateway; port 2379)
        postgres://[user[:password]@]host[:port][,...]/DATABASE[?table=T&unlogged=1&params]
                                                  a PostgreSQL database's lock table (port 5432)

    params: prefix= (default "dlock:"; not postgres://), connect_timeout_ms= (2000), timeout_ms= (3000), and
    TLS (tls=1, ca=, cert=, key=, sni=, tls_verify=0) where the scheme has it. Unknown
    parameters are an InvalidArgument.

    Opening connects and authenticates once (raises InvalidArgument, ConnectionError or
    AuthError). Thread-safe. close() (or leaving a `with` block) releases every lock it holds.
    A Client belongs to the process that opened it: in a child made by fork, using it (or its
    Locks) raises ForkedClient, and close() releases nothing of the parent's; open a new Client
    in the child.
    """

    def __init__(self, url: str) -> None:
        if not isinstance(url, str):
            raise TypeError(f"url must be str, not {type(url).__name__}")
        self._h = None
        self._pid = os.getpid()  # the process whose connections and thread these are
        self._mu = threading.Condition(threading.Lock())
        self._inflight = 0
        self._closed = False
        self._observers: "Dict[int, _ObserveSlot]" = {}  # the sync API's observers, until cancel
        self._totals = _MetricsTotals()  # what its closed C clients counted
        self._event_id: Optional[int] = None  # its key in _event_handlers, once it has handlers
        burl = url.encode("utf-8")
        if b"\0" in burl:
            raise InvalidArgument("url must not contain NUL bytes")
        self._url_redacted = _url_shown(burl)
        self._burl = burl
        # The async API's clients, one per event loop, driven by that loop (_LoopClient). The
        # sync API's client (its own libevent thread) is self._h, opened on first sync use when
        # this Client is made inside a running event loop, else here.
        self._loops: "Dict[Any, _LoopClient]" = {}
        loop = _running_loop()
        if loop is not None and _use_async_c:
            # connects now: errors show here
            self._loops[loop] = _LoopClient(burl, loop, self._totals)
        else:
            self._h = self._open_owned()

    def _open_owned(self):
        _events()  # this process's queue and dlock-events thread, before any lock needs them
        handle = ctypes.c_void_p()
        _check(_c.dlock_client_open(self._burl, ctypes.byref(handle)))
        if self._event_id is not None:  # (under self._mu, as on_event)
            _hook_events(_c, handle.value, self._event_id)
        return handle.value

    def _loop_client(self, loop) -> "_LoopClient":
        """This Client's _LoopClient on loop (the running one), opened on first use."""
        self._check_process()
        lc = self._loops.get(loop)
        if lc is not None and not lc.closed:
            return lc
        with self._mu:
            if self._closed:
                raise InvalidArgument(f"client {self._url_redacted} is closed")
            for other in [k for k, v in self._loops.items() if v.closed or k.is_closed()]:
                del self._loops[other]
            lc = self._loops.get(loop)
            if lc is None:
                lc = self._loops[loop] = _LoopClient(self._burl, loop, self._totals,
                                                     self._event_id)
            return lc

    # -- lifetime

    def close(self) -> None:
        """Releases every lock this client still holds, cancels its observers (waiting for a
        callback that runs), closes its connections and stops its thread. Waits for calls in
        progress on other threads. Idempotent. Locks still referenced stay safe to use: their
        release() then raises NotHeld. In a process forked from the one
        that opened it, only marks it closed: the connections, thread and locks are the
        parent's, which keeps them."""
        self._close()

    def _close(self, at_exit=False):
        """close(); at_exit: only if the blocking API's client is open, and not if a call is in
        progress (it would wait for it), for _close_event_clients_at_exit."""
        if self._forked():
            self._closed, self._h, self._loops, self._observers = True, None, {}, {}
            return
        with self._mu:
            if self._closed or (at_exit and (self._h is None or self._inflight)):
                return
            self._closed = True
            while self._inflight:
                self._mu.wait()
            with self._totals.mu:
                h, self._h = self._h, None
                if h:
                    self._totals.retire(h)
            loops, self._loops = list(self._loops.values()), {}
            observers, self._observers = list(self._observers.values()), {}
        for slot in observers:  # no observe callback runs once close returns
            slot.end()
        for lc in loops:  # each on its loop's thread (or by it)
            lc.close_from_anywhere()
        if h:
            _c.dlock_client_close(h)

    async def aclose(self) -> None:
        """close() without blocking the event loop: this loop's client closes here, on the loop
        (its pending acquires end with Cancelled, its locks are released); the others, and the
        sync API's client, in a worker thread."""
        loop = asyncio.get_running_loop()
        if self._forked():
            self.close()
            return
        lc = self._loops.get(loop)
        if lc is not None:
            lc.close()
        if self._h is None and all(v.closed for v in self._loops.values()):
            self.close()  # nothing left that could block
        else:
            await loop.run_in_executor(None, self.close)
        if lc is not None:
            await lc.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        try:
            if not self._closed and (self._h or self._loops):
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = " closed" if self._closed else " inherited across fork" if self._forked() else ""
        return f"<dlock.Client {self._url_redacted}{state}>"

    def _forked(self) -> bool:
        """True in a process forked from the one that opened this client."""
        return self._pid != os.getpid()

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            raise ForkedClient(
                f"dlock.Client {self._url_redacted} was opened in process {self._pid}, and this "
                f"is process {os.getpid()}, forked from it: the client's connections, thread and "
                "locks stay with that process. Open a new dlock.Client in this one (after the "
                "fork, e.g. in gunicorn's post_fork or Celery's worker_process_init)")

    def _enter(self):
        """The sync API's client (opened now if it is not yet), counted as in use."""
        self._check_process()
        with self._mu:
            if self._closed:  # the library's handle is gone: nothing to ask
                raise InvalidArgument(f"client {self._url_redacted} is closed")
            if self._h is None:
                self._h = self._open_owned()
            self._inflight += 1
            return self._h

    def _leave(self):
        with self._mu:
            self._inflight -= 1
            if self._inflight == 0 and self._closed:
                self._mu.notify_all()

    # -- inspection

    @property
    def capabilities(self) -> FrozenSet[str]:
        """What this client's backend offers, as a frozenset of names (dlock_client_capabilities):
        "fencing_strict" (tokens strictly increasing under every fault its docs list),
        "notifies" (waiters woken by releases), "shared" (kind="shared"), "permits", "fair"
        (waiters served in arrival order), "observe_push" (observers told of every change by
        the server, not by polling), "break" (break_lock), "min_hold" (min_hold=),
        "lock_delay" (lock_delay=), "release_request" (request_release and
        on_release_requested=)."""
        h = self._enter()
        try:
            bits = _c.dlock_client_capabilities(h)
        finally:
            self._leave()
        return frozenset(name for bit, name in _CAPABILITIES.items() if bits & bit)

    def inspect(self, name: _Name) -> LockInfo:
        """Who holds the lock called `name` now: a LockInfo(kind, holders, permits), holders being a
        list of Holder(owner, remaining_ms, fencing_token, value) (empty when free), permits the
        semaphore's size (0 for a lock or a free name). A snapshot read from the server in one
        call, stale as soon as it returns: never decide from it whether to take the lock. Owner
        tokens are never shown, only the owner labels (and the values stored with the holds)."""
        return self._read_info(_c.dlock_inspect, name)

    def _read_info(self, read, name):
        """dlock_inspect or dlock_leader: the LockInfo, or raises."""
        bname = _name_arg(name)
        out = _lib.c_info_p()
        h = self._enter()
        try:
            status = read(h, bname, ctypes.byref(out))
            err = _error(status) if status != 0 else None
        finally:
            self._leave()
        if err is not None:
            raise err
        try:
            return _lock_info(out)
        finally:
            _c.dlock_info_free(out)

    async def ainspect(self, name: _Name) -> LockInfo:
        """inspect() without blocking the event loop: read by this loop's own client
        (dlock_inspect_async), the answer on the loop's thread, no thread hop (with
        DLOCK_PY_FORCE_THREADS=1, inspect() in a worker thread)."""
        return await self._aread_info(name, leader=False)

    def break_lock(self, name: _Name, reason: Optional[str] = None, now: bool = False) -> LockInfo:
        """An operator's takeover (dlock_break_with; `break` is a keyword): deletes every hold
        of `name` (exclusive, shared or semaphore), never its fencing counter, so the next token
        is greater than every broken holder's. Each broken holder is reported lost with the
        cause "broken" (on_lost, valid False, lost_cause "broken: an operator broke the lock:
        REASON", NotHeld.cause "broken") at its next renewal, so within its heartbeat period;
        one without heartbeats at its next extend() or release().

        reason  the operator's words for the holders (str, at most MAX_REASON_BYTES, 1024,
                bytes as UTF-8); None or "" for none
        now     False (the default): the name stays closed, with no holder, until the broken
                leases would have ended on the server (broken holders keep working until they
                hear), so inspect() shows closed_ms > 0 and closed_by "broken"; waiters wait
                that out. True: free at once, for a resource that checks fencing tokens (a
                broken holder that has not heard yet is refused there)

        Returns a LockInfo of what it broke: its holders (owner label, fencing_token, what was
        left of each lease; empty when nobody held it) and closed_ms, how long the name now
        stays closed (0 with now=True). Blocks the calling thread, bounded as inspect() is (the
        URL's timeout_ms; Redlock asks every master at once). A backend without the "break" capability raises InvalidArgument and
        changes nothing, as does a library from before dlock_break."""
        _name_arg(name)  # a bad name is refused before a bad reason
        breason = _reason_arg(reason)
        if not isinstance(now, bool):
            raise TypeError(f"now must be a bool, not {type(now).__name__}")
        if not hasattr(_c, "dlock_break_with"):
            raise InvalidArgument(f"the libdlock loaded ({_library_path}) cannot break a lock "
                                  "(dlock_break_with); install a newer one")
        flags = _BREAK_NOW if now else 0
        return self._read_info(lambda h, n, out: _c.dlock_break_with(h, n, breason, flags, out), name)

    async def abreak_lock(self, name: _Name, reason: Optional[str] = None, now: bool = False) -> LockInfo:
        """break_lock() without blocking the event loop: the library has no asynchronous break,
        so it runs in the loop's default executor (a worker thread), as a blocking call."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.break_lock, name, reason, now))

    def request_release(self, name: _Name, reason: Optional[str] = None) -> bool:
        """Asks every current holder of `name` to let go, with `reason` (dlock_request_release):
        a cooperative takeover, short of break_lock. Nothing is taken: each holder whose lock
        was acquired with on_release_requested= hears it (its callback gets the reason) and may
        release, or ignore it; holders acquired without it hear nothing.

        reason  words for the holders (str, at most MAX_REASON_BYTES, bytes as UTF-8); None or
                "" for none

        Returns True when the name had holders to ask, False when nobody holds it (nothing is
        sent). True says the request went out, not that anyone heard it or will let go: on
        Redis a holder hears it once its subscription is live, one round trip after its
        acquire, and a request sent before then is missed (ask again). Blocks the calling
        thread, bounded as inspect() is. A backend without the "release_request" capability
        raises InvalidArgument, as does a library from before dlock_request_release."""
        bname = _name_arg(name)  # a bad name is refused before a bad reason
        breason = _reason_arg(reason)
        if not hasattr(_c, "dlock_request_release"):
            raise InvalidArgument(f"the libdlock loaded ({_library_path}) cannot ask a holder to "
                                  "let go (dlock_request_release); install a newer one")
        h = self._enter()
        try:
            status = _c.dlock_request_release(h, bname, breason)
            err = _error(status) if status not in (0, NotHeld.status) else None
        finally:
            self._leave()
        if err is not None:
            raise err
        return status == 0

    async def arequest_release(self, name: _Name, reason: Optional[str] = None) -> bool:
        """request_release() without blocking the event loop: the library has no asynchronous
        form, so it runs in the loop's default executor (a worker thread), as abreak_lock()."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.request_release, name, reason))

    async def _aread_info(self, name, leader):
        """ainspect / aleader's LockInfo."""
        loop = asyncio.get_running_loop()
        if not _use_async_c:
            read = _c.dlock_leader if leader else _c.dlock_inspect
            return await loop.run_in_executor(None, functools.partial(self._read_info, read, name))
        bname = _name_arg(name)
        lc = self._loop_client(loop)
        fut = loop.create_future()
        op_id = next(_ids)

        def completed(status, info, message):  # on the loop's thread
            if fut.done():
                return
            if status != 0:
                fut.set_exception(_error(status, message))
            else:
                fut.set_result(_lock_info(info, _c.on_loop))

        _ops[op_id] = completed
        read = _c.on_loop.dlock_leader_async if leader else _c.on_loop.dlock_inspect_async
        status = read(lc.h, bname, _INFO_CB, op_id)
        if status != 0:  # argument errors, a closed client: nothing started
            _ops.pop(op_id, None)
            raise _error(status)
        return await fut

    # -- metrics

    def _loops_now(self):
        """Its _LoopClients (self._mu: taken before, never under, self._totals.mu)."""
        with self._mu:
            return list(self._loops.values())

    def _metrics_sources(self, loops):
        """Under self._totals.mu: the C clients whose counts make this Client's, now (a C client
        closing takes its handle out under that lock, its counts put in self._totals)."""
        handles = [self._h] if self._h else []
        return handles + [lc.h for lc in loops if lc.h and lc.pid == self._pid]

    def metrics(self) -> Metrics:
        """What this client counted since it opened (docs/metrics.md): a Metrics of
        MetricFamily(name, type, help, samples), the numbers of metrics_text(), with no metrics
        library. metrics().value("dlock_acquires_total", kind="exclusive", outcome="acquired")
        reads one. The counts of every call through this Client, the asyncio calls' (made on
        each event loop's own client) included; after close(), the final counts. Counters never
        go down while the Client lives. Any thread, and on an event loop (no round trip: a few
        microseconds per C client)."""
        self._check_process()
        loops = self._loops_now()
        with self._totals.mu:
            snapshots = [_read_metrics(h) for h in self._metrics_sources(loops)]
            families, grouped = _merge(snapshots, self._totals)
        return Metrics([MetricFamily(name, typ, help_text,
                                     [MetricSample(sample, _parse_labels(labels), value)
                                      for sample, labels, value in grouped.get(name, ())])
                        for name, typ, help_text in families])

    def metrics_text(self) -> str:
        """metrics() in the Prometheus text exposition format (0.0.4), as a scrape handler
        serves it (Content-Type: text/plain; version=0.0.4): HELP and TYPE lines, then the
        samples, e.g. dlock_acquires_total{kind="exclusive",outcome="acquired"} 3. The library's
        own text (dlock_client_metrics_text) while one C client counts; the same format, summed,
        when asyncio calls made others. Any thread."""
        self._check_process()
        loops = self._loops_now()
        with self._totals.mu:
            handles = self._metrics_sources(loops)
            if len(handles) == 1 and not self._totals.families:
                return _read_metrics_text(handles[0])
            families, grouped = _merge([_read_metrics(h) for h in handles], self._totals)
        return _render_text(families, grouped)

    # -- events

    def on_event(self, fn: Callable[[Event], _R]) -> Callable[[Event], _R]:
        """Calls fn(event) with what happens to this client's locks as it happens, for logs and
        traces: an Event(type, name, attempts, elapsed, fencing_token, status, code, detail,
        cause), type being "acquiring", "acquired", "not_acquired", "released",
        "renewal_failed" or "lost" (dlock_client_set_event_hook; docs/metrics.md "Events").
        Every call through this Client is reported, the asyncio ones (each event loop's own C
        client) included, from now on. Returns fn, so it also decorates (@client.on_event).
        Several handlers run in the order added; off_event(fn) removes one.
        dlock.log_events(client) is a handler that logs through the logging module.

        fn runs where the library does the work, inside it, so that a slow fn delays locks:
          - blocking calls (acquire, release, `with lock:`, extend, set_value, campaign): the
            calling thread, before the call returns;
          - asyncio calls, and the heartbeats and losses of locks acquired with them: the event
            loop's thread, inside its I/O callbacks (it holds up that loop);
          - the heartbeats and losses of locks acquired with the blocking API, and asyncio calls
            on such locks (arelease, aextend, aset_value): the library's own thread (one that
            Python did not start: threading.current_thread() is a dummy), which takes the GIL
            for it and holds up every heartbeat of this client meanwhile;
          - with DLOCK_PY_FORCE_THREADS=1, the worker threads that run the asyncio calls.
        So fn must not block: hand slow work to a queue (logging's QueueHandler, say). It gets
        a copy of the event, and must not call dlock itself (no Client or Lock method: the
        library is inside a call of its own). Exceptions it raises are printed and ignored, like
        on_lost's. A Client with handlers is closed at interpreter exit (atexit), unless a call
        of its is in progress on another thread: the library's thread must not call into an
        interpreter that is shutting down. Any thread; ForkedClient in a forked child."""
        global _event_exit_registered
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        self._check_process()
        with self._mu:
            if self._event_id is None:
                event_id = next(_ids)
                _event_handlers[event_id] = ()
                weakref.finalize(self, _event_handlers.pop, event_id, None).atexit = False
                self._event_id = event_id
                # the C clients it has now; those it opens later are hooked as they open
                with self._totals.mu:  # a loop's client takes its handle out under it to close
                    if self._h:
                        _hook_events(_c, self._h, event_id)
                    for lc in self._loops.values():
                        if lc.h and lc.pid == self._pid:
                            _hook_events(_c, lc.h, event_id)
                if not self._closed:
                    _event_clients.add(self)
                    if not _event_exit_registered:
                        _event_exit_registered = True
                        atexit.register(_close_event_clients_at_exit)
            _event_handlers[self._event_id] += (fn,)
        return fn

    def off_event(self, fn: Callable[[Event], object]) -> None:
        """Removes fn, added by on_event (the first one equal to it, if added more than once;
        nothing if it is not there). Once this returns, fn is not called again, but for a call
        under way on another thread."""
        with self._mu:
            event_id = self._event_id
            if event_id is None:
                return
            handlers = list(_event_handlers.get(event_id, ()))
            if fn in handlers:
                handlers.remove(fn)
                _event_handlers[event_id] = tuple(handlers)

    # -- leader election

    def leader(self, name: _Name) -> Optional[Holder]:
        """The current leader of the election `name` (see campaign): its Holder(owner,
        remaining_ms, fencing_token, value), whose fencing_token is its term and value what it
        proclaims; None when nobody leads. One round trip, a snapshot like inspect().
        InvalidArgument when the name is held shared or is a semaphore (not an election)."""
        holders = self._read_info(_c.dlock_leader, name).holders
        return holders[0] if holders else None

    async def aleader(self, name: _Name) -> Optional[Holder]:
        """leader() without blocking the event loop, on this loop's own client
        (dlock_leader_async), as ainspect()."""
        holders = (await self._aread_info(name, leader=True)).holders
        return holders[0] if holders else None

    def observe(self, name: _Name, callback: Callable[[Optional[Holder]], object]) -> "Observer":
        """Calls callback(leader) with who leads the election `name` (dlock_observe): first as it
        stands, then at each change of leader or of the leader's value, leader being a Holder
        (its value, owner, term as fencing_token, lease left) or None when nobody leads. Never
        an older state after a newer one, and terms never decrease; states that come and go
        faster than the observer reads may merge into the latest. A release or hand-over is
        seen at once where the backend has the "notifies" capability, and so is a new value on
        Redis; other changes (a new leader after an expiry, a new value elsewhere) within the
        poll interval, 500 ms, plus one read.

        The callback runs on the "dlock-events" thread, as on_lost does, one report after the
        other and never inside observe(): keep it short (other callbacks wait for it; the
        client's heartbeats do not). Exceptions it raises are printed and ignored. It may call
        the client (leader(), campaign()...) and cancel its own Observer. Returns the Observer:
        observer.cancel() (or leaving `with client.observe(...):`) stops it, and once that
        returns the callback is neither running nor going to run; close() stops every one of
        this client's. Dropping the Observer does not stop it. InvalidArgument for a bad name
        or a closed client."""
        bname = _name_arg(name)
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        slot = _ObserveSlot(callback)
        self._observe_owned(bname, slot)
        return Observer(self, name, slot)

    def _observe_owned(self, bname, slot):
        """dlock_observe on the sync API's client, its reports to slot; or raises."""
        self._check_process()
        out = _lib.c_observer_p()
        _observers[slot.id] = slot  # before: the first report may come right after
        err = None
        try:
            h = self._enter()
            try:
                status = _c.dlock_observe_queued(h, bname, _queue_now(), slot.id,
                                                 ctypes.byref(out))
                if status != 0:
                    err = _error(status)
                else:
                    slot.h = out.value
                    with self._mu:  # for close, which waits for _leave
                        self._observers[slot.id] = slot
            finally:
                self._leave()
        except BaseException:
            _observers.pop(slot.id, None)
            raise
        if err is not None:
            _observers.pop(slot.id, None)
            raise err

    def aobserve(self, name: _Name) -> "AsyncObserver":
        """observe() for asyncio: `async for leader in client.aobserve(name):` gets who leads
        `name` (a Holder, or None when nobody leads), first as it stands, then at each change,
        on the event loop. The observation starts at the first iteration, on this loop's own
        client (no thread hop; with DLOCK_PY_FORCE_THREADS=1, the sync API's client, whose
        reports hop to the loop with call_soon_threadsafe), and stops when the iteration does:
        break (which drops the iterator: CPython finalizes it at once; `async with` makes it
        certain), an exception, the task cancelled (its CancelledError cancels the
        observation), aclose() or cancel(), or leaving `async with client.aobserve(name) as
        leaders:`. The iteration ends (StopAsyncIteration) when the client closes or the loop
        shuts down. A bad name raises InvalidArgument here (NUL) or at the first iteration."""
        return AsyncObserver(self, name)

    def _candidate(self, name: _Name, value: Optional[_Value], lease: Optional[_Seconds],
                   heartbeat: Optional[_Seconds], retry: Optional[Sequence[_Seconds]],
                   owner: Union[str, bytes, None], on_lost: Optional[_OnLost],
                   fair: Optional[bool], lease_ms: Optional[int], heartbeat_ms: Optional[int],
                   retry_ms: Optional[Sequence[int]], max_hold: Optional[_Seconds],
                   max_hold_ms: Optional[int], min_hold: Optional[_Seconds],
                   min_hold_ms: Optional[int], lock_delay: Optional[_Seconds],
                   lock_delay_ms: Optional[int],
                   on_release_requested: Optional[_OnReleaseRequested] = None,
                   reentrant: Union[str, bytes, None] = None) -> "Lock":
        """The Lock a campaign acquires: exclusive, waiting without limit."""
        return self._lock(name, _Spec(lease, heartbeat, retry, owner, on_lost, None, None, None,
                                      fair, lease_ms, heartbeat_ms, retry_ms, value, max_hold,
                                      max_hold_ms, min_hold, min_hold_ms, lock_delay,
                                      lock_delay_ms, on_release_requested, reentrant), -1, False)

    def campaign(self, name: _Name, *, value: Optional[_Value] = None,
                 lease: Optional[_Seconds] = None, heartbeat: Optional[_Seconds] = None,
                 retry: Optional[Sequence[_Seconds]] = None, owner: Union[str, bytes, None] = None,
                 reentrant: Union[str, bytes, None] = None,
                 on_lost: Optional[_OnLost] = None, fair: Optional[bool] = None,
                 max_hold: Optional[_Seconds] = None, min_hold: Optional[_Seconds] = None,
                 lock_delay: Optional[_Seconds] = None,
                 on_release_requested: Optional[_OnReleaseRequested] = None,
                 lease_ms: Optional[int] = None, heartbeat_ms: Optional[int] = None,
                 retry_ms: Optional[Sequence[int]] = None,
                 max_hold_ms: Optional[int] = None, min_hold_ms: Optional[int] = None,
                 lock_delay_ms: Optional[int] = None) -> "Lock":
        """Stands for leader of the election `name` and waits, without limit, until this
        candidate leads (dlock_campaign); returns the leadership, a held Lock: its
        fencing_token is the term, greater than every earlier term of the name (pass it to what
        the leader writes, and have that refuse lower terms). value (bytes, or str as UTF-8) is
        what it proclaims (an address, say), shown by leader() to everyone; lock.set_value()
        replaces it. lock.release() resigns: the next candidate leads (in arrival order where
        the backend has the "fair" capability). A lost leadership is reported as a lost lock
        (on_lost, valid False, NotHeld). The options are lock()'s, but a leadership is always
        exclusive and always waits: kind=, shared=, permits=, blocking=, timeout= and wait_ms=
        are not taken (TypeError); for a bounded wait, client.acquire(name, value=...,
        timeout=S). Blocks the calling thread only (the GIL is released while waiting)."""
        lock = self._candidate(name, value, lease, heartbeat, retry, owner, on_lost, fair,
                               lease_ms, heartbeat_ms, retry_ms, max_hold, max_hold_ms,
                               min_hold, min_hold_ms, lock_delay, lock_delay_ms,
                               on_release_requested, reentrant)
        lock._acquire(-1, True, lock._spec.on_lost, campaign=True)
        return lock

    async def acampaign(self, name: _Name, *, value: Optional[_Value] = None,
                        lease: Optional[_Seconds] = None, heartbeat: Optional[_Seconds] = None,
                        retry: Optional[Sequence[_Seconds]] = None,
                        owner: Union[str, bytes, None] = None,
                        reentrant: Union[str, bytes, None] = None,
                        on_lost: Optional[_OnLost] = None,
                        fair: Optional[bool] = None, max_hold: Optional[_Seconds] = None,
                        min_hold: Optional[_Seconds] = None, lock_delay: Optional[_Seconds] = None,
                        on_release_requested: Optional[_OnReleaseRequested] = None,
                        lease_ms: Optional[int] = None,
                        heartbeat_ms: Optional[int] = None,
                        retry_ms: Optional[Sequence[int]] = None,
                        max_hold_ms: Optional[int] = None, min_hold_ms: Optional[int] = None,
                        lock_delay_ms: Optional[int] = None) -> "Lock":
        """campaign() for asyncio: waits without blocking the event loop or holding a thread
        (an acquire with no wait limit on this loop's client, as aacquire). Cancelling the
        awaiting task withdraws the candidacy. on_lost(lock) runs on this event loop."""
        lock = self._candidate(name, value, lease, heartbeat, retry, owner, on_lost, fair,
                               lease_ms, heartbeat_ms, retry_ms, max_hold, max_hold_ms,
                               min_hold, min_hold_ms, lock_delay, lock_delay_ms,
                               on_release_requested, reentrant)
        await lock._aacquire(-1, True)
        return lock

    # -- locks

    def lock(self, name: _Name, *, blocking: Union[bool, _Unset] = _UNSET,
             timeout: Union[_Seconds, None, _Unset] = _UNSET, lease: Optional[_Seconds] = None,
             heartbeat: Optional[_Seconds] = None, retry: Optional[Sequence[_Seconds]] = None,
             owner: Union[str, bytes, None] = None, reentrant: Union[str, bytes, None] = None,
             on_lost: Optional[_OnLost] = None,
             kind: Optional[_Kind] = None, permits: Optional[int] = None,
             take: Optional[int] = None,
             shared: Optional[bool] = None, fair: Optional[bool] = None,
             value: Optional[_Value] = None, max_hold: Optional[_Seconds] = None,
             min_hold: Optional[_Seconds] = None, lock_delay: Optional[_Seconds] = None,
             on_release_requested: Optional[_OnReleaseRequested] = None,
             lease_ms: Optional[int] = None, wait_ms: Union[int, None, _Unset] = _UNSET,
             heartbeat_ms: Optional[int] = None,
             retry_ms: Optional[Sequence[int]] = None,
             max_hold_ms: Optional[int] = None, min_hold_ms: Optional[int] = None,
             lock_delay_ms: Optional[int] = None) -> "Lock":
        """A Lock for the name `name` (str or bytes, 1..MAX_NAME_BYTES bytes), NOT acquired yet:
        `with lock:` (or `async with lock:`) acquires it on entry and releases it on exit, every
        time the block runs; lock.acquire() / lock.release() do the same by hand. Nothing is
        sent to the server here; every option is checked here (TypeError, InvalidArgument).

        blocking, timeout  how each acquire waits unless it says otherwise: by default without
                      limit, like threading.Lock; timeout=S waits at most S seconds (float;
                      -1 or None: no limit); blocking=False makes one try
        lease         server-side lease in seconds (default 10; 0 = never expires until released)
        heartbeat     renewal period in seconds (default lease/3; 0 = no heartbeats)
        max_hold      the longest the heartbeats keep each hold, in seconds (a job timeout that
                      holds across machines; default None or 0: no maximum): once it has passed
                      since the acquire returned, renewals stop, the hold ends with its lease
                      (at most max_hold + lease after the acquire) and is reported lost with
                      the cause "max_hold" (on_lost, valid False, lost_cause "max_hold: ...",
                      NotHeld.cause "max_hold"). An explicit extend() still renews it. Needs a
                      lease: with lease=0 the acquire raises InvalidArgument; at most ten years
        min_hold      the shortest the name stays taken, in seconds (ShedLock's lockAtLeastFor;
                      default None or 0: none): however the hold ends, the name is not free
                      before the acquire + min_hold on the server's clock. An earlier release
                      returns at once and leaves a marker with no owner (inspect(): no holders,
                      closed_ms > 0, closed_by "min_hold"); other acquires wait it out (one try:
                      NotAcquired). At most max_hold when that is set (else InvalidArgument at
                      acquire naming both). Backends with the "min_hold" capability (Redis);
                      elsewhere the acquire raises InvalidArgument
        lock_delay    seconds the name stays closed after a hold ends uncleanly (its lease ran
                      out: the holder crashed, hung or lost the server), as Chubby's and
                      Consul's lock-delay (default None or 0: none): inspect() shows no holders,
                      closed_by "lock_delay". A release has no delay. At most MAX_LOCK_DELAY_MS
                      (60 s). Backends with the "lock_delay" capability (Redis); elsewhere the
                      acquire raises InvalidArgument
        retry         (min, max) seconds of the fallback retry while waiting (default (0.05, 1))
        owner         a label stored with the lock for people and tools
        reentrant     a context (str or bytes, 1..256 bytes: a task, a request id) whose
                      acquires of a name re-enter: while this client holds the name under the
                      same context, another acquire of it waits for nothing (even with
                      blocking=False) and returns a Lock of its own on that hold, with the same
                      fencing_token; only the release of the last of them frees the name. A
                      re-entry of a hold that was lost or is past its local deadline raises
                      NotHeld; one asking another kind, permits or take InvalidArgument. Another
                      context, or none, contends as anyone does. The hold's on_lost and
                      on_release_requested are its first acquire's (a re-entry's are not
                      called). One client: an aacquire (the event loop's client) does not
                      re-enter a hold of acquire (the blocking API's), nor the reverse.
                      Default None: not reentrant
        on_lost       callback(lock), run once on the "dlock-events" thread (on the event loop
                      for an asyncio acquire) if the lock is found lost while held;
                      lock.lost_cause says why ("deleted: ...", "taken_over: ...",
                      "refused: ...", "expired: ..." or "max_hold: ...")
        on_release_requested
                      callback(lock, reason): someone asked the holder to let go
                      (Client.request_release; reason a str, "" for none), run where on_lost
                      runs, for each request heard while this lock holds. The callback may
                      release the lock (for an asyncio hold: schedule arelease()), or ignore it.
                      Only a hold acquired with it hears requests (a subscription while it
                      holds: backends with the "release_request" capability; elsewhere the
                      acquire raises InvalidArgument)
        kind          "exclusive" (default) or "shared"; shared=True is kind="shared" (and
                      shared=False kind="exclusive"); permits: a semaphore of that many holders
                      (0 = off). A shared semaphore, or shared= contradicting kind=, is
                      InvalidArgument; so are kinds the backend does not offer (capabilities).
        take          how many of the semaphore's permits each acquire takes at once, all or
                      none (default 1): a hold that took k counts k against the permits until
                      it ends, and its release frees all k (one fencing token, lease and
                      heartbeat). 0 is InvalidArgument here; more than 1 without permits, or
                      more than the permits, InvalidArgument at acquire; a re-entry asking
                      another take likewise
        fair          True (default): a waiting exclusive acquire takes a place in line and is
                      handed the lock by a release, in arrival order (backends with the "fair"
                      capability); False: it competes with every other waiter at each release
        value         bytes (any, NUL included; a str is stored as UTF-8) stored on the server
                      with each hold, up to MAX_VALUE_BYTES (4096): inspect() and leader() show
                      it to everyone (keep no secret in it); lock.set_value() replaces it
        lease_ms, heartbeat_ms, max_hold_ms, min_hold_ms, lock_delay_ms, retry_ms, wait_ms
                      the same in integer milliseconds (the older spelling; wait_ms: 0 = one
                      try, -1 or None = no limit); give one spelling of each, not both
        """
        return self._lock(name, _Spec(lease, heartbeat, retry, owner, on_lost, kind, permits,
                                      shared, fair, lease_ms, heartbeat_ms, retry_ms, value,
                                      max_hold, max_hold_ms, min_hold, min_hold_ms, lock_delay,
                                      lock_delay_ms, on_release_requested, reentrant, take),
                          _wait_of(blocking, timeout, wait_ms), True)

    def _lock(self, name: _Name, spec: "_Spec", wait_ms: int, check: bool) -> "Lock":
        self._check_process()
        lock = Lock(self, name, spec, wait_ms)
        if check:  # the library's own checks of the options (its words), before any acquire
            opts, slot = spec.build(wait_ms, None)
            if opts:
                _c.dlock_options_free(opts)
        return lock

    def _unchecked_lock(self, name: _Name, options: Any) -> "Lock":
        """lock() for a lock acquired at once: the library checks the options then."""
        def parse(*, blocking=_UNSET, timeout=_UNSET, lease=None, heartbeat=None, retry=None,
                  owner=None, reentrant=None, on_lost=None, kind=None, permits=None,
                  take=None, shared=None, fair=None,
                  value=None, max_hold=None, min_hold=None, lock_delay=None,
                  on_release_requested=None, lease_ms=None,
                  wait_ms=_UNSET, heartbeat_ms=None, retry_ms=None, max_hold_ms=None,
                  min_hold_ms=None, lock_delay_ms=None):
            return self._lock(name, _Spec(lease, heartbeat, retry, owner, on_lost, kind, permits,
                                          shared, fair, lease_ms, heartbeat_ms, retry_ms, value,
                                          max_hold, max_hold_ms, min_hold, min_hold_ms,
                                          lock_delay, lock_delay_ms, on_release_requested,
                                          reentrant, take),
                              _wait_of(blocking, timeout, wait_ms), False)
        return parse(**options)

    @_options_of(lock)
    def acquire(self, name: _Name, **options: Any) -> "Lock":
        """client.lock(name, **options), acquired: returns the held Lock, or raises NotAcquired
        (also a TimeoutError) when the wait ran out. Waits without limit unless timeout= or
        blocking=False says otherwise. Blocks the calling thread only (the GIL is released while
        waiting). Release it with lock.release() (or use it as `with client.lock(...)`)."""
        lock = self._unchecked_lock(name, options)
        lock._acquire(lock._wait_ms, True, lock._spec.on_lost)
        return lock

    # -- asyncio

    @_options_of(lock)
    async def aacquire(self, name: _Name, **options: Any) -> "Lock":
        """acquire() for asyncio: waits without blocking the event loop or holding a thread
        (a client driven by this event loop itself, opened on first use here: no thread hop;
        with DLOCK_PY_FORCE_THREADS=1, a worker thread per waiting call). Returns the held Lock, or raises NotAcquired.
        Cancelling the awaiting task cancels the acquire (and gives back a lock that arrived at
        the same moment). on_lost(lock) runs on this event loop (call_soon)."""
        lock = self._unchecked_lock(name, options)
        await lock._aacquire(lock._wait_ms, True)
        return lock

    @_options_of(lock)
    def alock(self, name: _Name, **options: Any) -> "Lock":
        """The same as lock(): `async with client.alock(name, ...) as lock:` acquires without
        blocking the event loop and releases on the way out. Awaiting the Lock acquires it too:
        `lock = await client.alock(...)`."""
        return self.lock(name, **options)


    # -- several names, all or none

    def lock_many(self, names: Iterable[_Name], *, blocking: Union[bool, _Unset] = _UNSET,
                  timeout: Union[_Seconds, None, _Unset] = _UNSET, lease: Optional[_Seconds] = None,
                  heartbeat: Optional[_Seconds] = None, retry: Optional[Sequence[_Seconds]] = None,
                  owner: Union[str, bytes, None] = None,
                  reentrant: Union[str, bytes, None] = None,
                  on_lost: Optional[_OnLost] = None,
                  kind: Optional[_Kind] = None, permits: Optional[int] = None,
                  take: Optional[int] = None,
                  shared: Optional[bool] = None, fair: Optional[bool] = None,
                  value: Optional[_Value] = None, max_hold: Optional[_Seconds] = None,
                  min_hold: Optional[_Seconds] = None, lock_delay: Optional[_Seconds] = None,
                  lease_ms: Optional[int] = None, wait_ms: Union[int, None, _Unset] = _UNSET,
                  heartbeat_ms: Optional[int] = None,
                  retry_ms: Optional[Sequence[int]] = None,
                  max_hold_ms: Optional[int] = None, min_hold_ms: Optional[int] = None,
                  lock_delay_ms: Optional[int] = None) -> "LockGroup":
        """A LockGroup for several names (a list or any iterable of str or bytes, at least one,
        each once), NOT acquired yet: `with client.lock_many(["acct/1", "acct/2"]) as (a, b):`
        takes every name or none (dlock_acquire_many) on entry and releases them all on exit,
        every time the block runs; group.acquire() / group.release() do the same by hand. The
        group is a sequence of one Lock per name, in the order given, each with its own fencing
        token, lease, heartbeats and on_lost. The names are taken in one fixed order
        (bytewise), whatever order they are given in, so callers asking for {a, b} and {b, a}
        at once never deadlock; what was taken is given back when a later name cannot be.

        The options are lock()'s, and apply to every name. timeout= (or wait_ms=) bounds the
        whole call, not each name; a wait that runs out is a NotAcquired on `with` and False
        from acquire(), as for lock(), with nothing held. on_lost(lock) runs with the Lock that
        was lost. on_release_requested= is not taken (TypeError): the library's queued report
        of a request does not say which name it was for. Nothing is sent to the server here;
        every option is checked here, and so are the names: a name given twice (str and bytes
        alike) or none at all is an InvalidArgument, a single str or bytes instead of a list a
        TypeError."""
        spec = _Spec(lease, heartbeat, retry, owner, on_lost, kind, permits, shared, fair,
                     lease_ms, heartbeat_ms, retry_ms, value, max_hold, max_hold_ms, min_hold,
                     min_hold_ms, lock_delay, lock_delay_ms, None, reentrant, take)
        return self._lock_many(names, spec, _wait_of(blocking, timeout, wait_ms))

    def _lock_many(self, names, spec, wait_ms):
        self._check_process()
        if isinstance(names, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"names must be a list (or any iterable) of lock names, not one "
                            f"{type(names).__name__}: lock_many([name, ...])")
        try:
            given = list(names)
        except TypeError:
            raise TypeError("names must be a list (or any iterable) of lock names, not "
                            f"{type(names).__name__}") from None
        if not given:
            raise InvalidArgument("lock_many: no names given: name at least one lock")
        locks = tuple(Lock(self, name, spec, wait_ms) for name in given)  # each name checked
        seen = set()
        for lock in locks:
            if lock._bname in seen:
                shown = lock._bname.decode("utf-8", "replace")
                raise InvalidArgument(f"lock '{shown}' is named twice: give each name once")
            seen.add(lock._bname)
        if not hasattr(_c, "dlock_acquire_many"):
            raise InvalidArgument(f"lock_many: libdlock {version()} at {_library_path} cannot "
                                  "take several names at once (dlock_acquire_many); install a "
                                  "newer one")
        opts, _ = spec.build(wait_ms, None)  # the library's checks of the options (its words)
        if opts:
            _c.dlock_options_free(opts)
        return LockGroup(self, locks, spec, wait_ms)

    @_options_of(lock_many)
    def alock_many(self, names: Iterable[_Name], **options: Any) -> "LockGroup":
        """The same as lock_many(): `async with client.alock_many(names, ...) as (a, b):`
        acquires every name or none without blocking the event loop, and releases them on the
        way out; `a, b = await client.alock_many(names)` acquires too. The library has no
        asynchronous dlock_acquire_many: each acquire waits in a worker thread of its own, on
        the blocking API's client (opened then if this Client has none yet), and its on_lost
        callbacks run on the event loop. Cancelling the awaiting task returns at once and
        leaves nothing held, but the worker stays in the library until its call returns (within
        timeout=; with no limit, until it has every name) and then gives them back: give a
        timeout where tasks are cancelled. Releases run on the loop's default executor."""
        return self.lock_many(names, **options)


# ----- Observer --------------------------------------------------------------------------------

class Observer:
    """An observation of who leads an election: what Client.observe returns. cancel() stops it
    (also leaving `with client.observe(name, callback):`); the client's close() stops it too.
    Dropping the object does not."""

    __slots__ = ("_client", "_slot", "name")

    def __init__(self, client: Client, name: _Name, slot: _ObserveSlot) -> None:
        self._client = client
        self._slot = slot
        self.name = name

    def cancel(self) -> None:
        """Stops the observation: once it returns, the callback is neither running nor going
        to run (a call running on the dlock-events thread is waited for; called from inside
        the callback, it returns at once and that call finishes). Idempotent; any thread."""
        slot = self._slot
        slot.cancel()
        client = self._client
        with client._mu:
            client._observers.pop(slot.id, None)

    @property
    def cancelled(self) -> bool:
        """True once cancel() (or the client's close) stopped it."""
        return self._slot.cancelled

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<dlock.Observer {self.name!r} {'cancelled' if self.cancelled else 'observing'}>"


class AsyncObserver:
    """client.aobserve(name): an async iterator of who leads the election `name`, a Holder or
    None when nobody leads, first as it stands, then at each change. The observation starts at
    the first iteration (or `async with`) and stops with the iteration (see Client.aobserve)."""

    __slots__ = ("_client", "_bname", "_slot", "_queue", "_done", "name")

    def __init__(self, client: Client, name: _Name) -> None:
        self._client = client
        self._bname = _name_arg(name)
        self.name = name
        self._slot: Optional[_ObserveSlot] = None
        self._queue: "Optional[asyncio.Queue[Any]]" = None
        self._done = False

    def _start(self) -> None:
        """dlock_observe, on this loop's client (or the sync API's, with its reports hopping
        to this loop)."""
        client = self._client
        client._check_process()
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Any]" = asyncio.Queue()
        if _use_async_c:
            lc = client._loop_client(loop)
            slot = _ObserveSlot(queue.put_nowait, lc, lambda: queue.put_nowait(_END))
            out = _lib.c_observer_p()
            _observers[slot.id] = slot
            try:
                status = _c.on_loop.dlock_observe(lc.h, self._bname, _OBSERVE_CB, slot.id,
                                                  ctypes.byref(out))
                if status != 0:
                    raise _error(status)
            except BaseException:
                _observers.pop(slot.id, None)
                raise
            slot.h = out.value
            lc.observers[slot.id] = slot
        else:
            def hop(item: Any) -> None:  # on the dlock-events thread (or close's)
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                except RuntimeError:  # the loop is closed: nobody iterates any more
                    slot.cancel()

            slot = _ObserveSlot(hop, None, lambda: hop(_END))
            client._observe_owned(self._bname, slot)
        self._slot, self._queue = slot, queue

    def __aiter__(self) -> "AsyncObserver":
        return self

    async def __anext__(self) -> Optional[Holder]:
        if self._done:
            raise StopAsyncIteration
        if self._slot is None:
            self._start()
        queue = self._queue
        assert queue is not None
        try:
            item = await queue.get()
        except BaseException:  # the task was cancelled (or the loop is going away)
            self.cancel()
            raise
        if item is _END or self._done:
            self._done = True
            raise StopAsyncIteration
        leader: Optional[Holder] = item
        return leader

    def cancel(self) -> None:
        """Stops the observation now; the iteration ends. Idempotent; any thread."""
        self._done = True
        slot = self._slot
        if slot is None or slot.cancelled:
            return
        lc = slot.lc
        if lc is None:
            slot.cancel()
            client = self._client
            with client._mu:
                client._observers.pop(slot.id, None)
            return
        lc.observers.pop(slot.id, None)
        slot.cancel(_c.on_loop if threading.get_ident() == lc.thread else None)

    async def aclose(self) -> None:
        """cancel(), as an async generator's aclose() (contextlib.aclosing works)."""
        self.cancel()

    @property
    def cancelled(self) -> bool:
        """True once the observation stopped (or before it started, once cancelled)."""
        return self._done or (self._slot is not None and self._slot.cancelled)

    async def __aenter__(self) -> "AsyncObserver":
        if self._slot is None and not self._done:
            self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    def __del__(self) -> None:
        # Dropped while observing (a `break` out of `async for`, in CPython at once): stop. No
        # dlock_last_error is touched by dlock_observer_cancel, so any thread will do.
        try:
            if self._slot is not None and not self._slot.cancelled:
                self.cancel()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = ("cancelled" if self.cancelled else "observing" if self._slot is not None
                 else "not started")
        return f"<dlock.AsyncObserver {self.name!r} {state}>"


# ----- Lock ------------------------------------------------------------------------------------

class _Guard:
    """Lock.guard(): `async with` that cancels its task when the lock is lost."""

    __slots__ = ("_lock", "_task", "_active", "_cancelled", "_cause")

    def __init__(self, lock: "Lock") -> None:
        self._lock = lock
        self._task: "Optional[asyncio.Task[Any]]" = None
        self._active = False     # from acquiring until the block is left
        self._cancelled = False  # the loss cancelled the task
        self._cause: Optional[str] = None  # lock.lost_cause when the loss was reported

    def _on_lost(self, lock):
        """On the loop, before the user's on_lost: cancels the task while it runs the block."""
        if not self._active or self._cancelled:
            return
        self._cause = lock.lost_cause
        message = f"dlock: lock {lock.name!r} was lost"
        try:
            cancelled = self._task.cancel(message)
        except TypeError:  # Python 3.8: no message
            cancelled = self._task.cancel()
        self._cancelled = cancelled

    def _lost(self, exc_type: Optional[Type[BaseException]],
              exc: Optional[BaseException]) -> Literal[False]:
        """After the loss cancelled the task: LockLost raised, or False to let the block's own
        exception (or a cancellation from elsewhere) go on."""
        others = 0
        uncancel = getattr(self._task, "uncancel", None)  # Python 3.11+
        if uncancel is not None:
            others = uncancel()
        if exc_type is not None and not issubclass(exc_type, asyncio.CancelledError):
            return False  # the block's own exception goes on
        if exc_type is not None and others > 0:
            return False  # cancelled from elsewhere too: that goes on
        cause = self._cause or self._lock._lost_cause
        why = cause or "expired, deleted or taken over on the server"
        raise LockLost(f"lock {self._lock.name!r} was lost while the block of `async with "
                       f"lock.guard()` ran ({why}), and the block was cancelled",
                       cause=_cause_code(cause)) from exc

    async def __aenter__(self) -> "Lock":
        if self._task is not None:
            raise RuntimeError("a lock.guard() is entered once: take a new lock.guard()")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("lock.guard() needs an asyncio task")
        self._task = task
        self._active = True
        try:
            await self._lock._aacquire(self._lock._wait_ms, True, self._on_lost)
        except BaseException as e:
            self._active = False
            if self._cancelled:  # lost as soon as granted: the acquire gave it back
                self._lost(type(e), e)
            raise
        return self._lock

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Literal[False]:
        self._active = False
        if not self._cancelled:
            return await self._lock.__aexit__(exc_type, exc, tb)
        self._lock._release_async_quietly()  # lost: release() would only say NotHeld
        return self._lost(exc_type, exc)




def _acquire_wait(wait_ms, blocking, timeout):
    """The wait of acquire(blocking, timeout) on a Lock (or LockGroup) told wait_ms."""
    # acquire() and acquire(blocking=True) wait as the lock was told (its timeout=), as
    # redis-py's acquire falls back to the lock's blocking_timeout.
    if timeout is None and blocking is not False and wait_ms != 0:
        return wait_ms
    if blocking is None and timeout is None:
        return wait_ms
    if blocking is None:
        blocking = True
    return _wait_of(blocking, _UNSET if timeout is None else timeout, _UNSET)


def _on_loop_later(schedule, cb):
    """cb (a lock callback, or None) made to run through schedule (loop.call_soon, or
    call_soon_threadsafe from another thread), with the same arguments; dropped once the loop
    is closed (nobody to tell)."""
    if cb is None:
        return None

    def later(*args):
        try:
            schedule(cb, *args)
        except RuntimeError:  # loop closed
            pass
    return later

class Lock:
    """One distributed lock, by name: made by Client.lock(name, ...) NOT acquired, and reusable.

        lk = client.lock("jobs/nightly", lease=10)
        with lk:                 # acquires (waiting without limit by default) ...
            write(lk.fencing_token)
        # ... and released here; `with lk:` again acquires again

    acquire(blocking=True, timeout=-1) -> bool   waits (timeout in seconds; -1: no limit) or
                   makes one try (blocking=False); False when not acquired. No argument: the
                   wait given to client.lock(...).
    release()      NotHeld if this object does not hold it, or the hold was lost meanwhile
    locked()       someone (anyone) holds the name now: a round trip (Client.inspect)
    owned()        this object holds it and its local deadline holds (no round trip)
    fencing_token  the token of the current hold (int), greater than every token issued
                   before for this name; None while this object holds nothing
    extend(lease=None)  a new lease from now, in seconds (default: the lock's own lease)
    set_value(value)    replaces the value stored with the hold (b"" removes it)
    valid, remaining, remaining_ms, attempts, name, released
    lost_cause     None while valid, else why the hold was lost: "deleted: ...",
                   "taken_over: ...", "refused: ...", "expired: ..." or "max_hold: ..."
    aacquire(), arelease(), aextend(), aset_value(), `async with lock:`   the same for asyncio
    `async with lock.guard():`   also cancels the block if the lock is lost (then: LockLost)

    One object is one holder, like threading.Lock: acquire() while this object holds (or is
    acquiring) raises AlreadyHeld (a RuntimeError), never a silent success. Threads and tasks
    that each want the lock take their own client.lock(name). Calls on one Lock are serialized.
    A Lock garbage collected while held is released then (with a ResourceWarning).
    """

    __slots__ = ("_client", "_spec", "_wait_ms", "_bname", "_h", "_mu", "_slot", "_busy",
                 "_token", "_attempts", "_lc", "_lost_cause", "name", "__weakref__")

    name: _Name  # the name as given to client.lock()

    def __init__(self, client: Client, name: _Name, spec: _Spec, wait_ms: int) -> None:
        self._bname = _name_arg(name)
        self._client = client   # keeps the client (and so its locks) alive while this lock is
        self._spec = spec
        self._wait_ms = wait_ms
        self._h = None
        self._lc: Optional[_LoopClient] = None  # the hold's client when asyncio acquired it
        self._mu = threading.Lock()
        self._slot = None
        self._busy = False       # an acquire is under way
        self._token = None
        self._attempts = 0
        self._lost_cause: Optional[str] = None  # the last hold's, read as it was let go
        self.name = name

    # -- state

    @property
    def fencing_token(self) -> Optional[int]:
        """The fencing token of this object's current hold (int), or None when it holds
        nothing (never acquired, or released). A hold found lost keeps its token until
        release(): pass it on only while owned()."""
        return self._token

    @property
    def attempts(self) -> int:
        """How many tries the last acquire took (1 = first try; 0 before any)."""
        return self._attempts

    @property
    def valid(self) -> bool:
        """True while this object holds the lock, its local deadline holds, and it was not
        found lost."""
        self._client._check_process()
        with self._mu:
            return bool(self._h) and _c.dlock_lock_is_valid(self._h) == 1

    def owned(self) -> bool:
        """True while this object holds the lock (valid): no round trip."""
        return self.valid

    def locked(self) -> bool:
        """True when someone, this object or anyone else, holds the name now (Client.inspect:
        one round trip, a snapshot stale as soon as it returns)."""
        return bool(self._client.inspect(self._bname).holders)

    @property
    def remaining_ms(self) -> float:
        """ms before the local deadline: math.inf for no expiry; 0 while not held or once lost."""
        self._client._check_process()
        with self._mu:
            if not self._h:
                return 0
            left = _c.dlock_lock_remaining_ms(self._h)
        return math.inf if left == _I64_MAX else left

    @property
    def remaining(self) -> float:
        """remaining_ms in seconds (float)."""
        left = self.remaining_ms
        return left if left == math.inf else left / 1000

    @property
    def released(self) -> bool:
        """True while this object holds nothing (not acquired yet, or released)."""
        return self._h is None

    @property
    def lost_cause(self) -> Optional[str]:
        """Why this object's hold was lost (dlock_lock_lost_cause): None while it holds the lock
        and its local deadline holds, else "CAUSE: details", CAUSE being a stable code. When
        the server no longer had this owner's lock (a renewal, extend, release or set_value was
        refused), the library looks at the name once more to say which: "deleted" (nobody holds
        it: deleted by hand, or its lease ran out on the server; or a shared or semaphore hold
        vanished while others stand), "taken_over" (another owner holds it; the details name
        its fencing token, and its label) or "refused" (that look failed, or still listed this
        hold). "expired": renewals failed until the local deadline passed first (the details
        end with the last error). "max_hold": the max_hold= option's time passed, renewals
        stopped, and the lease ran out. "broken": an operator broke the lock
        (Client.break_lock; "broken: an operator broke the lock: REASON"). In an on_lost callback it says
        why. Kept after release() until the next acquire; None when this object never held
        the lock, or its last hold was released while valid, or was released by the client's
        close. A loss that release() itself finds (the lock gone when the release reached the
        server) is known only as release()'s NotHeld."""
        self._client._check_process()
        with self._mu:
            if self._h:
                return _lost_cause_of(self._h)
            return self._lost_cause

    # -- acquire

    def _begin(self):
        with self._mu:
            if self._h or self._busy:
                held = "holds" if self._h else "is acquiring"
                raise AlreadyHeld(
                    f"this Lock object {held} {self.name!r} already: release it first. A Lock "
                    "is one holder, not reentrant: `with lock:` acquires on entry (so do not "
                    "enter a lock that acquire() took), and each thread or task that wants the "
                    "lock takes its own client.lock(name) (with reentrant=, a re-entry too)")
            self._busy = True

    def _end(self):
        with self._mu:
            self._busy = False

    def _install(self, h, slot, lc=None):
        token, attempts = int(_c.dlock_lock_fencing_token(h)), int(_c.dlock_lock_attempts(h))
        with self._mu:
            self._h, self._slot, self._lc = h, slot, lc
            self._token, self._attempts = token, attempts
            self._busy = False
            self._lost_cause = None
        if slot is not None:
            slot.attach(self)

    def _wait_arg(self, blocking, timeout):
        return _acquire_wait(self._wait_ms, blocking, timeout)

    def acquire(self, blocking: Optional[bool] = None, timeout: Optional[_Seconds] = None) -> bool:
        """Acquires the lock: True once held, False when the wait ran out (blocking=True,
        timeout=S seconds; -1 = no limit) or the one try failed (blocking=False). With no
        argument, waits as client.lock(...) said (by default without limit). Raises AlreadyHeld
        if this object holds it already, and the library's errors (ConnectionError, ...)."""
        return self._acquire(self._wait_arg(blocking, timeout), False, self._spec.on_lost)

    def _acquire(self, wait_ms, must, on_lost, campaign=False):
        """must: raise the library's NotAcquired rather than return False. campaign: through
        dlock_campaign (which waits without limit) rather than dlock_acquire."""
        self._client._check_process()
        self._begin()
        return self._acquire_begun(wait_ms, must, on_lost, campaign)

    def _acquire_begun(self, wait_ms, must, on_lost, campaign=False):
        try:
            h, slot = self._acquire_raw(wait_ms, on_lost, campaign)
        except NotAcquired:
            self._end()
            if must:
                raise
            return False
        except BaseException:
            self._end()
            raise
        self._install(h, slot)
        return True

    def _acquire_raw(self, wait_ms, on_lost, campaign=False, on_release=_UNSET):
        """dlock_acquire (or dlock_campaign): (handle, on_lost slot), or raises; this object is
        left alone. on_release: the on_release_requested callback (default: the spec's)."""
        if on_release is _UNSET:
            on_release = self._spec.on_release_requested
        slot = None
        try:
            opts, slot = self._spec.build(wait_ms, on_lost, on_release=on_release)
            out = ctypes.c_void_p()
            err = None
            try:
                h = self._client._enter()
                try:
                    acquire = _c.dlock_campaign if campaign else _c.dlock_acquire
                    status = acquire(h, self._bname, opts, ctypes.byref(out))
                    if status != 0:
                        err = _error(status)  # this thread's message: read it at once
                finally:
                    self._client._leave()
            finally:
                if opts:
                    _c.dlock_options_free(opts)
        except BaseException:
            if slot is not None:
                slot.drop()
            raise
        if err is not None:
            if slot is not None:
                slot.drop()
            raise err
        return out.value, slot

    # -- release and extend

    def _take(self, keep_cause=True):
        """Takes the handle, its slot and its _LoopClient (None: the sync API's client) out of
        this Lock: (None, None, None) if it holds nothing. keep_cause: reads why the hold was
        lost first, for lost_cause (not from a finalizer: no dlock call there)."""
        self._client._check_process()
        with self._mu:
            h, self._h = self._h, None
            if not h:
                return None, None, None
            self._lost_cause = _lost_cause_of(h) if keep_cause else None
            slot, self._slot = self._slot, None
            lc, self._lc = self._lc, None
            self._token = None
        return h, slot, lc

    def _not_held_error(self):
        return NotHeld(f"lock {self.name!r} is not held by this Lock object (never acquired, "
                       "or already released)")

    def release(self) -> None:
        """Releases the lock. Raises NotHeld if this object does not hold it, or if the hold
        had been lost (expired, taken over, released by Client.close); this object holds
        nothing afterwards either way, and may acquire again.
        A hold taken through asyncio is released through its event loop's client: on the
        loop's thread this blocks the loop for one round trip (prefer await arelease()); from
        another thread it needs the loop running (InvalidArgument otherwise)."""
        lc = self._lc
        if lc is not None and not lc.blocking_ok():
            raise _not_on_loop(self, lc, "release")
        h, slot, lc = self._take()
        if not h:
            raise self._not_held_error()
        status = _c.dlock_release(h)
        err = _with_cause(_error(status), self._lost_cause) if status != 0 else None
        if slot is not None:  # release is done: on_lost is neither running nor going to run
            slot.drop()
        if err is not None:
            raise err

    def _extend_ms(self, lease, lease_ms):
        ms = _duration("lease", lease, "lease_ms", lease_ms, _lease_bound)
        if ms is None:
            ms = self._spec.lease_ms if self._spec.lease_ms is not None else _DEFAULT_LEASE_MS
        return ms

    def extend(self, lease: Optional[_Seconds] = None, *, lease_ms: Optional[int] = None) -> None:
        """Sets the lease to `lease` seconds from now (0 = no expiry; default: this lock's
        lease= / lease_ms=, else 10 s); lease_ms= says it in milliseconds. NotHeld if this
        object does not hold the lock or it was lost."""
        ms = self._extend_ms(lease, lease_ms)
        self._client._check_process()
        with self._mu:
            if not self._h:
                raise self._not_held_error()
            lc = self._lc
            if lc is not None and not lc.closed:
                if threading.get_ident() == lc.thread:
                    # the library refuses it (DLOCK_EINVAL): it would wait for the loop it blocks
                    raise InvalidArgument(
                        f"lock {self.name!r} was acquired through asyncio on this thread's event "
                        "loop, which drives it: extend() here would wait for the loop it blocks. "
                        "Use await lock.aextend()")
                if not lc.blocking_ok():
                    raise _not_on_loop(self, lc, "extend")
            status = _c.dlock_extend(self._h, ms)
            if status != 0:
                raise _with_cause(_error(status), _lost_cause_of(self._h))

    def set_value(self, value: _Value) -> None:
        """Replaces the value stored with this hold (bytes, or str as UTF-8; b"" removes it),
        as leaders proclaim: inspect() and leader() show the new one from now on. The server
        checks that this owner still holds it: NotHeld if this object holds nothing, or the
        hold was lost or taken over, and then nothing is written. InvalidArgument for more than
        MAX_VALUE_BYTES. The lease is left as it is. One round trip, blocking the calling
        thread (the GIL released); for a hold taken through asyncio, as release() (on the
        loop's thread it holds the loop for that round trip; prefer await aset_value())."""
        data = _value_arg(value)
        self._client._check_process()
        lc = self._lc
        if lc is not None and not lc.blocking_ok():
            raise _not_on_loop(self, lc, "set the value of")
        with self._mu:
            if not self._h:
                raise self._not_held_error()
            status = _c.dlock_lock_set_value(self._h, data, len(data))
            if status != 0:
                raise _with_cause(_error(status), _lost_cause_of(self._h))

    async def aset_value(self, value: _Value) -> None:
        """set_value() without blocking the event loop, as aextend(): a hold taken on this
        loop's client is written by it (dlock_lock_set_value_async; the outcome comes back on
        the loop's thread, no thread hop), a hold of the blocking API through its client's
        completion queue (dlock_lock_set_value_queued). A hold of another event loop's client
        (and every hold with DLOCK_PY_FORCE_THREADS=1) is written from a worker thread."""
        data = _value_arg(value)
        self._client._check_process()
        loop = asyncio.get_running_loop()
        lc = self._lc
        if not _use_async_c or (lc is not None and lc.loop is not loop and not lc.closed):
            return await loop.run_in_executor(None, self.set_value, data)
        fut = loop.create_future()
        op_id = next(_ids)
        with self._mu:
            if not self._h:
                raise self._not_held_error()
            lc = self._lc
            if lc is None:  # acquired with the sync API: its client's queue
                _pending[op_id] = (lambda status, handle, message:
                                   _deliver(loop, fut, status, None, message))
                status = _c.dlock_lock_set_value_queued(self._h, data, len(data), _queue_now(),
                                                        op_id)
                if status != 0:  # argument errors (a closed client: NotHeld); nothing queued
                    _pending.pop(op_id, None)
                    raise _error(status)
            else:
                def completed(status, handle, message):  # on the loop's thread
                    if not fut.done():
                        if status != 0:
                            fut.set_exception(_error(status, message))
                        else:
                            fut.set_result(None)

                _ops[op_id] = completed
                status = _c.on_loop.dlock_lock_set_value_async(self._h, data, len(data), _DONE_CB,
                                                               op_id)
                if status != 0:
                    _ops.pop(op_id, None)
                    raise _error(status)
        await self._settle(fut, False)

    def _release_async_quietly(self):
        """Releases without waiting and without raising (for holds nobody wants)."""
        h, slot, lc = self._take()
        if h:
            if lc is not None:
                _give_back_on(lc, h, slot)
            else:
                _give_back(h, slot)

    # -- asyncio

    async def aacquire(self, blocking: Optional[bool] = None,
                       timeout: Optional[_Seconds] = None) -> bool:
        """acquire() for asyncio: waits without blocking the event loop (and holds no thread:
        the library's async API). True once held, False when the wait ran out. Cancelling the
        awaiting task cancels the acquire; on_lost runs on this event loop."""
        return await self._aacquire(self._wait_arg(blocking, timeout), False)

    async def _aacquire(self, wait_ms, must, guard_on_lost=None):
        """guard_on_lost: a callback(lock) of guard()'s, run on the loop before the user's."""
        self._client._check_process()
        loop = asyncio.get_running_loop()
        on_lost = self._spec.on_lost
        if guard_on_lost is not None:
            if on_lost is None:
                on_lost = guard_on_lost
            else:  # one loop callback: the user's runs right after the cancel, before the task
                def on_lost(lock, _guard=guard_on_lost, _user=on_lost):
                    _guard(lock)
                    _user(lock)
        if not _use_async_c:
            return await self._aacquire_in_thread(loop, wait_ms, must, on_lost)
        lc = self._client._loop_client(loop)
        # On the loop's thread already, inside a dlock call: the user's callbacks run on the
        # loop's next turn, outside it.
        on_lost = _on_loop_later(loop.call_soon, on_lost)
        on_release = _on_loop_later(loop.call_soon, self._spec.on_release_requested)

        self._begin()
        try:
            opts, slot = self._spec.build(wait_ms, on_lost, True, on_release)
        except BaseException:
            self._end()
            raise
        fut = loop.create_future()
        op_id = next(_ids)

        def completed(status, handle, message):
            """On the loop's thread, inside dlock_loop_fd_ready (or the dlock call that ended
            it): settles fut at once, installing the hold in this object, or gives it back when
            the awaiting task is gone."""
            if fut.done():  # the awaiting task was cancelled meanwhile
                if status == 0:
                    _give_back_hooked(handle, slot)
                elif slot is not None:
                    slot.drop()
            elif status == 0:
                self._install(handle, slot, lc)
                fut.set_result(True)
            else:
                if slot is not None:
                    slot.drop()
                self._end()
                if status == NotAcquired.status and not must:
                    fut.set_result(False)
                else:
                    fut.set_exception(_error(status, message))

        _ops[op_id] = completed
        err = None
        try:
            try:
                status = _c.on_loop.dlock_acquire_async(lc.h, self._bname, opts, _ACQUIRE_CB, op_id)
                if status != 0:
                    err = _error(status)
            finally:
                if opts:
                    _c.dlock_options_free(opts)
        except BaseException:
            err = sys.exc_info()[1]
        if err is not None:
            if _ops.pop(op_id, None) is not None:
                if slot is not None:
                    slot.drop()
                self._end()
            raise err
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # granted, but the task was cancelled before it resumed: nobody holds it
                if fut.exception() is None and fut.result():
                    self._release_async_quietly()
            else:
                fut.cancel()  # completed() gives back what comes later
                self._end()
                if lc.h and op_id in _ops:
                    # its done runs with DLOCK_ECANCELLED (or with the lock, given back)
                    _c.dlock_acquire_cancel(lc.h, op_id)
            raise

    async def _aacquire_in_thread(self, loop, wait_ms, must, on_lost):
        """The DLOCK_PY_FORCE_THREADS=1 path: a worker thread of its own waits in dlock_acquire
        (the sync API's client), and hands the outcome to the loop (a thread pool's workers
        could all end up waiting)."""
        on_lost = _on_loop_later(loop.call_soon_threadsafe, on_lost)
        on_release = _on_loop_later(loop.call_soon_threadsafe, self._spec.on_release_requested)

        fut = loop.create_future()

        def outcome(status, handle, slot, message):
            """From the worker: settles fut on its loop, installing the hold in this object,
            or giving it back when the awaiting task is gone. message: the exception."""
            def settle():
                if fut.done():  # the awaiting task was cancelled meanwhile
                    if status == 0:
                        _give_back(handle, slot)
                elif status == 0:
                    self._install(handle, slot)
                    fut.set_result(True)
                else:
                    self._end()
                    if status == NotAcquired.status and not must:
                        fut.set_result(False)
                    else:
                        fut.set_exception(message)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed
                self._end()
                if status == 0:
                    _give_back(handle, slot)

        self._begin()

        def run():
            try:
                h, slot = self._acquire_raw(wait_ms, on_lost, on_release=on_release)
            except NotAcquired as e:
                outcome(NotAcquired.status, None, None, e)
            except BaseException as e:  # delivered to the awaiting task
                outcome(-1, None, None, e)
            else:
                outcome(0, h, slot, None)

        threading.Thread(target=run, name="dlock-acquire", daemon=True).start()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                if fut.exception() is None and fut.result():
                    self._release_async_quietly()
            else:
                fut.cancel()  # settle() gives back what comes later
                self._end()
            raise

    async def _settle(self, fut, released):
        """Awaits the future of an async release, extend or set_value; a NotHeld it raises gets
        the hold's loss cause (released: read as the hold was let go)."""
        try:
            await fut
        except NotHeld as e:
            _with_cause(e, self._lost_cause if released else self.lost_cause)
            raise

    async def arelease(self) -> None:
        """release() without blocking the event loop."""
        loop = asyncio.get_running_loop()
        lc = self._lc
        if not _use_async_c or (lc is not None and lc.loop is not loop and not lc.closed):
            # the thread path; or a hold of another loop's client: released from a worker
            # thread while that loop runs
            return await loop.run_in_executor(None, self.release)
        h, slot, lc = self._take()
        if not h:
            raise self._not_held_error()
        fut = loop.create_future()
        op_id = next(_ids)

        if lc is None:  # acquired with the sync API: its client's queue
            def completed(status, handle, message):  # on the dlock-events thread
                if slot is not None:  # release is done: on_lost is neither running nor going to run
                    slot.drop()
                _deliver(loop, fut, status, None, message)

            _pending[op_id] = completed
            status = _c.dlock_release_queued(h, _queue_now(), op_id)
            if status != 0:  # only argument errors come back here; h was freed either way
                _pending.pop(op_id, None)
                if slot is not None:
                    slot.drop()
                raise _error(status)
            await self._settle(fut, True)
            return

        def completed_here(status, handle, message):  # on the loop's thread
            if slot is not None:
                slot.drop()
            if not fut.done():
                if status != 0:
                    fut.set_exception(_error(status, message))
                else:
                    fut.set_result(None)

        _ops[op_id] = completed_here
        status = _c.on_loop.dlock_release_async(h, _DONE_CB, op_id)
        if status != 0:  # a closed client (NOT_HELD at once, done not called); h is freed
            _ops.pop(op_id, None)
            if slot is not None:
                slot.drop()
            raise _error(status)
        await self._settle(fut, True)

    async def aextend(self, lease: Optional[_Seconds] = None, *,
                      lease_ms: Optional[int] = None) -> None:
        """extend() without blocking the event loop."""
        ms = self._extend_ms(lease, lease_ms)
        self._client._check_process()
        loop = asyncio.get_running_loop()
        lc = self._lc
        if not _use_async_c or (lc is not None and lc.loop is not loop and not lc.closed):
            return await loop.run_in_executor(None, lambda: self.extend(lease_ms=ms))
        fut = loop.create_future()
        op_id = next(_ids)
        with self._mu:
            if not self._h:
                raise self._not_held_error()
            lc = self._lc
            if lc is None:  # acquired with the sync API: its client's queue
                _pending[op_id] = (lambda status, handle, message:
                                   _deliver(loop, fut, status, None, message))
                status = _c.dlock_extend_queued(self._h, ms, _queue_now(), op_id)
                if status != 0:
                    _pending.pop(op_id, None)
                    raise _error(status)
            else:
                def completed(status, handle, message):  # on the loop's thread
                    if not fut.done():
                        if status != 0:
                            fut.set_exception(_error(status, message))
                        else:
                            fut.set_result(None)

                _ops[op_id] = completed
                status = _c.on_loop.dlock_extend_async(self._h, ms, _DONE_CB, op_id)
                if status != 0:
                    _ops.pop(op_id, None)
                    raise _error(status)
        await self._settle(fut, False)

    # -- context managers: acquire on entry, release on exit, every time

    def __enter__(self) -> "Lock":
        self._acquire(self._wait_ms, True, self._spec.on_lost)
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        if self._h is None:  # released inside the block
            return False
        try:
            self.release()
        except Error:
            if exc_type is None:
                raise  # a lost lock is never silent
        return False

    async def __aenter__(self) -> "Lock":
        await self._aacquire(self._wait_ms, True)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Literal[False]:
        if self._h is None:
            return False
        try:
            await self.arelease()
        except Error:
            if exc_type is None:
                raise
        return False

    def guard(self) -> _Guard:
        """`async with lock.guard():` acquires as `async with lock:` does, and cancels the task
        running the block if the lock is found lost while the block runs (on_lost: a heartbeat
        found it expired, deleted or taken over), so that a lost lock stops the work. Leaving
        the block releases it. The CancelledError the loss caused leaves the block as LockLost
        (a NotHeld), so the caller can tell it from any other cancellation: one from elsewhere
        goes on as CancelledError, and so does the block's own exception. on_lost= callbacks
        still run, after the cancel. For asyncio only (a thread cannot be cancelled); each
        `async with` takes a new lock.guard()."""
        return _Guard(self)

    def __await__(self) -> Generator[Any, None, "Lock"]:
        """`lock = await client.alock(...)`: acquires (as `async with` does) and returns it."""
        return self._await_acquired().__await__()

    async def _await_acquired(self) -> "Lock":
        await self._aacquire(self._wait_ms, True)
        return self

    def __del__(self) -> None:
        try:
            if self._h:
                if self._client._forked():  # the parent's hold: the parent releases it
                    self._h = self._slot = None
                    return
                warnings.warn(f"unreleased {self!r}", ResourceWarning, source=self)
                h, slot, lc = self._take(keep_cause=False)
                if h and lc is not None:  # its loop gives it back (no dlock call here)
                    try:
                        lc.loop.call_soon_threadsafe(_give_back_hooked, h, slot)
                    except RuntimeError:  # the loop is closed: left to expire
                        if slot is not None:
                            slot.drop()
                elif h:  # no dlock call here: see _orphans
                    _orphans.append((h, slot))
                    ev = _events_now  # made when the client opened, in this process
                    if ev is not None and ev.pid == os.getpid():
                        ev.wake()
        except Exception:
            pass

    def __repr__(self) -> str:
        if self._h is not None and self._client._forked():
            return f"<dlock.Lock {self.name!r} token={self._token} inherited across fork>"
        if self._h is None:
            return f"<dlock.Lock {self.name!r} {'acquiring' if self._busy else 'not held'}>"
        return f"<dlock.Lock {self.name!r} token={self._token} {'held' if self.valid else 'lost'}>"


# ----- LockGroup -------------------------------------------------------------------------------

class LockGroup(Sequence[Lock]):
    """Several locks taken together, all or none: what Client.lock_many(names, ...) returns, NOT
    acquired yet, and reusable, like a Lock. It is a sequence of its Lock objects, in the order
    the names were given:

        with client.lock_many(["acct/1", "acct/2"], timeout=5) as (src, dst):
            transfer(src.fencing_token, dst.fencing_token)

    acquire(blocking=True, timeout=-1) -> bool   takes every name, or none (dlock_acquire_many):
                   True once all are held, False when the wait ran out (or the one try of
                   blocking=False failed), and then nothing is held. No argument: the wait given
                   to client.lock_many(...), which bounds the whole call, not each name. The
                   names are taken in one fixed order (bytewise), whatever order they are given
                   in, so groups asking for {a, b} and {b, a} at once never deadlock.
    release()      releases every hold it still has, each one even when some were lost
                   (dlock_release_many); raises NotHeld naming each lost name if any was, and
                   NotHeld if it held nothing
    `with group as (a, b):`   acquires on entry (NotAcquired when the wait ran out, as
                   `with client.lock(...)`), releases on exit; a loss is never silent (NotHeld
                   on exit, unless the block is raising)
    aacquire(), arelease(), `async with`, `await group`   the same for asyncio (see alock_many)
    names, valid, released

    Each Lock is a Lock like any other, with its own fencing token, lease, heartbeats and
    on_lost: extend() or release() one alone (the group's release then skips it), read its
    fencing_token, valid and lost_cause. A loss is the loss of that name only; the others stay
    held until released.
    """

    __slots__ = ("_client", "_locks", "_spec", "_wait_ms", "__weakref__")

    def __init__(self, client: Client, locks: Tuple[Lock, ...], spec: _Spec, wait_ms: int) -> None:
        self._client = client
        self._locks = locks
        self._spec = spec
        self._wait_ms = wait_ms

    # -- the sequence

    @overload
    def __getitem__(self, index: int) -> Lock: ...

    @overload
    def __getitem__(self, index: slice) -> Tuple[Lock, ...]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Lock, Tuple[Lock, ...]]:
        return self._locks[index]

    def __len__(self) -> int:
        return len(self._locks)

    def __iter__(self) -> Iterator[Lock]:
        return iter(self._locks)

    # -- state

    @property
    def names(self) -> Tuple[_Name, ...]:
        """The names, as given, in that order."""
        return tuple(lock.name for lock in self._locks)

    @property
    def valid(self) -> bool:
        """True while every Lock of the group holds its name, validly (Lock.valid)."""
        return all(lock.valid for lock in self._locks)

    @property
    def released(self) -> bool:
        """True while no Lock of the group holds anything."""
        return all(lock.released for lock in self._locks)

    def __repr__(self) -> str:
        names = [lock.name for lock in self._locks]
        if self.released:
            state = "not held"
        elif all(lock._h is not None for lock in self._locks):
            state = "held" if self.valid else "held, some lost"
        else:
            state = "partly held"
        return f"<dlock.LockGroup {names!r} {state}>"

    # -- acquire

    def _begin(self):
        begun = []
        try:
            for lock in self._locks:
                lock._begin()
                begun.append(lock)
        except AlreadyHeld:
            for lock in begun:
                lock._end()
            lock = self._locks[len(begun)]
            raise AlreadyHeld(
                f"lock {lock.name!r} of this LockGroup is held (or being acquired) by its Lock "
                "object already: release it (or the group) first. A group takes every name or "
                "none; threads and tasks that each want the names take their own "
                "client.lock_many(names)") from None
        except BaseException:
            for lock in begun:
                lock._end()
            raise

    def _end(self):
        for lock in self._locks:
            lock._end()

    def _acquire_raw(self, wait_ms, on_lost):
        """dlock_acquire_many: (the handles, in the names' order; the on_lost _GroupSlot or
        None), or raises; the Locks are left alone."""
        bnames = [lock._bname for lock in self._locks]
        n = len(bnames)
        slot = None
        opts = None
        err = None
        out = (_lib.c_lock_p * n)()
        try:
            opts, _ = self._spec.build(wait_ms, None)
            if on_lost is not None:
                if not opts:
                    opts = _c.dlock_options_new()
                    if not opts:
                        raise MemoryError("dlock_options_new")
                # One options object, so one tag for every name: the _GroupSlot hands each loss
                # to the Lock its entry names.
                slot = _GroupSlot(on_lost, bnames)
                _check(_c.dlock_options_set_on_lost_queued(opts, _queue_now(), slot.id))
            names = (ctypes.c_char_p * n)(*bnames)
            h = self._client._enter()
            try:
                status = _c.dlock_acquire_many(h, names, n, opts, out)
                if status != 0:
                    err = _error(status)  # this thread's message: read it at once
            finally:
                self._client._leave()
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
        return [out[k] for k in range(n)], slot

    def _install(self, handles, slot):
        for k, (lock, h) in enumerate(zip(self._locks, handles)):
            lock._install(h, slot.members[k][1] if slot is not None else None)

    def _give_back(self, handles, slot):
        """Releases holds nobody wants (an acquire whose awaiting task is gone), without waiting
        or raising."""
        for k, h in enumerate(handles):
            _give_back(h, slot.members[k][1] if slot is not None else None)

    def acquire(self, blocking: Optional[bool] = None, timeout: Optional[_Seconds] = None) -> bool:
        """Acquires every name, or none: True once all are held; False when the wait ran out
        (blocking=True, timeout=S seconds for the whole call; -1 = no limit) or the one try
        failed (blocking=False), and then none is held. With no argument, waits as
        client.lock_many(...) said (by default without limit). Raises AlreadyHeld if a Lock of
        the group holds its name already, and the library's errors (ConnectionError, ...)."""
        return self._acquire(_acquire_wait(self._wait_ms, blocking, timeout), False)

    def _acquire(self, wait_ms, must):
        self._client._check_process()
        self._begin()
        try:
            handles, slot = self._acquire_raw(wait_ms, self._spec.on_lost)
        except NotAcquired:
            self._end()
            if must:
                raise
            return False
        except BaseException:
            self._end()
            raise
        self._install(handles, slot)
        return True

    # -- release

    def _take(self):
        """Takes every hold out of its Lock: [(lock, handle, slot)], in the names' order."""
        for lock in self._locks:
            lc = lock._lc  # a hold one Lock took alone through asyncio, since
            if lock._h and lc is not None and not lc.blocking_ok():
                raise _not_on_loop(lock, lc, "release")
        taken = []
        for lock in self._locks:
            h, slot, _ = lock._take()
            if h:
                taken.append((lock, h, slot))
        return taken

    def release(self) -> None:
        """Releases every hold the group still has (one released alone is skipped), each one
        even when others fail (dlock_release_many). Raises NotHeld when some hold had been lost
        (expired, taken over, broken, released by Client.close): its message names each lost
        name, and the others were released all the same; or NotHeld when the group held
        nothing. Every Lock holds nothing afterwards either way, and the group may acquire
        again."""
        taken = self._take()
        if not taken:
            raise NotHeld(f"none of the locks {[lock.name for lock in self._locks]!r} is held by "
                          "this LockGroup (never acquired, or already released)")
        n = len(taken)
        handles = (_lib.c_lock_p * n)(*(h for _, h, _ in taken))
        status = _c.dlock_release_many(handles, n)
        err = _error(status) if status != 0 else None
        for _, _, slot in taken:  # released: on_lost is neither running nor going to run
            if slot is not None:
                slot.drop()
        if err is not None:
            causes = [lock._lost_cause for lock, _, _ in taken if lock._lost_cause]
            raise _with_cause(err, causes[0] if causes else None)

    def _release_quietly(self):
        """Releases without waiting and without raising (for holds nobody wants)."""
        for lock in self._locks:
            lock._release_async_quietly()

    # -- asyncio

    async def aacquire(self, blocking: Optional[bool] = None,
                       timeout: Optional[_Seconds] = None) -> bool:
        """acquire() for asyncio, without blocking the event loop: the library has no
        asynchronous dlock_acquire_many, so a worker thread of its own waits in it (on the
        blocking API's client, whose dlock-events thread hands on_lost to this loop). True once
        all are held, False when the wait ran out. Cancelling the awaiting task returns at once
        and acquires nothing, but the worker stays in the library until its call returns
        (within the wait: with no limit, until it gets every name) and then gives back what it
        got."""
        return await self._aacquire(_acquire_wait(self._wait_ms, blocking, timeout), False)

    async def _aacquire(self, wait_ms, must):
        self._client._check_process()
        loop = asyncio.get_running_loop()
        on_lost = _on_loop_later(loop.call_soon_threadsafe, self._spec.on_lost)
        fut = loop.create_future()

        def outcome(handles, slot, error):
            """From the worker: settles fut on its loop, installing the holds in the Locks,
            or giving them back when the awaiting task is gone."""
            def settle():
                if fut.done():  # the awaiting task was cancelled meanwhile
                    if handles is not None:
                        self._give_back(handles, slot)
                elif handles is not None:
                    self._install(handles, slot)
                    fut.set_result(True)
                else:
                    self._end()
                    if isinstance(error, NotAcquired) and not must:
                        fut.set_result(False)
                    else:
                        fut.set_exception(error)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed
                self._end()
                if handles is not None:
                    self._give_back(handles, slot)

        def run():
            try:
                handles, slot = self._acquire_raw(wait_ms, on_lost)
            except BaseException as e:  # delivered to the awaiting task
                outcome(None, None, e)
            else:
                outcome(handles, slot, None)

        self._begin()
        try:
            threading.Thread(target=run, name="dlock-acquire-many", daemon=True).start()
        except BaseException:
            self._end()
            raise
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # granted, but the task was cancelled before it resumed: nobody holds them
                if fut.exception() is None and fut.result():
                    self._release_quietly()
            else:
                fut.cancel()  # settle() gives back what comes later
                self._end()
            raise

    async def arelease(self) -> None:
        """release() without blocking the event loop (dlock_release_many on the loop's default
        executor)."""
        await asyncio.get_running_loop().run_in_executor(None, self.release)

    # -- context managers: acquire on entry, release on exit, every time

    def __enter__(self) -> "LockGroup":
        self._acquire(self._wait_ms, True)
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        if self.released:  # released inside the block
            return False
        try:
            self.release()
        except Error:
            if exc_type is None:
                raise  # a lost lock is never silent
        return False

    async def __aenter__(self) -> "LockGroup":
        await self._aacquire(self._wait_ms, True)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Literal[False]:
        if self.released:
            return False
        try:
            await self.arelease()
        except Error:
            if exc_type is None:
                raise
        return False

    def __await__(self) -> Generator[Any, None, "LockGroup"]:
        """`a, b = await client.alock_many([...])`: acquires (as `async with` does) and returns
        the group."""
        return self._await_acquired().__await__()

    async def _await_acquired(self) -> "LockGroup":
        await self._aacquire(self._wait_ms, True)
        return self


# ----- logging -----------------------------------------------------------------------------------

_EVENT_LEVELS = {"acquiring": logging.DEBUG, "acquired": logging.DEBUG,
                 "released": logging.DEBUG, "not_acquired": logging.INFO,
                 "renewal_failed": logging.WARNING, "lost": logging.ERROR}


def _event_text(e: Event) -> Tuple[str, Tuple[object, ...]]:
    """A log message for e, as a format and its arguments (logging formats it when emitted)."""
    why = (f"{e.code}: {e.detail}" if e.detail else str(e.code)) if e.status else ""
    tries = f"{e.attempts} attempt{'' if e.attempts == 1 else 's'}"
    if e.type == "acquiring":
        return "dlock: acquiring %r", (e.name,)
    if e.type == "acquired":
        return ("dlock: acquired %r, fencing token %s (%s, waited %.3f s)",
                (e.name, e.fencing_token, tries, e.elapsed))
    if e.type == "not_acquired":
        return ("dlock: did not acquire %r (%s, waited %.3f s): %s",
                (e.name, tries, e.elapsed, why))
    if e.type == "released":
        if e.status:
            return "dlock: release of %r (fencing token %s) failed: %s", (e.name, e.fencing_token, why)
        return ("dlock: released %r, fencing token %s (held %.3f s)",
                (e.name, e.fencing_token, e.elapsed))
    if e.type == "renewal_failed":
        return ("dlock: renewal of %r (fencing token %s) failed after %.3f s, retried until the "
                "lease runs out: %s", (e.name, e.fencing_token, e.elapsed, why))
    if e.type == "lost":
        return ("dlock: lost %r, fencing token %s (held %.3f s): %s",
                (e.name, e.fencing_token, e.elapsed, e.detail))
    return "dlock: %s %r: %s", (e.type, e.name, why or e.detail)


def log_events(client: Client, logger: Optional[logging.Logger] = None, *,
               levels: Optional[Mapping[str, int]] = None) -> Callable[[Event], None]:
    """Logs client's events (Client.on_event) through `logger` (default
    logging.getLogger("dlock")), one record per event, e.g. "dlock: acquired 'jobs/nightly',
    fencing token 42 (1 attempt, waited 0.003 s)". Levels: DEBUG for acquiring, acquired and
    released, INFO for not_acquired, WARNING for renewal_failed, ERROR for lost; an acquire that
    ended in an error, or a release that did not answer OK, at WARNING at least. `levels`
    ({"acquired": logging.INFO, ...}) changes some. Each record carries the event in its
    attributes (for structured formatters and filters): dlock_event (the type), dlock_lock (the
    name), dlock_attempts, dlock_elapsed, dlock_fencing_token, dlock_status, dlock_code,
    dlock_detail, dlock_cause. Returns the handler: client.off_event(handler) stops it.

    It logs on the thread the event ran on (see Client.on_event), so the logger's handlers
    must be quick: put a slow one (a network, a remote service) behind a
    logging.handlers.QueueHandler."""
    if logger is None:
        logger = logging.getLogger("dlock")
    table = dict(_EVENT_LEVELS)
    if levels is not None:
        for key, value in levels.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"levels[{key!r}] must be a logging level (int), "
                                f"not {type(value).__name__}")
            table[key] = value
    quiet = (0, NotAcquired.status, Cancelled.status)  # outcomes, not errors
    log = logger.log
    enabled = logger.isEnabledFor

    def log_event(event: Event) -> None:
        level = table.get(event.type, logging.INFO)
        if (level < logging.WARNING and event.status not in quiet
                and event.type in ("not_acquired", "released")):
            level = logging.WARNING
        if not enabled(level):
            return
        msg, args = _event_text(event)
        log(level, msg, *args, extra={
            "dlock_event": event.type, "dlock_lock": event.name,
            "dlock_attempts": event.attempts, "dlock_elapsed": event.elapsed,
            "dlock_fencing_token": event.fencing_token, "dlock_status": event.status,
            "dlock_code": event.code, "dlock_detail": event.detail, "dlock_cause": event.cause})

    return client.on_event(log_event)
