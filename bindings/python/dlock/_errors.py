"""Exceptions: one class per dlock_status, all under dlock.Error.

Each class names its status by number (dlock.h: numbers never change); its `code` string is the
library's own name for that number (dlock_status_str), filled in by name_codes() when the library
is loaded. A status this binding has no class for (one a newer library added) is a plain Error
carrying the library's name for it."""

import builtins
import re
from typing import Callable, Dict, Optional, Type


class Error(Exception):
    """A dlock call failed.

    status  the dlock_status number (e.g. 2)
    code    its name as the C library spells it (e.g. "DLOCK_NOT_HELD")
    str(e)  dlock_last_error()'s message: what went wrong, naming the argument or address
    """

    status: Optional[int] = None
    code: Optional[str] = None

    def __init__(self, message: str = "", status: Optional[int] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return self.args[0] if self.args else ""  # type: ignore[no-any-return]


class NotAcquired(Error, builtins.TimeoutError):
    """Someone else holds the lock and the wait ran out (DLOCK_NOT_ACQUIRED). Also the builtin
    TimeoutError."""
    status = 1

    def __init__(self, message: str = "", status: Optional[int] = None,
                 code: Optional[str] = None) -> None:
        # builtins.TimeoutError is an OSError: give it one argument so str(e) is the message.
        Error.__init__(self, message, status, code)


class NotHeld(Error, RuntimeError):  # threading.Lock.release() of an unheld lock: RuntimeError
    """Release/extend of a lock that expired, was taken over, or was already released
    (DLOCK_NOT_HELD).

    cause  why the hold was lost, as a stable code: "deleted" (the server no longer had this
           owner's lock, and nobody held it: deleted, or its lease ran out on the server),
           "taken_over" (another owner holds it now), "refused" (the server no longer had this
           owner's lock, and looking again failed or still listed this hold), "expired"
           (renewals failed until the local deadline), "max_hold" (the max_hold= option's
           time passed: renewals stopped, and the lease ran out) or "broken" (an operator broke
           the lock: Client.break_lock); None when this object held nothing, or
           the cause is not known (see Lock.lost_cause for the details)
    """
    status = 2
    cause: Optional[str] = None

    def __init__(self, message: str = "", status: Optional[int] = None,
                 code: Optional[str] = None, cause: Optional[str] = None) -> None:
        super().__init__(message, status, code)
        if cause is None:
            # The library's message says "lock 'NAME' was lost: CAUSE: details": what a release
            # that freed the lock leaves to read.
            found = _LOST_CAUSE.search(message)
            cause = found.group(1) if found else None
        if cause is not None:
            self.cause = cause


_LOST_CAUSE = re.compile(r"' was lost: (deleted|taken_over|refused|expired|max_hold|broken): ")


class InvalidArgument(Error, ValueError):
    """Bad argument, URL or option (DLOCK_EINVAL). Also a ValueError."""
    status = 3


class ConnectionError(Error, builtins.ConnectionError):  # noqa: A001 (dlock.ConnectionError)
    """Cannot reach the backend, or it timed out (DLOCK_EIO). Also the builtin ConnectionError.
    Not in __all__: `from dlock import *` leaves the builtin ConnectionError alone (which
    catches this one too); say dlock.ConnectionError."""
    status = 4

    def __init__(self, message: str = "", status: Optional[int] = None,
                 code: Optional[str] = None) -> None:
        # builtins.ConnectionError is an OSError: give it one argument so str(e) is the message.
        Error.__init__(self, message, status, code)


class BackendError(Error):
    """The backend answered with an error or garbage (DLOCK_EBACKEND)."""
    status = 5


class AuthError(Error):
    """Credentials refused (DLOCK_EAUTH)."""
    status = 6


class Cancelled(Error):
    """A pending acquire was cancelled, e.g. by closing its client (DLOCK_ECANCELLED)."""
    status = 7


class OutOfMemory(Error, MemoryError):
    """The library ran out of memory (DLOCK_ENOMEM). Also a MemoryError."""
    status = 8


class InternalError(Error):
    """A bug inside the library (DLOCK_EINTERNAL)."""
    status = 9


class LockLost(NotHeld):
    """The lock was found lost while a block guarded by `async with lock.guard():` ran, and the
    guard cancelled the block: the CancelledError it caused becomes this, so that the caller can
    tell a lost lock from any other cancellation. A NotHeld (status DLOCK_NOT_HELD); its cause
    says why ("deleted", "taken_over", "refused", "expired", "max_hold" or "broken"), and its message the
    details."""


class ForkedClient(Error, RuntimeError):
    """A Client (or a Lock of it) used in a process forked from the one that opened it. Its
    connections and background thread stay with the parent: open a new Client in the child.
    No library status: raised by the binding. Also a RuntimeError."""


class AlreadyHeld(Error, RuntimeError):
    """acquire() on a Lock object that holds its lock already, or is acquiring it (a Lock is
    not reentrant). No library status: raised by the binding. Also a RuntimeError."""


BY_STATUS: Dict[int, Type[Error]] = {
    cls.status: cls  # type: ignore[misc]  # each of these classes has a status
    for cls in (NotAcquired, NotHeld, InvalidArgument, ConnectionError, BackendError, AuthError,
                Cancelled, OutOfMemory, InternalError)
}


def name_codes(status_name: Callable[[int], str]) -> None:
    """Sets each class's code to status_name(its status): the library's name for it."""
    for status, cls in BY_STATUS.items():
        cls.code = status_name(status)


def make(status: int, message: str, code: str) -> Error:
    """The exception for a dlock_status number and the library's name for it (code); numbers
    without a class give a plain Error. An empty message becomes the code."""
    cls = BY_STATUS.get(status, Error)
    return cls(message or code, status=status, code=code)
