"""OpenTelemetry spans for dlock's acquires and holds (issue 36).

    import dlock, dlock.otel

    dlock.otel.instrument()            # once, at start-up (or DlockInstrumentor().instrument())
    client = dlock.Client("redis://127.0.0.1:6379")
    with client.lock("reports/nightly") as lock:   # a 'dlock.acquire' span, then 'dlock.hold',
        write(lock.fencing_token)                  # which is the current span in the block

The spans are made here, in the binding, around the calls, and not from the library's events
(Client.on_event): an acquire's parent is the span current where the call is made (the
caller's thread, or its asyncio task), and that is known only around the call.

  dlock.acquire   each acquire: Lock.acquire(), `with lock:`, Client.acquire(), campaign(), and
                  the asyncio ones (aacquire(), `async with lock:`, `await client.alock()`,
                  `async with lock.guard():`, acampaign()), from the call to its outcome; a
                  child of the span current at the call.
  dlock.hold      a held lock, from the acquire's end to its release (release(), arelease(),
                  leaving the block), its loss (found by a heartbeat, an extend or the release),
                  its client's close(), or the garbage collector's release of a Lock dropped
                  while held. A sibling of the acquire span (the same parent) linked to it; with
                  no span current at the acquire, the acquire span's child (one trace all the
                  same). `with lock:`, `async with lock:` and `async with lock.guard():` run
                  their block with it current, so the spans the work starts are its children.

Attributes: dlock.lock.name, dlock.lock.kind ("exclusive", "shared", "semaphore"),
dlock.lock.permits (semaphores), dlock.backend (the URL's scheme: never the URL, which may
hold a password), on the acquire span dlock.operation ("acquire", "campaign") and
dlock.acquire.wait_ms (-1: without limit), and at its end dlock.outcome ("acquired",
"not_acquired", "cancelled", "error") and, once acquired, dlock.acquire.attempts and
dlock.lock.fencing_token (a decimal string, as a token is a uint64); the hold span has the
lock's attributes and token, and at its end dlock.outcome ("released", "lost", "closed",
"collected", "error") and, for a loss, dlock.lost_cause ("deleted", "taken_over", "refused",
"expired", "max_hold", "broken": lock.lost_cause's code). Both are INTERNAL spans. Their status follows the trace
API's rules for libraries: left UNSET when all went well; ERROR when an acquire failed (a wait
that ran out too, and acquire(blocking=False) returning False) or a hold was lost or its
release failed, with the error's message as the description, the dlock.Error's code
("DLOCK_NOT_ACQUIRED", "DLOCK_NOT_HELD", ...; else the exception class's name) as error.type,
and the exception recorded as an event. These are the Node binding's spans
(bindings/node/lib/tracing.js), name for name.

opentelemetry-api (1.x) is never a dependency of dlock: it is imported by the first
instrument(), not by `import dlock.otel`. Without it, instrument() warns once
(DlockTracingWarning) and makes no spans; locks work as before. The spans go to the global
TracerProvider (your SDK's, even when it is set after instrument()), or to tracer_provider=.

How it hooks in: as opentelemetry-instrumentation packages do, by wrapping methods of
dlock.Lock and dlock.Client (their internal acquire and release paths, so that each call is
traced once however it was made). The wrappers are put in place by the first instrument() and
stay: uninstrument() stops new spans at once (the wrappers then pass through, at the cost of
one check per call), and a hold whose span was started still ends it. While instrumented,
each acquire gives the library a loss callback (as on_lost= does), so that a loss ends the
hold span when it is found; your own on_lost runs after, as before. A span call that raises
(a broken SDK) is logged on the "dlock.otel" logger and costs the lock call nothing.

Tested with a stand-in of the opentelemetry-api surface used here (tests/otel_standin, with
the real API's module paths and signatures), not with the real package, which could not be
installed where this was written.
"""

import asyncio
import contextvars
import functools
import importlib
import logging
import os
import threading
import warnings
import weakref
from typing import Any, Callable, Collection, Dict, Optional, Tuple

from . import Cancelled, Client, Error, Lock, NotAcquired, NotHeld, __version__
from . import _Guard

__all__ = ["DlockInstrumentor", "DlockTracingWarning", "instrument", "uninstrument",
           "is_instrumented", "INSTRUMENTATION_NAME", "INSTRUMENTATION_VERSION"]

