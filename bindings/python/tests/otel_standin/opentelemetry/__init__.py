"""A test-only stand-in for the part of opentelemetry-api (1.x) that dlock.otel uses.

The real package is not installable where the suite runs (no registry, and Debian has no
python3-opentelemetry), so tests/test_otel.py puts tests/otel_standin on sys.path, for its own
tests only. Module paths, names and signatures follow opentelemetry-python's
opentelemetry-api/src/opentelemetry (trace/__init__.py, trace/span.py, trace/status.py,
trace/propagation/__init__.py, context/__init__.py, context/context.py,
context/contextvars_context.py); behaviour is the API's own where dlock.otel relies on it (the
global ProxyTracerProvider, the no-op tracer, contextvars-based context, attach/detach, Status
rules), and nothing else is here. The recording "SDK" the tests read spans from is
tests/otel_standin/otel_testing.py, not part of this package, as the real SDK is another
distribution (opentelemetry-sdk).
"""
