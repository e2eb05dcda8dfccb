"""OpenTelemetry spans (issue 36): dlock.otel makes a 'dlock.acquire' span around each acquire,
a child of the caller's current span, and a 'dlock.hold' span from the acquire to the release,
the loss, the client's close or the collection of the Lock.

opentelemetry-api cannot be installed here, so these tests run against a stand-in of the part
of its surface that dlock.otel uses (tests/otel_standin/opentelemetry: the real API's module
paths and signatures) and a minimal recording SDK (tests/otel_standin/otel_testing.py), put on
sys.path by this module only, and taken off again after it. Two tests run a fresh interpreter:
one without any opentelemetry (instrument() warns once, no spans, locks work), one checking
that `import dlock.otel` imports no opentelemetry until instrument().
"""

import asyncio
import gc
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import unittest
import uuid
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")  # bindings/python
STANDIN = os.path.join(HERE, "otel_standin")
sys.path.insert(0, ROOT)
import dlock  # noqa: E402
import dlock.otel  # noqa: E402  (imports no opentelemetry)

PORT = os.environ.get("REDIS_PORT")
URL = f"redis://127.0.0.1:{PORT}"
# A password in the URL (the throwaway server has none, so any is accepted for the default
# user): no span may show it, nor the address.
SECRET = "s3cret-in-url"
SECRET_URL = f"redis://default:{SECRET}@127.0.0.1:{PORT}"

trace = context = otel_testing = None  # the stand-in's modules, imported by setUpModule
INTERNAL = UNSET = ERROR = None
global_provider = None


def setUpModule():
    global trace, context, otel_testing, INTERNAL, UNSET, ERROR, global_provider
    if not PORT:
        raise unittest.SkipTest("REDIS_PORT is not set (run bindings/test.sh python)")
    sys.path.insert(0, STANDIN)
    from opentelemetry import context as context_
    from opentelemetry import trace as trace_

    import otel_testing as otel_testing_
    trace, context, otel_testing = trace_, context_, otel_testing_
    INTERNAL = trace.SpanKind.INTERNAL
    UNSET, ERROR = trace.StatusCode.UNSET, trace.StatusCode.ERROR
    # The process's global TracerProvider (an SDK sets one): where an instrumentation without
    # a tracer_provider traces to.
    global_provider = otel_testing.RecordingTracerProvider()
    trace.set_tracer_provider(global_provider)


def tearDownModule():
    if dlock.otel.is_instrumented():
        dlock.otel.uninstrument()
    if STANDIN in sys.path:
        sys.path.remove(STANDIN)
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")
                 or m == "otel_testing"]:
        del sys.modules[name]


def cli(*args):
    out = subprocess.run(["redis-cli", "-p", PORT, *map(str, args)], capture_output=True,
                         text=True, check=True, timeout=10)
    return out.stdout.strip()


