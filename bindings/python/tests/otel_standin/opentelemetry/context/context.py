"""Stand-in for opentelemetry.context.context (opentelemetry-api 1.x): Context, an immutable
dict."""

from abc import ABC, abstractmethod
from contextvars import Token
from typing import Dict, Tuple


class Context(Dict[str, object]):
    def __setitem__(self, key: str, value: object) -> None:
        raise ValueError

    def __delitem__(self, key: str) -> None:
        raise ValueError

    def setdefault(self, key: str, default: object = None) -> object:  # type: ignore[override]
        raise ValueError

    def pop(self, key: str, *args: object) -> object:  # type: ignore[override]
        raise ValueError

    def popitem(self) -> Tuple[str, object]:
        raise ValueError

    def clear(self) -> None:
        raise ValueError

    def update(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        raise ValueError


class _RuntimeContext(ABC):
    @abstractmethod
    def attach(self, context: Context) -> "Token[Context]":
        """Sets the current Context; returns a token to reset it."""

    @abstractmethod
    def get_current(self) -> Context:
        """The current Context."""

    @abstractmethod
    def detach(self, token: "Token[Context]") -> None:
        """Resets the Context to what it was before attach."""


__all__ = ["Context"]