INSTRUMENTATION_NAME = "libdlock"  # the tracer's (instrumentation scope's) name, as in Node
INSTRUMENTATION_VERSION = __version__

_log = logging.getLogger(__name__)


class DlockTracingWarning(UserWarning):
    """instrument() was called, but opentelemetry-api cannot be imported: no spans are made."""


# ----- the API, imported on first use ------------------------------------------------------------

class _Api:
    __slots__ = ("trace", "context", "Link", "SpanKind", "Status", "StatusCode")

    def __init__(self, trace: Any, context: Any) -> None:
        self.trace, self.context = trace, context
        self.Link, self.SpanKind = trace.Link, trace.SpanKind
        self.Status, self.StatusCode = trace.Status, trace.StatusCode


_api: Optional[_Api] = None
_api_missing = False  # tried, and it cannot be imported (told once)


def _load_api() -> Optional[_Api]:
    global _api, _api_missing
    if _api is None and not _api_missing:
        try:
            # (not an import statement: type checkers need not find opentelemetry either)
            trace = importlib.import_module("opentelemetry.trace")
            context = importlib.import_module("opentelemetry.context")
            _api = _Api(trace, context)
        except Exception as e:  # noqa: BLE001 (ImportError, or a broken install)
            _api_missing = True
            warnings.warn(
                f"dlock.otel.instrument() was called, but opentelemetry-api cannot be imported "
                f"({type(e).__name__}: {e}): no spans are made. Install it in the application "
                f"(pip install opentelemetry-api, version 1)", DlockTracingWarning, stacklevel=4)
    return _api


# ----- what the wrappers read --------------------------------------------------------------------

class _Active:
    """The instrumentation making spans now."""

    __slots__ = ("api", "tracer", "require_parent")

    def __init__(self, api: _Api, tracer: Any, require_parent: bool) -> None:
        self.api, self.tracer, self.require_parent = api, tracer, require_parent


_active: Optional[_Active] = None   # None: no new spans (one check per call)
# _holds, a _Pending's fields, _Hold.ended. Reentrant: the garbage collector may run
# _collected (a weakref callback) on a thread that holds it.
_mu = threading.RLock()


class _Hold:
    """A hold's open 'dlock.hold' span."""

    __slots__ = ("api", "span", "ref", "client", "pid", "ended", "__weakref__")

    def __init__(self, api: _Api, span: Any, client: Client) -> None:
        self.api, self.span = api, span
        self.client = weakref.ref(client)
        self.pid = os.getpid()
        self.ended = False
        self.ref: Any = None  # weakref.ref(lock, ...): the span ends if the Lock is collected


_holds: Dict[int, _Hold] = {}        # id(lock) -> its hold's open span
_blocks: Dict[int, Tuple[Any, Any]] = {}  # id(lock) -> (api, context token): a block runs under it
_campaign = contextvars.ContextVar("dlock_otel_campaign", default=False)  # acampaign() is waiting


class _Pending:
    """One traced acquire: its hold once made, or that a loss came first."""

    __slots__ = ("hold", "lost")

    def __init__(self) -> None:
        self.hold: Optional[_Hold] = None
        self.lost = False


def _span_error(what: str) -> None:
    _log.warning("dlock.otel: a span call raised while %s; the lock call goes on untraced",
                 what, exc_info=True)


# ----- attributes --------------------------------------------------------------------------------

def _name_text(name: Any) -> str:
    return name if isinstance(name, str) else bytes(name).decode("utf-8", "replace")


def _lock_attributes(lock: Lock) -> Dict[str, Any]:
    spec = lock._spec
    attrs: Dict[str, Any] = {"dlock.lock.name": _name_text(lock.name)}
    if spec.permits:
        attrs["dlock.lock.kind"] = "semaphore"
        attrs["dlock.lock.permits"] = spec.permits
    else:
        attrs["dlock.lock.kind"] = spec.kind or "exclusive"
    url = lock._client._burl
    colon = url.find(b":")
    if colon > 0:  # the scheme only: never the URL (a password, an address)
        attrs["dlock.backend"] = url[:colon].decode("ascii", "replace").lower()
    return attrs


def _error_type(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if isinstance(exc, Error) and isinstance(code, str) and code:
        return code
    return type(exc).__qualname__


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, NotAcquired):
        return "not_acquired"
    if isinstance(exc, (Cancelled, asyncio.CancelledError)):
        return "cancelled"
    return "error"


