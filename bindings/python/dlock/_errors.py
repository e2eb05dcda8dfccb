"""Exceptions: one class per dlock_status, all under dlock.Error."""

import builtins


class Error(Exception):
    """A dlock call failed.

    status  the dlock_status number (e.g. 2)
    code    its name as the C library spells it (e.g. "DLOCK_NOT_HELD")
    str(e)  dlock_last_error()'s message: what went wrong, naming the argument or address
    """

    status = None
    code = None

    def __init__(self, message="", status=None, code=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    @property
    def message(self):
        return self.args[0] if self.args else ""


class NotAcquired(Error):
    """Someone else holds the lock and the wait ran out (DLOCK_NOT_ACQUIRED)."""
    status, code = 1, "DLOCK_NOT_ACQUIRED"


class NotHeld(Error):
    """Release/extend of a lock that expired, was taken over, or was already released
    (DLOCK_NOT_HELD)."""
    status, code = 2, "DLOCK_NOT_HELD"


class InvalidArgument(Error, ValueError):
    """Bad argument, URL or option (DLOCK_EINVAL). Also a ValueError."""
    status, code = 3, "DLOCK_EINVAL"


class ConnectionError(Error, builtins.ConnectionError):  # noqa: A001 (shadows the builtin on purpose)
    """Cannot reach the backend, or it timed out (DLOCK_EIO). Also the builtin ConnectionError."""
    status, code = 4, "DLOCK_EIO"

    def __init__(self, message="", status=None, code=None):
        # builtins.ConnectionError is an OSError: give it one argument so str(e) is the message.
        Error.__init__(self, message, status, code)


class BackendError(Error):
    """The backend answered with an error or garbage (DLOCK_EBACKEND)."""
    status, code = 5, "DLOCK_EBACKEND"


class AuthError(Error):
    """Credentials refused (DLOCK_EAUTH)."""
    status, code = 6, "DLOCK_EAUTH"


class Cancelled(Error):
    """A pending acquire was cancelled, e.g. by closing its client (DLOCK_ECANCELLED)."""
    status, code = 7, "DLOCK_ECANCELLED"


class OutOfMemory(Error, MemoryError):
    """The library ran out of memory (DLOCK_ENOMEM). Also a MemoryError."""
    status, code = 8, "DLOCK_ENOMEM"


class InternalError(Error):
    """A bug inside the library (DLOCK_EINTERNAL)."""
    status, code = 9, "DLOCK_EINTERNAL"


BY_STATUS = {
    cls.status: cls
    for cls in (NotAcquired, NotHeld, InvalidArgument, ConnectionError, BackendError, AuthError,
                Cancelled, OutOfMemory, InternalError)
}


def make(status, message, code=None):
    """The exception for a dlock_status number (unknown numbers give a plain Error)."""
    cls = BY_STATUS.get(status, Error)
    if not message:
        message = code or (cls.code if cls is not Error else f"dlock status {status}")
    return cls(message, status=status, code=code or cls.code)