def unique(prefix="otel"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def key(name):
    return f"dlock:{{{name}}}"


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def run(coro_fn):
    return asyncio.run(asyncio.wait_for(coro_fn(), 30))


class Base(unittest.TestCase):
    def setUp(self):
        self.client = dlock.Client(SECRET_URL)
        self.addCleanup(self.client.close)

    def traced(self, **options):
        """Instruments with a provider of the test's own; uninstrumented at the test's end."""
        provider = otel_testing.RecordingTracerProvider()
        dlock.otel.instrument(tracer_provider=provider, **options)
        self.addCleanup(lambda: dlock.otel.is_instrumented() and dlock.otel.uninstrument())
        return provider

    def only(self, provider, name):
        found = provider.named(name)
        self.assertEqual(len(found), 1, f"{len(found)} {name} spans: {found}")
        return found[0]

    def exception_of(self, span):
        events = [attrs for name, attrs in span.events if name == "exception"]
        self.assertEqual(len(events), 1, f"{span.name}: {len(events)} exception events")
        return events[0]

    def assertClean(self, provider):
        """Every span ended once, with valid attributes, and none shows the URL."""
        for s in provider.spans:
            self.assertEqual(s.invalid, [], s)
        text = repr([(s.name, s.attributes, s.status.description, s.events)
                     for s in provider.spans])
        self.assertNotIn(SECRET, text)
        self.assertNotIn("127.0.0.1", text)
        self.assertNotIn(f":{PORT}", text)


class Spans(Base):
    def test_an_acquire_and_a_release(self):
        provider = self.traced()
        name = unique()
        lock = self.client.acquire(name, timeout=2, lease=5)
        acquire = self.only(provider, "dlock.acquire")
        self.assertEqual(acquire.tracer.scope, ("libdlock", dlock.__version__))
        self.assertEqual(acquire.kind, INTERNAL)
        self.assertIsNone(acquire.parent)  # no span was current: a root
        self.assertEqual(acquire.ends, 1)
        self.assertEqual(acquire.status.status_code, UNSET)  # success: left UNSET
        self.assertEqual(acquire.attributes, {
            "dlock.lock.name": name,
            "dlock.lock.kind": "exclusive",
            "dlock.backend": "redis",
            "dlock.operation": "acquire",
            "dlock.acquire.wait_ms": 2000,
            "dlock.outcome": "acquired",
            "dlock.acquire.attempts": 1,
            "dlock.lock.fencing_token": str(lock.fencing_token),
        })
        hold = self.only(provider, "dlock.hold")
        self.assertEqual(hold.kind, INTERNAL)
        self.assertFalse(hold.ended, "the hold span ended before the release")
        self.assertGreaterEqual(hold.started_at, acquire.ended_at)
        # With no span of the caller's, the hold is the acquire span's child, and linked to it.
        self.assertEqual(hold.parent, acquire.context)
        self.assertEqual(hold.context.trace_id, acquire.context.trace_id)
        self.assertEqual([link.context for link in hold.links], [acquire.context])

        token = lock.fencing_token
        lock.release()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.status.status_code, UNSET)
        self.assertEqual(hold.attributes, {
            "dlock.lock.name": name,
            "dlock.lock.kind": "exclusive",
            "dlock.backend": "redis",
            "dlock.lock.fencing_token": str(token),
            "dlock.outcome": "released",
        })
        with self.assertRaises(dlock.NotHeld):  # released already: the span stays as it was
            lock.release()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(len(provider.spans), 2)
        self.assertClean(provider)

    def test_with_block_runs_under_the_hold_span_of_a_sibling_of_acquire(self):
        provider = self.traced()
        tracer = provider.get_tracer("app")
        name = unique()
        with tracer.start_as_current_span("job") as job:
            with self.client.lock(name, lease=5) as lock:
                inside = trace.get_current_span()
                with tracer.start_as_current_span("write"):
                    pass
                self.assertTrue(lock.owned())
            self.assertIs(trace.get_current_span(), job, "the caller's span is current again")
        self.assertIs(trace.get_current_span(), trace.INVALID_SPAN)
        acquire = self.only(provider, "dlock.acquire")
        hold = self.only(provider, "dlock.hold")
        write = self.only(provider, "write")
        self.assertEqual(acquire.parent, job.context)
        self.assertEqual(hold.parent, job.context)  # a sibling of the acquire span...
        self.assertEqual([link.context for link in hold.links], [acquire.context])  # ...linked
        self.assertIs(inside, hold)
        self.assertEqual(write.parent, hold.context)
        self.assertEqual(acquire.attributes["dlock.acquire.wait_ms"], -1)  # without limit
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.attributes["dlock.outcome"], "released")
        self.assertGreaterEqual(hold.ended_at, write.ended_at)
        # The block's own exception: the hold still ends as released (the block failed, not
        # the lock), and the caller's context comes back.
        with self.assertRaises(KeyError):
            with self.client.lock(unique(), lease=5):
                raise KeyError("boom")
        self.assertIs(trace.get_current_span(), trace.INVALID_SPAN)
        self.assertEqual(provider.named("dlock.hold")[-1].attributes["dlock.outcome"],
                         "released")
        self.assertClean(provider)

    def test_a_wait_that_runs_out(self):
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        provider = self.traced()
        name = unique()
        holder = other.acquire(name, lease=10)
        with self.assertRaises(dlock.NotAcquired) as cm:
            self.client.acquire(name, timeout=0.1)
        err = cm.exception
        spans = provider.named("dlock.acquire")
        self.assertEqual(len(spans), 2)
        failed = spans[1]
        self.assertEqual(failed.ends, 1)
        self.assertEqual(failed.status.status_code, ERROR)
        self.assertEqual(failed.status.description, str(err))
        self.assertEqual(failed.attributes["dlock.outcome"], "not_acquired")
        self.assertEqual(failed.attributes["error.type"], "DLOCK_NOT_ACQUIRED")
        self.assertEqual(failed.attributes["dlock.acquire.wait_ms"], 100)
        self.assertNotIn("dlock.lock.fencing_token", failed.attributes)
        self.assertEqual(self.exception_of(failed)["exception.message"], str(err))
        self.assertEqual(len(provider.named("dlock.hold")), 1)  # the holder's only

        # One try that fails returns False, as before; its span says why.
        lock = self.client.lock(name)
        self.assertFalse(lock.acquire(blocking=False))
        last = provider.named("dlock.acquire")[-1]
        self.assertEqual(last.status.status_code, ERROR)
        self.assertEqual(last.attributes["dlock.outcome"], "not_acquired")
        self.assertEqual(last.attributes["dlock.acquire.wait_ms"], 0)
        self.assertFalse(lock.owned())
        holder.release()
        self.assertTrue(lock.acquire(blocking=False))  # the Lock is usable again
        lock.release()
        self.assertClean(provider)

    def test_an_error_before_any_round_trip(self):
        provider = self.traced()
        lock = self.client.acquire(unique(), lease=5)
        with self.assertRaises(dlock.AlreadyHeld):
            lock.acquire()
        failed = provider.named("dlock.acquire")[-1]
        self.assertEqual(failed.attributes["dlock.outcome"], "error")
        self.assertEqual(failed.attributes["error.type"], "AlreadyHeld")
        self.assertEqual(failed.status.status_code, ERROR)
        self.assertTrue(lock.owned())
        hold = self.only(provider, "dlock.hold")
        self.assertFalse(hold.ended)  # the first hold goes on
        lock.release()
        self.assertEqual(hold.attributes["dlock.outcome"], "released")

    def test_a_deleted_key_found_by_a_heartbeat(self):
        provider = self.traced()
        name = unique()
        told = []
        lock = self.client.acquire(name, lease=3, heartbeat=0.1,
                                   on_lost=lambda lk: told.append(lk.lost_cause))
        hold = self.only(provider, "dlock.hold")
        cli("DEL", key(name))  # behind the holder's back
        self.assertTrue(wait_for(lambda: told, 5), "on_lost never ran")
        self.assertEqual(len(told), 1)  # the user's on_lost runs as before, once
        self.assertTrue(hold.ended)  # before the user's on_lost
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.status.status_code, ERROR)
        self.assertEqual(hold.attributes["dlock.outcome"], "lost")
        self.assertEqual(hold.attributes["dlock.lost_cause"], "deleted")
        self.assertEqual(hold.attributes["error.type"], "DLOCK_NOT_HELD")
        self.assertIn(f"lock {name!r} (fencing token {lock.fencing_token}) was lost: deleted: ",
                      hold.status.description)
        self.assertEqual(self.exception_of(hold)["exception.message"], hold.status.description)
        with self.assertRaises(dlock.NotHeld):  # the release then raises; the span ended once
            lock.release()
        self.assertEqual(hold.ends, 1)

    def test_a_deleted_key_found_by_the_release(self):
        provider = self.traced()
        name = unique()
        lock = self.client.acquire(name, lease=30, heartbeat=0)  # no heartbeat to find it
        hold = self.only(provider, "dlock.hold")
        cli("DEL", key(name))
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.status.status_code, ERROR)
        self.assertEqual(hold.status.description, str(cm.exception))
        self.assertEqual(hold.attributes["dlock.outcome"], "lost")
        self.assertEqual(hold.attributes["dlock.lost_cause"], "deleted")
        self.assertEqual(hold.attributes["error.type"], "DLOCK_NOT_HELD")
        self.assertClean(provider)

    def test_campaign_shared_semaphore_and_bytes_names(self):
        provider = self.traced()
        election = unique()
        leading = self.client.campaign(election, value="me")
        shared = self.client.acquire(unique(), shared=True)
        permit = self.client.acquire(unique(), permits=3, blocking=False)
        raw = f"{unique()}-\u00e9".encode()
        by_bytes = self.client.acquire(raw)
        spans = provider.named("dlock.acquire")
        self.assertEqual([(s.attributes["dlock.operation"], s.attributes["dlock.lock.kind"],
                           s.attributes.get("dlock.lock.permits"),
                           s.attributes["dlock.acquire.wait_ms"]) for s in spans], [
            ("campaign", "exclusive", None, -1),
            ("acquire", "shared", None, -1),
            ("acquire", "semaphore", 3, 0),
            ("acquire", "exclusive", None, -1),
        ])
        self.assertEqual(spans[0].attributes["dlock.lock.name"], election)
        self.assertEqual(spans[3].attributes["dlock.lock.name"], raw.decode())  # bytes: UTF-8
        self.assertEqual(provider.named("dlock.hold")[2].attributes["dlock.lock.permits"], 3)
        for lk in (leading, shared, permit, by_bytes):
            lk.release()
        self.assertEqual([s.attributes["dlock.outcome"] for s in provider.named("dlock.hold")],
                         ["released"] * 4)
        self.assertClean(provider)

    def test_close_ends_the_hold_spans_of_the_locks_it_released(self):
        provider = self.traced()
        c = dlock.Client(URL)
        lock = c.acquire(unique())
        hold = self.only(provider, "dlock.hold")
        c.close()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.status.status_code, UNSET)
        self.assertEqual(hold.attributes["dlock.outcome"], "closed")
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.attributes["dlock.outcome"], "closed")

    def test_a_lock_collected_while_held(self):
        provider = self.traced()
        name = unique()
        lock = self.client.acquire(name, lease=5)
        hold = self.only(provider, "dlock.hold")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del lock
            gc.collect()
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.attributes["dlock.outcome"], "collected")
        self.assertEqual(hold.status.status_code, UNSET)
        self.assertTrue(wait_for(lambda: not self.client.inspect(name).holders, 5))

    def test_require_parent_span(self):
        provider = self.traced(require_parent_span=True)
        with self.client.lock(unique()):
            pass
        self.assertEqual(provider.spans, [])
        with provider.get_tracer("app").start_as_current_span("job"):
            with self.client.lock(unique()):
                pass
        self.assertEqual([s.name for s in provider.spans], ["job", "dlock.acquire", "dlock.hold"])

    def test_uninstrument_stops_spans_and_traced_holds_still_end(self):
        provider = otel_testing.RecordingTracerProvider()
        with self.client.lock(unique()):  # never instrumented: no span
            pass
        dlock.otel.instrument(tracer_provider=provider)
        self.assertTrue(dlock.otel.is_instrumented())
        lock = self.client.acquire(unique())
        self.assertEqual(len(provider.spans), 2)
        dlock.otel.uninstrument()
        self.assertFalse(dlock.otel.is_instrumented())
        with self.client.lock(unique()):
            pass
        self.client.acquire(unique(), blocking=False).release()
        self.assertEqual(len(provider.spans), 2, "a span was started while uninstrumented")
        lock.release()  # acquired while instrumented: its hold span ends
        self.assertEqual(provider.named("dlock.hold")[0].ends, 1)
        self.assertEqual(provider.named("dlock.hold")[0].attributes["dlock.outcome"], "released")

        async def main():
            async with self.client.lock(unique()):
                pass
            await (await self.client.aacquire(unique())).arelease()
        run(main)
        self.assertEqual(len(provider.spans), 2)
        self.assertEqual(global_provider.spans, [])

    def test_the_global_provider_and_the_instrumentor_shape(self):
        inst = dlock.otel.DlockInstrumentor()
        self.assertIs(inst, dlock.otel.DlockInstrumentor())  # one per process
        self.assertEqual(tuple(inst.instrumentation_dependencies()), ())
        self.assertFalse(inst.is_instrumented_by_opentelemetry)
        # What opentelemetry-instrument's loader passes: taken and ignored.
        inst.instrument(skip_dep_check=True, raise_exception_on_conflict=False)
        try:
            self.assertTrue(inst.is_instrumented_by_opentelemetry)
            with self.assertLogs("dlock.otel", logging.WARNING) as logs:
                inst.instrument(tracer_provider=otel_testing.RecordingTracerProvider())
            self.assertIn("already instrumented", logs.output[0])
            with self.client.lock(unique()):
                pass
            self.assertEqual([(s.name, s.ends) for s in global_provider.spans],
                             [("dlock.acquire", 1), ("dlock.hold", 1)])
            self.assertEqual(global_provider.tracers, [("libdlock", dlock.__version__)])
        finally:
            inst.uninstrument()
            global_provider.clear()
        with self.assertLogs("dlock.otel", logging.WARNING):
            inst.uninstrument()
        with self.assertRaises(TypeError):
            dlock.otel.instrument(tracer_provider=object())
        with self.assertRaises(TypeError):
            dlock.otel.instrument(require_parent_span="yes")
        with self.assertRaises(TypeError):
            inst.instrument(tracer_provder=otel_testing.RecordingTracerProvider())
        self.assertFalse(dlock.otel.is_instrumented())

    def test_a_tracer_that_raises_costs_no_lock(self):
        class StartRaises:
            def get_tracer(self, *args, **kwargs):
                return self

            def start_span(self, *args, **kwargs):
                raise RuntimeError("start_span broke")

        class EndRaises(otel_testing.RecordingTracerProvider):
            def get_tracer(self, *args, **kwargs):
                tracer = super().get_tracer(*args, **kwargs)
                start = tracer.start_span

                def start_span(*a, **k):
                    span = start(*a, **k)
                    span.end = lambda *x: (_ for _ in ()).throw(RuntimeError("end broke"))
                    return span
                tracer.start_span = start_span
                return tracer

        end_raises = EndRaises()
        for provider in (StartRaises(), end_raises):
            dlock.otel.instrument(tracer_provider=provider)
            try:
                with self.assertLogs("dlock.otel", logging.WARNING):
                    lock = self.client.acquire(unique())
                    self.assertTrue(lock.owned())
                    lock.release()
                    with self.client.lock(unique()) as lk:
                        self.assertTrue(lk.owned())
                    lk = self.client.lock(unique())
                    self.assertTrue(lk.acquire())
                    lk.release()
            finally:
                dlock.otel.uninstrument()
        # The acquire spans were started; their end() raised, so no hold span followed.
        self.assertEqual({s.name for s in end_raises.spans}, {"dlock.acquire"})