def _failed(api: _Api, span: Any, exc: BaseException) -> None:
    span.set_attribute("error.type", _error_type(exc))
    span.record_exception(exc)
    span.set_status(api.Status(api.StatusCode.ERROR, str(exc) or type(exc).__qualname__))


def _has_parent(api: _Api, ctx: Any) -> bool:
    return bool(api.trace.get_current_span(ctx).get_span_context().is_valid)


# ----- acquire -----------------------------------------------------------------------------------

def _start_acquire(act: _Active, lock: Lock, wait_ms: int, campaign: bool,
                   ctx: Any) -> Any:
    """The 'dlock.acquire' span (None: not traced)."""
    api = act.api
    try:
        if act.require_parent and not _has_parent(api, ctx):
            return None
        attrs = _lock_attributes(lock)
        attrs["dlock.operation"] = "campaign" if campaign else "acquire"
        attrs["dlock.acquire.wait_ms"] = int(wait_ms)
        return act.tracer.start_span("dlock.acquire", context=ctx, kind=api.SpanKind.INTERNAL,
                                     attributes=attrs)
    except Exception:  # noqa: BLE001
        _span_error("starting a dlock.acquire span")
        return None


def _acquire_failed(api: _Api, span: Any, exc: BaseException) -> None:
    try:
        span.set_attribute("dlock.outcome", _outcome(exc))
        _failed(api, span, exc)
        span.end()
    except Exception:  # noqa: BLE001
        _span_error("ending a dlock.acquire span")


def _acquired(act: _Active, span: Any, lock: Lock, ctx: Any, pending: _Pending) -> None:
    """Ends the acquire span, starts the hold's."""
    api = act.api
    try:
        token = str(lock.fencing_token)
        span.set_attribute("dlock.outcome", "acquired")
        span.set_attribute("dlock.acquire.attempts", lock.attempts)
        span.set_attribute("dlock.lock.fencing_token", token)
        span.end()
        attrs = _lock_attributes(lock)
        attrs["dlock.lock.fencing_token"] = token
        # A sibling of the acquire span under the caller's span; under the acquire span when
        # the caller had none (one trace all the same). Linked to the acquire span either way.
        parent = ctx if _has_parent(api, ctx) else api.trace.set_span_in_context(span, ctx)
        hold_span = act.tracer.start_span("dlock.hold", context=parent,
                                          kind=api.SpanKind.INTERNAL, attributes=attrs,
                                          links=[api.Link(span.get_span_context())])
    except Exception:  # noqa: BLE001 (a tracer that raises must not cost the caller its lock)
        _span_error("ending dlock.acquire or starting dlock.hold")
        return
    hold = _Hold(api, hold_span, lock._client)
    key = id(lock)
    hold.ref = weakref.ref(lock, functools.partial(_collected, key, weakref.ref(hold)))
    with _mu:
        stale = _holds.get(key)
        _holds[key] = hold
        pending.hold = hold
        lost = pending.lost
    if stale is not None:  # a hold that ended by a path not traced (none known)
        _end_hold(stale, "released")
    if lost:  # the loss came before the hold span existed
        _end_lost(hold, lock)


def _lost_callback(pending: _Pending, then: Optional[Callable[[Lock], object]]
                   ) -> Callable[[Lock], None]:
    """The on_lost a traced acquire gives the library: ends the hold span, then runs `then`
    (the user's on_lost, or guard()'s), whose exceptions go where they went before."""
    def on_lost(lock: Lock) -> None:
        try:
            with _mu:
                hold = pending.hold
                if hold is None:
                    pending.lost = True
            if hold is not None:
                _end_lost(hold, lock)
        except Exception:  # noqa: BLE001
            _span_error("ending a lost hold's span")
        if then is not None:
            then(lock)
    return on_lost


# ----- the end of a hold -------------------------------------------------------------------------

def _take_hold(hold: _Hold) -> bool:
    """Marks hold ended (once); True for the caller that should end its span."""
    with _mu:
        if hold.ended:
            return False
        hold.ended = True
        lock = hold.ref() if hold.ref is not None else None
        key = id(lock) if lock is not None else None
        if key is not None and _holds.get(key) is hold:
            del _holds[key]
        else:  # its Lock is gone: find it by value
            for k, v in list(_holds.items()):
                if v is hold:
                    del _holds[k]
    return hold.pid == os.getpid()  # never end a parent's span in a forked child


