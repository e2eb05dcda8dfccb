"""Stand-in for opentelemetry.trace.propagation (opentelemetry-api 1.x): the current span's
context key, set_span_in_context and get_current_span."""

from typing import Optional

from opentelemetry.context import create_key, get_value, set_value
from opentelemetry.context.context import Context
from opentelemetry.trace.span import INVALID_SPAN, Span

SPAN_KEY = "current-span"
_SPAN_KEY = create_key("current-span")


def set_span_in_context(span: Span, context: Optional[Context] = None) -> Context:
    return set_value(_SPAN_KEY, span, context=context)


def get_current_span(context: Optional[Context] = None) -> Span:
    span = get_value(_SPAN_KEY, context=context)
    if span is None or not isinstance(span, Span):
        return INVALID_SPAN
    return span
