"""Stand-in for opentelemetry.trace.span (opentelemetry-api 1.x): the Span interface,
SpanContext (an immutable tuple with is_valid), NonRecordingSpan and INVALID_SPAN."""

import abc
import types as python_types
from typing import Any, Mapping, Optional, Sequence, Type, Union

from opentelemetry.trace.status import Status, StatusCode

Attributes = Optional[Mapping[str, Any]]


class Span(abc.ABC):
    @abc.abstractmethod
    def end(self, end_time: Optional[int] = None) -> None:
        """Ends the span (only the first call counts)."""

    @abc.abstractmethod
    def get_span_context(self) -> "SpanContext":
        """The span's SpanContext."""

    @abc.abstractmethod
    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Sets attributes."""

    @abc.abstractmethod
    def set_attribute(self, key: str, value: Any) -> None:
        """Sets one attribute."""

    @abc.abstractmethod
    def add_event(self, name: str, attributes: Attributes = None,
                  timestamp: Optional[int] = None) -> None:
        """Adds an event."""

    def add_link(self, context: "SpanContext", attributes: Attributes = None) -> None:
        """Adds a link (no-op in the API's base class)."""

    @abc.abstractmethod
    def update_name(self, name: str) -> None:
        """Renames the span."""

    @abc.abstractmethod
    def is_recording(self) -> bool:
        """Whether the span records."""

    @abc.abstractmethod
    def set_status(self, status: Union[Status, StatusCode],
                   description: Optional[str] = None) -> None:
        """Sets the span's status."""

    @abc.abstractmethod
    def record_exception(self, exception: BaseException, attributes: Attributes = None,
                         timestamp: Optional[int] = None, escaped: bool = False) -> None:
        """Records an exception as a span event."""

    def __enter__(self) -> "Span":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc_val: Optional[BaseException],
                 exc_tb: Optional[python_types.TracebackType]) -> None:
        self.end()


class TraceFlags(int):
    DEFAULT = 0x00
    SAMPLED = 0x01

    @classmethod
    def get_default(cls) -> "TraceFlags":
        return cls(cls.DEFAULT)

    @property
    def sampled(self) -> bool:
        return bool(self & TraceFlags.SAMPLED)


DEFAULT_TRACE_OPTIONS = TraceFlags.get_default()


class TraceState(tuple):  # the real one is a Mapping; nothing here reads it
    @classmethod
    def get_default(cls) -> "TraceState":
        return cls()


DEFAULT_TRACE_STATE = TraceState.get_default()
INVALID_SPAN_ID = 0x0000000000000000
INVALID_TRACE_ID = 0x00000000000000000000000000000000
_TRACE_ID_MAX_VALUE = 2**128 - 1
_SPAN_ID_MAX_VALUE = 2**64 - 1


class SpanContext(tuple):
    def __new__(cls, trace_id: int, span_id: int, is_remote: bool,
                trace_flags: Optional[TraceFlags] = DEFAULT_TRACE_OPTIONS,
                trace_state: Optional[TraceState] = DEFAULT_TRACE_STATE) -> "SpanContext":
        if trace_flags is None:
            trace_flags = DEFAULT_TRACE_OPTIONS
        if trace_state is None:
            trace_state = DEFAULT_TRACE_STATE
        is_valid = (INVALID_TRACE_ID < trace_id <= _TRACE_ID_MAX_VALUE
                    and INVALID_SPAN_ID < span_id <= _SPAN_ID_MAX_VALUE)
        return tuple.__new__(cls, (trace_id, span_id, is_remote, trace_flags, trace_state,
                                   is_valid))

    @property
    def trace_id(self) -> int:
        return self[0]  # type: ignore[no-any-return]

    @property
    def span_id(self) -> int:
        return self[1]  # type: ignore[no-any-return]

    @property
    def is_remote(self) -> bool:
        return self[2]  # type: ignore[no-any-return]

    @property
    def trace_flags(self) -> TraceFlags:
        return self[3]  # type: ignore[no-any-return]

    @property
    def trace_state(self) -> TraceState:
        return self[4]  # type: ignore[no-any-return]

    @property
    def is_valid(self) -> bool:
        return self[5]  # type: ignore[no-any-return]

    def __setattr__(self, *args: str) -> None:
        pass  # immutable (the real one logs at debug level)

    def __repr__(self) -> str:
        return f"SpanContext(trace_id=0x{self.trace_id:032x}, span_id=0x{self.span_id:016x})"


class NonRecordingSpan(Span):
    def __init__(self, context: SpanContext) -> None:
        self._context = context

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return False

    def end(self, end_time: Optional[int] = None) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Attributes = None,
                  timestamp: Optional[int] = None) -> None:
        pass

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def set_status(self, status: Union[Status, StatusCode],
                   description: Optional[str] = None) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Attributes = None,
                         timestamp: Optional[int] = None, escaped: bool = False) -> None:
        pass

    def __repr__(self) -> str:
        return f"NonRecordingSpan({self._context!r})"


INVALID_SPAN_CONTEXT = SpanContext(trace_id=INVALID_TRACE_ID, span_id=INVALID_SPAN_ID,
                                   is_remote=False, trace_flags=DEFAULT_TRACE_OPTIONS,
                                   trace_state=DEFAULT_TRACE_STATE)
INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)