def _end_hold(hold: _Hold, outcome: str, exc: Optional[BaseException] = None,
              cause: Optional[str] = None) -> None:
    if not _take_hold(hold):
        return
    try:
        span = hold.span
        span.set_attribute("dlock.outcome", outcome)
        if cause:
            span.set_attribute("dlock.lost_cause", cause)
        if exc is not None:
            _failed(hold.api, span, exc)
        span.end()
    except Exception:  # noqa: BLE001
        _span_error("ending a dlock.hold span")


def _end_lost(hold: _Hold, lock: Lock) -> None:
    """Ends hold as lost, found by the library (on_lost): its cause from lock.lost_cause."""
    cause_text = None
    try:
        cause_text = lock.lost_cause
    except Exception:  # noqa: BLE001 (a forked child: ForkedClient)
        pass
    code = cause_text.split(":", 1)[0] if cause_text else None
    token = lock.fencing_token
    message = (f"lock {lock.name!r}" + (f" (fencing token {token})" if token is not None else "")
               + f" was lost: {cause_text or 'no longer held'}")
    _end_hold(hold, "lost", NotHeld(message, cause=code), code)


def _after_release(lock: Lock, hold: _Hold, exc: Optional[BaseException]) -> None:
    """A release (sync or asyncio) of the hold's lock ended: with exc, or fine."""
    if exc is None:
        _end_hold(hold, "released")
    elif isinstance(exc, NotHeld):  # lost before the release reached the server
        _end_hold(hold, "lost", exc, exc.cause)
    elif isinstance(exc, asyncio.CancelledError):  # the release was sent: the library ends it
        if lock._h is None:
            _end_hold(hold, "released")
    elif isinstance(exc, Exception) and lock._h is None:  # let go, but the release failed
        _end_hold(hold, "error", exc)
    # else: refused before anything was let go (InvalidArgument, ForkedClient): still held


def _collected(key: int, hold_ref: "weakref.ReferenceType[_Hold]", _ref: Any) -> None:
    """The Lock of a traced hold was garbage collected (its __del__ released it)."""
    hold = hold_ref()
    if hold is not None and not hold.ended:
        _end_hold(hold, "collected")


def _hold_of(lock: Lock) -> Optional[_Hold]:
    return _holds.get(id(lock)) if _holds else None


# ----- blocks run under the hold span ------------------------------------------------------------

def _enter_block(lock: Lock) -> None:
    hold = _hold_of(lock)
    if hold is None or hold.ended:
        return
    try:
        api = hold.api
        token = api.context.attach(api.trace.set_span_in_context(hold.span))
    except Exception:  # noqa: BLE001
        _span_error("making dlock.hold current")
        return
    _blocks[id(lock)] = (api, token)


def _leave_block(lock: Lock) -> None:
    if not _blocks:
        return
    entry = _blocks.pop(id(lock), None)
    if entry is not None:
        api, token = entry
        api.context.detach(token)  # (the API's detach logs, never raises)


# ----- the wrappers ------------------------------------------------------------------------------

_wrapped = False


