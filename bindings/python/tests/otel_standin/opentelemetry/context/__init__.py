"""Stand-in for opentelemetry.context (opentelemetry-api 1.x): the contextvars runtime context,
create_key, get_value, set_value, get_current, attach, detach (which logs, never raises, when the
token belongs to another context, as the real one does)."""

import logging
from contextvars import ContextVar, Token
from typing import Optional
from uuid import uuid4

from opentelemetry.context.context import Context, _RuntimeContext

logger = logging.getLogger(__name__)


class ContextVarsRuntimeContext(_RuntimeContext):
    _CONTEXT_KEY = "current_context"

    def __init__(self) -> None:
        self._current_context = ContextVar(self._CONTEXT_KEY, default=Context())

    def attach(self, context: Context) -> "Token[Context]":
        return self._current_context.set(context)

    def get_current(self) -> Context:
        return self._current_context.get()

    def detach(self, token: "Token[Context]") -> None:
        self._current_context.reset(token)


_RUNTIME_CONTEXT = ContextVarsRuntimeContext()


def create_key(keyname: str) -> str:
    return keyname + "-" + str(uuid4())


def get_value(key: str, context: Optional[Context] = None) -> object:
    return context.get(key) if context is not None else get_current().get(key)


def set_value(key: str, value: object, context: Optional[Context] = None) -> Context:
    if context is None:
        context = get_current()
    new_values = context.copy()
    new_values[key] = value
    return Context(new_values)


def get_current() -> Context:
    return _RUNTIME_CONTEXT.get_current()


def attach(context: Context) -> "Token[Context]":
    return _RUNTIME_CONTEXT.attach(context)


def detach(token: "Token[Context]") -> None:
    try:
        _RUNTIME_CONTEXT.detach(token)
    except Exception:  # noqa: BLE001 (as the real API: logged, never raised)
        logger.exception("Failed to detach context")


__all__ = ["Context", "attach", "create_key", "detach", "get_current", "get_value", "set_value"]