class AsyncioSpans(Base):
    def test_async_with_and_a_parent_span(self):
        provider = self.traced()
        tracer = provider.get_tracer("app")
        name = unique()

        async def main():
            with tracer.start_as_current_span("job") as job:
                async with self.client.lock(name, lease=5) as lock:
                    inside = trace.get_current_span()
                    await asyncio.sleep(0)
                    with tracer.start_as_current_span("write"):
                        pass
                    token = lock.fencing_token
                after = trace.get_current_span()
            return job, inside, after, token

        job, inside, after, token = run(main)
        acquire = self.only(provider, "dlock.acquire")
        hold = self.only(provider, "dlock.hold")
        self.assertIs(after, job)
        self.assertIs(inside, hold)
        self.assertEqual(acquire.parent, job.context)
        self.assertEqual(hold.parent, job.context)
        self.assertEqual([link.context for link in hold.links], [acquire.context])
        self.assertEqual(self.only(provider, "write").parent, hold.context)
        self.assertEqual(acquire.attributes["dlock.lock.fencing_token"], str(token))
        self.assertEqual(acquire.attributes["dlock.outcome"], "acquired")
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.attributes["dlock.outcome"], "released")
        self.assertClean(provider)

    def test_aacquire_arelease_and_await_alock(self):
        provider = self.traced()

        async def main():
            lock = await self.client.aacquire(unique(), timeout=2)
            await lock.arelease()
            lock = await self.client.alock(unique())
            await lock.arelease()
        run(main)
        acquires = provider.named("dlock.acquire")
        holds = provider.named("dlock.hold")
        self.assertEqual([s.attributes["dlock.acquire.wait_ms"] for s in acquires], [2000, -1])
        self.assertEqual([(s.ends, s.attributes["dlock.outcome"]) for s in holds],
                         [(1, "released"), (1, "released")])
        for a, h in zip(acquires, holds):
            self.assertEqual(h.parent, a.context)

    def test_a_wait_that_runs_out_and_a_cancelled_wait(self):
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        provider = self.traced()
        name = unique()
        holder = other.acquire(name, lease=10)

        async def main():
            with self.assertRaises(dlock.NotAcquired) as cm:
                await self.client.aacquire(name, timeout=0.1)
            lock = self.client.lock(name)
            self.assertFalse(await lock.aacquire(timeout=0.05))
            task = asyncio.ensure_future(self.client.aacquire(name))
            await asyncio.sleep(0.1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            return cm.exception

        err = run(main)
        held, failed, false, cancelled = provider.named("dlock.acquire")  # held: the holder's
        self.assertEqual(held.attributes["dlock.outcome"], "acquired")
        self.assertEqual(failed.status.status_code, ERROR)
        self.assertEqual(failed.status.description, str(err))
        self.assertEqual(failed.attributes["dlock.outcome"], "not_acquired")
        self.assertEqual(failed.attributes["error.type"], "DLOCK_NOT_ACQUIRED")
        self.assertEqual(false.attributes["dlock.outcome"], "not_acquired")
        self.assertEqual(false.status.status_code, ERROR)
        self.assertEqual(cancelled.attributes["dlock.outcome"], "cancelled")
        self.assertEqual(cancelled.status.status_code, ERROR)
        self.assertEqual(cancelled.attributes["error.type"], "CancelledError")
        self.assertEqual(len(provider.named("dlock.hold")), 1)  # the holder's only
        holder.release()
        self.assertClean(provider)

    def test_a_lost_hold_and_guard(self):
        provider = self.traced()
        name, guarded = unique(), unique()

        async def main():
            loop = asyncio.get_running_loop()
            lock = await self.client.aacquire(name, lease=3, heartbeat=0.1)
            hold = provider.named("dlock.hold")[0]
            await loop.run_in_executor(None, cli, "DEL", key(name))
            end = time.monotonic() + 5
            while not hold.ended and time.monotonic() < end:
                await asyncio.sleep(0.02)
            with self.assertRaises(dlock.NotHeld):
                await lock.arelease()

            inside = None
            with self.assertRaises(dlock.LockLost):
                async with self.client.lock(guarded, lease=3, heartbeat=0.1).guard():
                    inside = trace.get_current_span()
                    await loop.run_in_executor(None, cli, "DEL", key(guarded))
                    await asyncio.sleep(10)
            return hold, inside, trace.get_current_span()

        hold, inside, after = run(main)
        self.assertEqual(hold.ends, 1)
        self.assertEqual(hold.status.status_code, ERROR)
        self.assertEqual(hold.attributes["dlock.outcome"], "lost")
        self.assertEqual(hold.attributes["dlock.lost_cause"], "deleted")
        self.assertEqual(hold.attributes["error.type"], "DLOCK_NOT_HELD")
        guard_hold = provider.named("dlock.hold")[1]
        self.assertIs(inside, guard_hold)
        self.assertIs(after, trace.INVALID_SPAN)
        self.assertEqual(guard_hold.ends, 1)
        self.assertEqual(guard_hold.attributes["dlock.outcome"], "lost")
        self.assertEqual(guard_hold.attributes["dlock.lost_cause"], "deleted")
        self.assertEqual(guard_hold.attributes["dlock.lock.name"], guarded)
        self.assertClean(provider)

    def test_acampaign(self):
        provider = self.traced()
        election = unique()

        async def main():
            leading = await self.client.acampaign(election, value="me")
            async with self.client.lock(unique()):  # after it: a plain acquire again
                pass
            await leading.arelease()
        run(main)
        self.assertEqual([s.attributes["dlock.operation"] for s in provider.named("dlock.acquire")],
                         ["campaign", "acquire"])
        self.assertEqual([s.attributes["dlock.outcome"] for s in provider.named("dlock.hold")],
                         ["released", "released"])


PROGRAM_PRELUDE = f"""
import json, sys, warnings
sys.path.insert(0, {ROOT!r})
"""


def run_python(code, *, standin):
    """Runs code in a fresh interpreter (the stand-in on its path or not); its stdout."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    prelude = PROGRAM_PRELUDE
    if standin:
        prelude += f"sys.path.insert(0, {STANDIN!r})\n"
    else:
        # as in an application without it, even where some opentelemetry is installed
        prelude += ("class _Hide:\n"
                    "    def find_spec(self, name, path=None, target=None):\n"
                    "        if name == 'opentelemetry' or name.startswith('opentelemetry.'):\n"
                    "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
                    "sys.meta_path.insert(0, _Hide())\n")
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                         timeout=60, env=env, check=False)
    if out.returncode != 0:
        raise AssertionError(f"exit {out.returncode}\n{out.stdout}{out.stderr}")
    return out.stdout


class WithoutTheApi(unittest.TestCase):
    def test_instrument_warns_once_makes_no_spans_and_locks_work(self):
        out = run_python(f"""
import dlock, dlock.otel
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dlock.otel.instrument()
    dlock.otel.DlockInstrumentor().instrument(require_parent_span=True)
    with dlock.Client({URL!r}) as client:
        with client.lock("no-otel-{uuid.uuid4().hex[:8]}") as lock:
            token = lock.fencing_token
        import asyncio
        async def main():
            async with client.lock("no-otel-{uuid.uuid4().hex[:8]}"):
                pass
        asyncio.run(main())
print(json.dumps({{
    "instrumented": dlock.otel.is_instrumented(),
    "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    "token": token,
    "wrapped": hasattr(dlock.Lock.release, "__wrapped__"),
    "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}}))
""", standin=False)
        got = json.loads(out)
        self.assertFalse(got["instrumented"])
        self.assertEqual(len(got["warnings"]), 1, got["warnings"])
        category, message = got["warnings"][0]
        self.assertEqual(category, "DlockTracingWarning")
        self.assertIn("opentelemetry-api cannot be imported", message)
        self.assertIn("pip install opentelemetry-api", message)
        self.assertGreater(got["token"], 0)
        self.assertFalse(got["wrapped"])  # nothing wrapped
        self.assertEqual(got["loaded"], [])

    def test_no_opentelemetry_import_until_instrument(self):
        out = run_python(f"""
import dlock, dlock.otel
loaded = lambda: sorted(m for m in sys.modules if m.startswith("opentelemetry"))
with dlock.Client({URL!r}) as client:
    with client.lock("lazy-{uuid.uuid4().hex[:8]}"):
        pass
    before = loaded()
    dlock.otel.instrument()
    after = loaded()
print(json.dumps({{"before": before, "after": "opentelemetry.trace" in after}}))
""", standin=True)
        self.assertEqual(json.loads(out), {"before": [], "after": True})


README = os.path.join(ROOT, "README.md")


def readme_example():
    """The README's OpenTelemetry example: a ```py block (not run by the README check, which
    has no opentelemetry) that calls dlock.otel.instrument() and starts a span of its own;
    None if there is none."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    for block in re.findall(r"^```py\n(.*?)^```$", text, re.M | re.S):
        if "dlock.otel.instrument(" in block and "start_as_current_span" in block:
            return block
    return None


class ReadmeExample(unittest.TestCase):
    def test_the_readme_example_runs_as_printed_under_the_stand_in(self):
        block = readme_example()
        if block is None:
            self.skipTest("README.md has no OpenTelemetry example (```py) yet")
        if not PORT:
            self.skipTest("REDIS_PORT is not set")
        # Under a recording global provider (what an SDK's setup would do), then the spans.
        code = ("import otel_testing\nfrom opentelemetry import trace as _t\n"
                "_p = otel_testing.RecordingTracerProvider()\n_t.set_tracer_provider(_p)\n"
                + block.replace("127.0.0.1:6379", f"127.0.0.1:{PORT}")
                + "\nprint('SPANS ' + json.dumps([{'name': s.name, 'ends': s.ends, "
                  "'parent': next((p.name for p in _p.spans if p.context == s.parent), None), "
                  "'links': [next(p.name for p in _p.spans if p.context == l.context) "
                  "for l in s.links], 'attributes': s.attributes} for s in _p.spans]))\n")
        out = run_python(code, standin=True)
        spans = json.loads(out.split("SPANS ", 1)[1])
        by = {s["name"]: s for s in spans}
        self.assertEqual(sorted(by), ["dlock.acquire", "dlock.hold", "nightly report",
                                      "write report"], out)
        self.assertIsNone(by["nightly report"]["parent"])
        self.assertEqual(by["dlock.acquire"]["parent"], "nightly report")
        self.assertEqual(by["dlock.hold"]["parent"], "nightly report")
        self.assertEqual(by["dlock.hold"]["links"], ["dlock.acquire"])
        self.assertEqual(by["write report"]["parent"], "dlock.hold")
        for s in spans:
            self.assertEqual(s["ends"], 1, s["name"])
        self.assertEqual(by["dlock.hold"]["attributes"]["dlock.outcome"], "released")
        self.assertRegex(out, r"(?m)^fencing token \d+$")


if __name__ == "__main__":
    unittest.main()