def _wrap() -> None:
    """Puts the wrappers in place (once; they stay)."""
    global _wrapped
    if _wrapped:
        return
    _wrapped = True

    # (Any: the originals are the binding's, unannotated)
    orig_acquire: Any = Lock._acquire
    orig_aacquire: Any = Lock._aacquire
    orig_release: Any = Lock.release
    orig_arelease: Any = Lock.arelease
    orig_quietly: Any = Lock._release_async_quietly
    orig_enter: Any = Lock.__enter__
    orig_exit: Any = Lock.__exit__
    orig_aenter: Any = Lock.__aenter__
    orig_aexit: Any = Lock.__aexit__
    orig_guard_aenter: Any = _Guard.__aenter__
    orig_guard_aexit: Any = _Guard.__aexit__
    orig_close: Any = Client._close
    orig_acampaign: Any = Client.acampaign

    @functools.wraps(orig_acquire)
    def _acquire(self: Lock, wait_ms: int, must: bool, on_lost: Any,
                 campaign: bool = False) -> bool:
        act = _active
        if act is None:
            return bool(orig_acquire(self, wait_ms, must, on_lost, campaign=campaign))
        ctx = act.api.context.get_current()
        span = _start_acquire(act, self, wait_ms, campaign, ctx)
        if span is None:
            return bool(orig_acquire(self, wait_ms, must, on_lost, campaign=campaign))
        pending = _Pending()
        try:
            # must=True: a wait that ran out is a NotAcquired here (with its message), turned
            # back into False below when the caller asked for that
            orig_acquire(self, wait_ms, True, _lost_callback(pending, on_lost), campaign=campaign)
        except NotAcquired as e:
            _acquire_failed(act.api, span, e)
            if must:
                raise
            return False
        except BaseException as e:
            _acquire_failed(act.api, span, e)
            raise
        _acquired(act, span, self, ctx, pending)
        return True

    @functools.wraps(orig_aacquire)
    async def _aacquire(self: Lock, wait_ms: int, must: bool, guard_on_lost: Any = None) -> bool:
        act = _active
        campaign = _campaign.get()
        if campaign:
            _campaign.set(False)  # for this acquire only (acampaign() resets it after)
        if act is None:
            return bool(await orig_aacquire(self, wait_ms, must, guard_on_lost))
        ctx = act.api.context.get_current()
        span = _start_acquire(act, self, wait_ms, campaign, ctx)
        if span is None:
            return bool(await orig_aacquire(self, wait_ms, must, guard_on_lost))
        pending = _Pending()
        try:
            await orig_aacquire(self, wait_ms, True, _lost_callback(pending, guard_on_lost))
        except NotAcquired as e:
            _acquire_failed(act.api, span, e)
            if must:
                raise
            return False
        except BaseException as e:
            _acquire_failed(act.api, span, e)
            raise
        _acquired(act, span, self, ctx, pending)
        return True

    @functools.wraps(orig_release)
    def release(self: Lock) -> None:
        hold = _hold_of(self)
        if hold is None:
            orig_release(self)
            return
        try:
            orig_release(self)
        except BaseException as e:
            _after_release(self, hold, e)
            raise
        _after_release(self, hold, None)

    @functools.wraps(orig_arelease)
    async def arelease(self: Lock) -> None:
        hold = _hold_of(self)
        if hold is None:
            await orig_arelease(self)
            return
        try:
            await orig_arelease(self)
        except BaseException as e:
            _after_release(self, hold, e)
            raise
        _after_release(self, hold, None)

    @functools.wraps(orig_quietly)
    def _release_async_quietly(self: Lock) -> None:
        hold = _hold_of(self)
        orig_quietly(self)
        if hold is not None and self._h is None:
            _end_hold(hold, "released")

    @functools.wraps(orig_enter)
    def __enter__(self: Lock) -> Lock:
        result: Lock = orig_enter(self)
        _enter_block(self)
        return result

    @functools.wraps(orig_exit)
    def __exit__(self: Lock, *exc: Any) -> Any:
        _leave_block(self)
        return orig_exit(self, *exc)

    @functools.wraps(orig_aenter)
    async def __aenter__(self: Lock) -> Lock:
        result: Lock = await orig_aenter(self)
        _enter_block(self)
        return result

    @functools.wraps(orig_aexit)
    async def __aexit__(self: Lock, *exc: Any) -> Any:
        _leave_block(self)
        return await orig_aexit(self, *exc)

    @functools.wraps(orig_guard_aenter)
    async def guard_aenter(self: Any) -> Lock:
        result: Lock = await orig_guard_aenter(self)
        _enter_block(self._lock)
        return result

    @functools.wraps(orig_guard_aexit)
    async def guard_aexit(self: Any, *exc: Any) -> Any:
        _leave_block(self._lock)
        return await orig_guard_aexit(self, *exc)

    @functools.wraps(orig_close)
    def _close(self: Client, *args: Any, **kwargs: Any) -> None:
        orig_close(self, *args, **kwargs)
        if not _holds or not self._closed:
            return
        with _mu:
            holds = list(_holds.values())  # (a copy first: _collected may run meanwhile)
        for hold in holds:
            if hold.client() is self:  # released by the close
                _end_hold(hold, "closed")

    @functools.wraps(orig_acampaign)
    async def acampaign(self: Client, *args: Any, **kwargs: Any) -> Lock:
        token = _campaign.set(True)
        try:
            lock: Lock = await orig_acampaign(self, *args, **kwargs)
            return lock
        finally:
            _campaign.reset(token)

    setattr(Lock, "_acquire", _acquire)
    setattr(Lock, "_aacquire", _aacquire)
    setattr(Lock, "release", release)
    setattr(Lock, "arelease", arelease)
    setattr(Lock, "_release_async_quietly", _release_async_quietly)
    setattr(Lock, "__enter__", __enter__)
    setattr(Lock, "__exit__", __exit__)
    setattr(Lock, "__aenter__", __aenter__)
    setattr(Lock, "__aexit__", __aexit__)
    setattr(_Guard, "__aenter__", guard_aenter)
    setattr(_Guard, "__aexit__", guard_aexit)
    setattr(Client, "_close", _close)
    setattr(Client, "acampaign", acampaign)


