"""A minimal recording SDK over the opentelemetry stand-in, for tests/test_otel.py (what
opentelemetry-sdk's TracerProvider with an InMemorySpanExporter would give): a TracerProvider
that keeps every span it starts, in order, with its parent, links, attributes, events, status
and how many times end() was called. Attribute values are checked as the SDK checks them
(str, bool, int, float, or a sequence of one of those): others are kept in `invalid`, which
the tests expect empty."""

import itertools
import threading
import time
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from opentelemetry import trace
from opentelemetry.context.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.span import Span, SpanContext, TraceFlags

_ids = itertools.count(1)
_VALID = (str, bool, int, float)


def _valid(value: Any) -> bool:
    if isinstance(value, _VALID):
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, _VALID) for v in value) and len({type(v) for v in value}) <= 1
    return False


class RecordingSpan(Span):
    def __init__(self, tracer: "RecordingTracer", name: str, parent: Optional[SpanContext],
                 kind: SpanKind, attributes: Optional[Mapping[str, Any]],
                 links: Optional[Sequence[Link]]) -> None:
        self.tracer = tracer
        self.name = name
        self.parent = parent
        trace_id = parent.trace_id if parent is not None else next(_ids)
        self.context = SpanContext(trace_id, next(_ids), False, TraceFlags(TraceFlags.SAMPLED))
        self.kind = kind
        self.attributes: Dict[str, Any] = {}
        self.invalid: List[Tuple[str, Any]] = []
        self.links = list(links or ())
        self.events: List[Tuple[str, Dict[str, Any]]] = []
        self.status = Status(StatusCode.UNSET)
        self.ends = 0
        self.started_at = time.monotonic_ns()
        self.ended_at: Optional[int] = None
        self.thread = threading.get_ident()
        self._mu = threading.Lock()
        if attributes:
            self.set_attributes(attributes)

    @property
    def ended(self) -> bool:
        return self.ends > 0

    def end(self, end_time: Optional[int] = None) -> None:
        with self._mu:
            self.ends += 1
            if self.ends == 1:
                self.ended_at = time.monotonic_ns()

    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for k, v in attributes.items():
            self.set_attribute(k, v)

    def set_attribute(self, key: str, value: Any) -> None:
        if self.ends:
            return  # the SDK ignores (and logs) writes to an ended span
        if not isinstance(key, str) or not key or not _valid(value):
            self.invalid.append((key, value))
            return
        self.attributes[key] = value

    def add_event(self, name: str, attributes: Optional[Mapping[str, Any]] = None,
                  timestamp: Optional[int] = None) -> None:
        if not self.ends:
            self.events.append((name, dict(attributes or {})))

    def update_name(self, name: str) -> None:
        self.name = name

    def is_recording(self) -> bool:
        return not self.ends

    def set_status(self, status: Union[Status, StatusCode],
                   description: Optional[str] = None) -> None:
        if self.ends or self.status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            self.status = status
        else:
            self.status = Status(status, description)

    def record_exception(self, exception: BaseException,
                         attributes: Optional[Mapping[str, Any]] = None,
                         timestamp: Optional[int] = None, escaped: bool = False) -> None:
        attrs = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(
                type(exception), exception, exception.__traceback__)),
            "exception.escaped": str(escaped),
        }
        attrs.update(attributes or {})
        self.add_event("exception", attrs)

    def __repr__(self) -> str:
        return f"<RecordingSpan {self.name} ends={self.ends} {self.attributes}>"


class RecordingTracer(trace.Tracer):
    def __init__(self, provider: "RecordingTracerProvider", name: str,
                 version: Optional[str]) -> None:
        self.provider = provider
        self.scope = (name, version)

    def start_span(self, name: str, context: Optional[Context] = None,
                   kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Optional[Mapping[str, Any]] = None,
                   links: Optional[Sequence[Link]] = None, start_time: Optional[int] = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        span = RecordingSpan(self, name, parent if parent.is_valid else None, kind, attributes,
                             links)
        with self.provider.mu:
            self.provider.spans.append(span)
        return span


class RecordingTracerProvider(trace.TracerProvider):
    def __init__(self) -> None:
        self.spans: List[RecordingSpan] = []
        self.mu = threading.Lock()
        self.tracers: List[Tuple[str, Optional[str]]] = []

    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: Optional[str] = None,
                   schema_url: Optional[str] = None,
                   attributes: Optional[Mapping[str, Any]] = None) -> trace.Tracer:
        self.tracers.append((instrumenting_module_name, instrumenting_library_version))
        return RecordingTracer(self, instrumenting_module_name, instrumenting_library_version)

    def named(self, name: str) -> List[RecordingSpan]:
        with self.mu:
            return [s for s in self.spans if s.name == name]

    def clear(self) -> None:
        with self.mu:
            self.spans.clear()
