"""Stand-in for opentelemetry.trace (opentelemetry-api 1.x), with the real module's names and
signatures for what it keeps: Link, SpanKind, TracerProvider, Tracer, the global provider (a
ProxyTracerProvider until set_tracer_provider, which works once), the no-op tracer, get_tracer,
use_span, get_current_span, set_span_in_context, Status, StatusCode."""

import logging
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from enum import Enum
from typing import Any, Iterator, Mapping, Optional, Sequence

from opentelemetry import context as context_api
from opentelemetry.context.context import Context
from opentelemetry.trace.propagation import _SPAN_KEY, get_current_span, set_span_in_context
from opentelemetry.trace.span import (DEFAULT_TRACE_OPTIONS, DEFAULT_TRACE_STATE, INVALID_SPAN,
                                      INVALID_SPAN_CONTEXT, INVALID_SPAN_ID, INVALID_TRACE_ID,
                                      NonRecordingSpan, Span, SpanContext, TraceFlags,
                                      TraceState)
from opentelemetry.trace.status import Status, StatusCode

logger = logging.getLogger(__name__)
Attributes = Optional[Mapping[str, Any]]


class Link:
    def __init__(self, context: SpanContext, attributes: Attributes = None) -> None:
        self._context = context
        self._attributes = attributes

    @property
    def context(self) -> SpanContext:
        return self._context

    @property
    def attributes(self) -> Attributes:
        return self._attributes


_Links = Optional[Sequence[Link]]


class SpanKind(Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class TracerProvider(ABC):
    @abstractmethod
    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: Optional[str] = None,
                   schema_url: Optional[str] = None, attributes: Attributes = None) -> "Tracer":
        """A Tracer for the instrumentation scope named."""


class Tracer(ABC):
    @abstractmethod
    def start_span(self, name: str, context: Optional[Context] = None,
                   kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes = None,
                   links: _Links = None, start_time: Optional[int] = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> Span:
        """Starts a span, not made current; its parent is the span in context (default: the
        current context's)."""

    @contextmanager
    def start_as_current_span(self, name: str, context: Optional[Context] = None,
                              kind: SpanKind = SpanKind.INTERNAL,
                              attributes: Attributes = None, links: _Links = None,
                              start_time: Optional[int] = None, record_exception: bool = True,
                              set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[Span]:
        # (abstract in the real API; the SDK's does this)
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        with use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                      set_status_on_exception=set_status_on_exception) as s:
            yield s


class NoOpTracer(Tracer):
    def start_span(self, name: str, context: Optional[Context] = None,
                   kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes = None,
                   links: _Links = None, start_time: Optional[int] = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> Span:
        current_span = get_current_span(context)
        if isinstance(current_span, NonRecordingSpan):
            return current_span
        return NonRecordingSpan(context=current_span.get_span_context())


class NoOpTracerProvider(TracerProvider):
    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: Optional[str] = None,
                   schema_url: Optional[str] = None, attributes: Attributes = None) -> Tracer:
        return NoOpTracer()


class ProxyTracer(Tracer):
    def __init__(self, instrumenting_module_name: str,
                 instrumenting_library_version: Optional[str] = None,
                 schema_url: Optional[str] = None, attributes: Attributes = None):
        self._instrumenting_module_name = instrumenting_module_name
        self._instrumenting_library_version = instrumenting_library_version
        self._schema_url = schema_url
        self._attributes = attributes
        self._real_tracer: Optional[Tracer] = None
        self._noop_tracer = NoOpTracer()

    @property
    def _tracer(self) -> Tracer:
        if self._real_tracer:
            return self._real_tracer
        if _TRACER_PROVIDER:
            self._real_tracer = _TRACER_PROVIDER.get_tracer(
                self._instrumenting_module_name, self._instrumenting_library_version,
                self._schema_url, self._attributes)
            return self._real_tracer
        return self._noop_tracer

    def start_span(self, *args: Any, **kwargs: Any) -> Span:  # type: ignore[override]
        return self._tracer.start_span(*args, **kwargs)


class ProxyTracerProvider(TracerProvider):
    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: Optional[str] = None,
                   schema_url: Optional[str] = None, attributes: Attributes = None) -> Tracer:
        if _TRACER_PROVIDER:
            return _TRACER_PROVIDER.get_tracer(instrumenting_module_name,
                                               instrumenting_library_version, schema_url,
                                               attributes)
        return ProxyTracer(instrumenting_module_name, instrumenting_library_version,
                           schema_url, attributes)


_TRACER_PROVIDER: Optional[TracerProvider] = None
_TRACER_PROVIDER_LOCK = threading.Lock()
_PROXY_TRACER_PROVIDER = ProxyTracerProvider()


def get_tracer(instrumenting_module_name: str,
               instrumenting_library_version: Optional[str] = None,
               tracer_provider: Optional[TracerProvider] = None,
               schema_url: Optional[str] = None, attributes: Attributes = None) -> Tracer:
    if tracer_provider is None:
        tracer_provider = get_tracer_provider()
    return tracer_provider.get_tracer(instrumenting_module_name, instrumenting_library_version,
                                      schema_url, attributes)


def set_tracer_provider(tracer_provider: TracerProvider) -> None:
    global _TRACER_PROVIDER
    with _TRACER_PROVIDER_LOCK:
        if _TRACER_PROVIDER is not None:
            logger.warning("Overriding of current TracerProvider is not allowed")
            return
        _TRACER_PROVIDER = tracer_provider


def get_tracer_provider() -> TracerProvider:
    if _TRACER_PROVIDER is None:  # (the real one also reads OTEL_PYTHON_TRACER_PROVIDER)
        return _PROXY_TRACER_PROVIDER
    return _TRACER_PROVIDER


@contextmanager
def use_span(span: Span, end_on_exit: bool = False, record_exception: bool = True,
             set_status_on_exception: bool = True) -> Iterator[Span]:
    try:
        token = context_api.attach(context_api.set_value(_SPAN_KEY, span))
        try:
            yield span
        finally:
            context_api.detach(token)
    except Exception as exc:  # noqa: BLE001 (as the real API: Exception, not BaseException)
        if isinstance(span, Span) and span.is_recording():
            if record_exception:
                span.record_exception(exc)
            if set_status_on_exception:
                span.set_status(Status(status_code=StatusCode.ERROR,
                                       description=f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if end_on_exit:
            span.end()


__all__ = [
    "DEFAULT_TRACE_OPTIONS", "DEFAULT_TRACE_STATE", "INVALID_SPAN", "INVALID_SPAN_CONTEXT",
    "INVALID_SPAN_ID", "INVALID_TRACE_ID", "NonRecordingSpan", "Link", "Span", "SpanContext",
    "SpanKind", "TraceFlags", "TraceState", "TracerProvider", "Tracer", "get_current_span",
    "get_tracer", "get_tracer_provider", "set_tracer_provider", "set_span_in_context",
    "use_span", "Status", "StatusCode",
]