# ----- the instrumentor --------------------------------------------------------------------------

# What OpenTelemetry's instrumentation machinery passes to instrument() (BaseInstrumentor's
# and the auto-instrumentation distros' keywords): taken and ignored.
_IGNORED = frozenset({"skip_dep_check", "raise_exception_on_conflict", "meter_provider",
                      "logger_provider", "event_logger_provider"})


class DlockInstrumentor:
    """dlock's OpenTelemetry instrumentation, shaped like opentelemetry-instrumentation's
    BaseInstrumentor (which it does not subclass: that package is not needed): one instance
    per process (DlockInstrumentor() returns it), instrument(**kwargs) and uninstrument(),
    is_instrumented_by_opentelemetry, instrumentation_dependencies().

    instrument(tracer_provider=None, require_parent_span=False): spans to tracer_provider, or
    the global TracerProvider when None (an SDK set later included); require_parent_span=True
    makes no spans for an acquire made outside any span. Calling it while instrumented logs a
    warning and changes nothing (uninstrument() first), as BaseInstrumentor does. Keywords of
    OpenTelemetry's own machinery (skip_dep_check, raise_exception_on_conflict,
    meter_provider, logger_provider, event_logger_provider) are taken and ignored; any other
    is a TypeError. Without opentelemetry-api it warns once (DlockTracingWarning) and
    instruments nothing.
    """

    _instance: "Optional[DlockInstrumentor]" = None
    _instance_mu = threading.RLock()  # the instance, and instrument()/uninstrument()

    def __new__(cls) -> "DlockInstrumentor":
        with cls._instance_mu:
            if cls._instance is None:
                cls._instance = super().__new__(cls)
            return cls._instance

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """Whether acquires make spans now."""
        return _active is not None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The instrumented packages' requirements: none (dlock instruments itself)."""
        return ()

    def instrument(self, **kwargs: Any) -> None:
        global _active
        tracer_provider = kwargs.pop("tracer_provider", None)
        require_parent_span = kwargs.pop("require_parent_span", False)
        unknown = sorted(k for k in kwargs if k not in _IGNORED)
        if unknown:
            raise TypeError(f"instrument() got unexpected keyword argument(s) "
                            f"{', '.join(unknown)} (it takes tracer_provider and "
                            "require_parent_span)")
        if tracer_provider is not None and not callable(getattr(tracer_provider, "get_tracer",
                                                                None)):
            raise TypeError("tracer_provider must be an OpenTelemetry TracerProvider (with "
                            f"get_tracer()), not {type(tracer_provider).__name__}")
        if not isinstance(require_parent_span, bool):
            raise TypeError("require_parent_span must be a bool, not "
                            f"{type(require_parent_span).__name__}")
        with self._instance_mu:
            if _active is not None:
                _log.warning("Attempting to instrument while already instrumented")
                return
            api = _load_api()
            if api is None:
                return
            tracer = api.trace.get_tracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION,
                                          tracer_provider)
            _wrap()
            _active = _Active(api, tracer, require_parent_span)

    def uninstrument(self, **kwargs: Any) -> None:
        """Stops making spans: acquires from now on have none (a hold whose span was started
        still ends it)."""
        global _active
        with self._instance_mu:
            if _active is None:
                _log.warning("Attempting to uninstrument while already uninstrumented")
                return
            _active = None


def instrument(*, tracer_provider: Any = None, require_parent_span: bool = False) -> None:
    """DlockInstrumentor().instrument(...): spans for every acquire and hold from now on."""
    DlockInstrumentor().instrument(tracer_provider=tracer_provider,
                                   require_parent_span=require_parent_span)


def uninstrument() -> None:
    """DlockInstrumentor().uninstrument(): no new spans from now on."""
    DlockInstrumentor().uninstrument()


def is_instrumented() -> bool:
    """Whether acquires make spans now."""
    return _active is not None
