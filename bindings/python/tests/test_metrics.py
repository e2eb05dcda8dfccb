"""Metrics and loss causes (issue 36): Client.metrics() and metrics_text(), Lock.lost_cause and
the causes that NotHeld and LockLost carry, the prometheus_client collector (dlock.prometheus),
and a real Prometheus scraping an exporter built on it.

prometheus_client is Debian's python3-prometheus-client (scripts/setup installs it), which
/usr/bin/python3 imports. When the suite's interpreter is another (a pyenv python3), that one
pure-Python package is made importable here from where /usr/bin/python3 finds it (a directory
holding only a link to it, appended to sys.path), rather than skipping: the collector and the
scrape test must run wherever scripts/setup ran.
"""

import asyncio
import atexit
import gc
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")  # bindings/python
sys.path.insert(0, ROOT)
import dlock  # noqa: E402
import dlock.prometheus  # noqa: E402  (needs no prometheus_client to import)

PORT = os.environ.get("REDIS_PORT")
URL = f"redis://127.0.0.1:{PORT}"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool")
EXPORTER = os.path.join(HERE, "metrics_exporter.py")


def cli(*args):
    out = subprocess.run(["redis-cli", "-p", PORT, *map(str, args)], capture_output=True,
                         text=True, check=True, timeout=10)
    return out.stdout.strip()


def unique(prefix="m"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def _prometheus_client_dir():
    """A directory to put on sys.path (or PYTHONPATH) so that prometheus_client imports: None
    when this interpreter imports it already, or when no interpreter here has it."""
    try:
        import prometheus_client  # noqa: F401
        return None
    except ImportError:
        pass
    if not os.path.exists("/usr/bin/python3"):
        return None
    out = subprocess.run(["/usr/bin/python3", "-c",
                          "import os, prometheus_client; "
                          "print(os.path.dirname(prometheus_client.__file__))"],
                         capture_output=True, text=True, timeout=30, check=False)
    package = out.stdout.strip()
    if out.returncode != 0 or not os.path.isdir(package):
        return None
    shim = tempfile.mkdtemp(prefix="dlock-prometheus-client-")
    atexit.register(shutil.rmtree, shim, True)
    os.symlink(package, os.path.join(shim, "prometheus_client"))
    return shim


PROMETHEUS_CLIENT_DIR = _prometheus_client_dir()
if PROMETHEUS_CLIENT_DIR is not None:
    sys.path.append(PROMETHEUS_CLIENT_DIR)
try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    prometheus_client = None
NO_PROMETHEUS_CLIENT = ("no prometheus_client, for this interpreter or /usr/bin/python3 "
                        "(apt-get install python3-prometheus-client; scripts/setup does)")


def setUpModule():
    if not PORT:
        raise unittest.SkipTest("REDIS_PORT is not set (run bindings/test.sh python)")


ACQUIRED = {"kind": "exclusive", "outcome": "acquired"}


class Base(unittest.TestCase):
    def setUp(self):
        self.client = dlock.Client(URL)

    def tearDown(self):
        self.client.close()


class Metrics(Base):
    def test_one_acquire_counts_once(self):
        before = self.client.metrics()
        with self.client.lock(unique()):
            held = self.client.metrics()
        after = self.client.metrics()
        self.assertEqual(after.value("dlock_acquires_total", **ACQUIRED),
                         before.value("dlock_acquires_total", **ACQUIRED) + 1)
        self.assertEqual(after.value("dlock_acquire_attempts_total", kind="exclusive"),
                         before.value("dlock_acquire_attempts_total", kind="exclusive") + 1)
        self.assertEqual(after.value("dlock_releases_total", outcome="ok"),
                         before.value("dlock_releases_total", outcome="ok") + 1)
        self.assertEqual(held.value("dlock_locks_held"), 1)
        self.assertEqual(after.value("dlock_locks_held"), 0)
        self.assertEqual(after.value("dlock_hold_seconds_count"),
                         before.value("dlock_hold_seconds_count") + 1)
        self.assertEqual(after.value("dlock_hold_seconds_bucket", le="+Inf"),
                         after.value("dlock_hold_seconds_count"))
        self.assertGreater(after.value("dlock_hold_seconds_sum"), 0)
        # labels left out are summed over
        self.assertEqual(after.value("dlock_acquires_total", outcome="acquired"),
                         sum(after.value("dlock_acquires_total", kind=k, outcome="acquired")
                             for k in ("exclusive", "shared", "semaphore")))
        with self.assertRaises(KeyError):
            after.value("dlock_acquires_total", kind="nonesuch")
        with self.assertRaises(KeyError):
            after.value("dlock_no_such_metric")

    def test_families_samples_and_labels(self):
        m = self.client.metrics()
        self.assertIsInstance(m, dlock.Metrics)
        names = [f.name for f in m]
        self.assertEqual(len(m), len(names))
        self.assertEqual(names[:2], ["dlock_acquire_attempts_total", "dlock_acquires_total"])
        for name in ("dlock_losses_total", "dlock_locks_held", "dlock_acquire_wait_seconds",
                     "dlock_acquire_attempt_seconds", "dlock_hold_seconds",
                     "dlock_renewal_seconds"):
            self.assertIn(name, m)
        # one series per loss cause, each there from the start
        self.assertEqual(sorted(s.labels["cause"] for s in m["dlock_losses_total"].samples),
                         ["broken", "deleted", "expired", "max_hold", "refused", "taken_over"])
        types = {f.name: f.type for f in m}
        self.assertEqual(types["dlock_acquires_total"], "counter")
        self.assertEqual(types["dlock_locks_held"], "gauge")
        self.assertEqual(types["dlock_hold_seconds"], "histogram")
        family = m["dlock_acquires_total"]
        self.assertIsInstance(family, dlock.MetricFamily)
        self.assertTrue(family.help)
        sample = family.samples[0]
        self.assertIsInstance(sample, dlock.MetricSample)
        self.assertEqual(sample.name, "dlock_acquires_total")
        self.assertEqual(sample.labels, ACQUIRED)
        self.assertIsInstance(sample.value, float)
        self.assertEqual(m["dlock_handovers_total"].samples[0].labels, {})
        hist = m["dlock_acquire_wait_seconds"].samples
        buckets = [s for s in hist if s.name.endswith("_bucket")]
        self.assertGreater(len(buckets), 5)
        self.assertEqual(buckets[-1].labels, {"le": "+Inf"})
        self.assertEqual([s.name for s in hist[-2:]],
                         ["dlock_acquire_wait_seconds_sum", "dlock_acquire_wait_seconds_count"])
        with self.assertRaises(KeyError):
            m["dlock_nonesuch"]
        self.assertIn("families", repr(m))
        # a copy each time: changing one snapshot changes no other
        sample.labels["kind"] = "changed"
        self.assertEqual(self.client.metrics()["dlock_acquires_total"].samples[0].labels,
                         ACQUIRED)

    def test_label_values_are_unescaped(self):
        self.assertEqual(dlock._parse_labels(''), {})
        self.assertEqual(dlock._parse_labels('le="+Inf"'), {"le": "+Inf"})
        self.assertEqual(dlock._parse_labels(r'a="x\"y",b="back\\slash",c="new\nline"'),
                         {"a": 'x"y', "b": "back\\slash", "c": "new\nline"})

    def test_text_is_the_librarys(self):
        with self.client.lock(unique()):
            pass
        text = self.client.metrics_text()
        self.assertIn('\ndlock_acquires_total{kind="exclusive",outcome="acquired"} ', text)
        self.assertIn("# TYPE dlock_acquires_total counter\n", text)
        self.assertIn("# TYPE dlock_hold_seconds histogram\n", text)
        self.assertTrue(text.endswith("\n"))
        # the binding's own rendering (used when several C clients are summed) writes the
        # library's text byte for byte
        families, grouped = dlock._merge([dlock._read_metrics(self.client._h)],
                                         dlock._MetricsTotals())
        self.assertEqual(dlock._render_text(families, grouped), self.client.metrics_text())

    def test_asyncio_counts_are_summed_and_kept(self):
        # The asyncio calls run on each event loop's own C client; the Client's metrics add
        # them up, and keep their counts once that loop (and its client) is gone.
        name = unique()
        with self.client.lock(name):
            pass

        async def main():
            async with self.client.lock(name):
                pass
            return self.client.metrics(), self.client.metrics_text()

        during, text = asyncio.run(main())
        self.assertEqual(during.value("dlock_acquires_total", **ACQUIRED), 2)
        self.assertIn('\ndlock_acquires_total{kind="exclusive",outcome="acquired"} 2\n', text)
        after = self.client.metrics()  # the loop's client is closed now
        self.assertEqual(after.value("dlock_acquires_total", **ACQUIRED), 2)
        self.assertEqual(after.value("dlock_hold_seconds_count"), 2)
        self.assertIn('\ndlock_acquires_total{kind="exclusive",outcome="acquired"} 2\n',
                      self.client.metrics_text())
        # and after close: the final counts, nothing held
        held = self.client.acquire(unique())
        self.client.close()
        final = self.client.metrics()
        self.assertEqual(final.value("dlock_acquires_total", **ACQUIRED), 3)
        self.assertEqual(final.value("dlock_locks_held"), 0)
        self.assertEqual([f.name for f in final], [f.name for f in after])
        with self.assertRaises(dlock.NotHeld) as cm:
            held.release()
        self.assertIsNone(cm.exception.cause)  # released by the close: not lost
        self.assertIsNone(held.lost_cause)

    def test_a_client_made_on_a_loop(self):
        # made inside a running loop: only the loop's C client exists, and it is what counts
        async def main():
            async with dlock.Client(URL) as client:
                async with client.lock(unique()):
                    pass
                if dlock._use_async_c:  # else the thread fallback's client did the work
                    self.assertIsNone(client._h)
                m = client.metrics()
                self.assertEqual(m.value("dlock_acquires_total", **ACQUIRED), 1)
                text = client.metrics_text()
                self.assertIn('dlock_acquires_total{kind="exclusive",outcome="acquired"} 1\n',
                              text)
            return client

        client = asyncio.run(main())
        self.assertEqual(client.metrics().value("dlock_acquires_total", **ACQUIRED), 1)

    @unittest.skipUnless(PROMTOOL, "no promtool (apt-get install prometheus)")
    def test_summed_text_passes_promtool(self):
        with self.client.lock(unique()):
            pass

        async def main():
            async with self.client.lock(unique()):
                pass

        asyncio.run(main())
        text = self.client.metrics_text()  # the binding's rendering: two C clients' counts
        self.assertIn('dlock_acquires_total{kind="exclusive",outcome="acquired"} 2\n', text)
        out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=30, check=False)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_metrics_from_many_threads_while_closing(self):
        # reads race with close and with the loop clients' teardown: each count is read once
        errors = []
        stop = threading.Event()

        def read():
            while not stop.is_set():
                try:
                    m = self.client.metrics()
                    if m.value("dlock_acquires_total", **ACQUIRED) < 1:
                        errors.append("a counter went down")
                    self.client.metrics_text()
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

        self.client.acquire(unique()).release()
        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        try:
            for _ in range(3):
                async def main():
                    async with self.client.lock(unique()):
                        pass
                asyncio.run(main())
            self.client.close()
        finally:
            stop.set()
            for t in readers:
                t.join(10)
        self.assertEqual(errors, [])
        self.assertEqual(self.client.metrics().value("dlock_acquires_total", **ACQUIRED), 4)


class LostCause(Base):
    def test_deleted_after_the_key_is_deleted(self):
        name = unique("lost")
        told = []
        event = threading.Event()

        def on_lost(lock):
            told.append(lock.lost_cause)
            event.set()

        before = self.client.metrics()
        # A lease of 2 s renewed every 150 ms: a renewal finds the key gone well within it.
        lock = self.client.lock(name, lease=2, heartbeat=0.15, on_lost=on_lost)
        self.assertIsNone(lock.lost_cause)  # never acquired
        lock.acquire()
        self.assertIsNone(lock.lost_cause)
        time.sleep(0.2)
        self.assertIsNone(lock.lost_cause)
        cli("DEL", f"dlock:{{{name}}}")  # behind the holder's back
        self.assertTrue(event.wait(5), "on_lost never ran")
        self.assertEqual(len(told), 1)
        # the refused renewal looked again: nobody holds the name
        self.assertTrue(told[0].startswith("deleted: "), told[0])
        self.assertIn("nobody held it", told[0])
        self.assertTrue(lock.lost_cause.startswith("deleted: "), lock.lost_cause)
        after = self.client.metrics()
        self.assertEqual(after.value("dlock_losses_total", cause="deleted"),
                         before.value("dlock_losses_total", cause="deleted") + 1)
        for other in ("refused", "expired", "taken_over"):  # counted once, under its own cause
            self.assertEqual(after.value("dlock_losses_total", cause=other),
                             before.value("dlock_losses_total", cause=other), other)
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(cm.exception.cause, "deleted")
        self.assertIn("lost", str(cm.exception))
        self.assertTrue(lock.lost_cause.startswith("deleted: "))  # kept after the release
        lock.acquire()  # a new hold: nothing lost
        self.assertIsNone(lock.lost_cause)
        lock.release()
        self.assertIsNone(lock.lost_cause)  # released while valid
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertIsNone(cm.exception.cause)  # not lost: held nothing

    def test_extend_and_set_value_find_it_deleted(self):
        name = unique("lost")
        lock = self.client.acquire(name, lease=5, heartbeat=0)
        cli("DEL", f"dlock:{{{name}}}")
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.extend(5)
        self.assertEqual(cm.exception.cause, "deleted")
        self.assertIn("was lost: deleted: ", str(cm.exception))
        self.assertTrue(lock.lost_cause.startswith("deleted: "), lock.lost_cause)
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.set_value(b"x")
        self.assertEqual(cm.exception.cause, "deleted")
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(cm.exception.cause, "deleted")
        self.assertEqual(self.client.metrics().value("dlock_losses_total", cause="deleted"), 1)

    def test_taken_over_when_another_client_holds_it(self):
        # Deleted behind the holder's back, then taken by another client: the holder's extend,
        # set_value and release find it held by that one, whose token (and label) they name.
        name = unique("taken")
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        lock = self.client.acquire(name, lease=5, heartbeat=0)
        cli("DEL", f"dlock:{{{name}}}")
        successor = other.acquire(name, lease=5, heartbeat=0, owner="successor", blocking=False)
        self.assertIsNotNone(successor)
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.extend(5)
        self.assertEqual(cm.exception.cause, "taken_over")
        self.assertIn("was lost: taken_over: ", str(cm.exception))
        self.assertTrue(lock.lost_cause.startswith("taken_over: "), lock.lost_cause)
        self.assertIn(f"fencing token {successor.fencing_token}, label 'successor'",
                      lock.lost_cause)
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.set_value(b"x")
        self.assertEqual(cm.exception.cause, "taken_over")
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(cm.exception.cause, "taken_over")
        m = self.client.metrics()
        self.assertEqual(m.value("dlock_losses_total", cause="taken_over"), 1)
        self.assertEqual(m.value("dlock_losses_total", cause="deleted"), 0)
        self.assertIsNone(successor.lost_cause)  # held and valid
        successor.release()

    def test_expired_when_the_local_deadline_passes(self):
        name = unique("expired")
        lock = self.client.acquire(name, lease_ms=150, heartbeat_ms=0)
        self.assertIsNone(lock.lost_cause)
        self.assertTrue(wait_for(lambda: not lock.valid, 3))
        self.assertTrue(lock.lost_cause.startswith("expired: "), lock.lost_cause)
        # local validity ends a little before the server's lease: wait for that one too
        self.assertTrue(wait_for(lambda: cli("EXISTS", f"dlock:{{{name}}}") == "0", 3))
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(cm.exception.cause, "expired")

    def test_asyncio_on_lost_and_arelease(self):
        name = unique("alost")

        async def main():
            loop = asyncio.get_running_loop()
            told = loop.create_future()
            lock = await self.client.aacquire(
                name, lease=2, heartbeat=0.15,
                on_lost=lambda lk: told.done() or told.set_result(lk.lost_cause))
            self.assertIsNone(lock.lost_cause)
            await loop.run_in_executor(None, cli, "DEL", f"dlock:{{{name}}}")
            cause = await asyncio.wait_for(told, 5)
            self.assertTrue(cause.startswith("deleted: "), cause)
            with self.assertRaises(dlock.NotHeld) as cm:
                await lock.arelease()
            self.assertEqual(cm.exception.cause, "deleted")
            self.assertTrue(lock.lost_cause.startswith("deleted: "))

        asyncio.run(asyncio.wait_for(main(), 20))

    def test_guard_leaves_with_the_cause(self):
        name = unique("guard")

        async def main():
            loop = asyncio.get_running_loop()
            lock = self.client.lock(name, lease=3, heartbeat=0.15)
            with self.assertRaises(dlock.LockLost) as cm:
                async with lock.guard():
                    await loop.run_in_executor(None, cli, "DEL", f"dlock:{{{name}}}")
                    await asyncio.sleep(30)  # only the loss ends it
            self.assertEqual(cm.exception.cause, "deleted")
            self.assertIn("(deleted: ", str(cm.exception))
            self.assertIn("the block was cancelled", str(cm.exception))
            self.assertTrue(lock.lost_cause.startswith("deleted: "), lock.lost_cause)

        asyncio.run(asyncio.wait_for(main(), 20))

    def test_not_held_takes_a_cause(self):
        e = dlock.NotHeld("m", cause="expired")
        self.assertEqual((e.cause, str(e)), ("expired", "m"))
        self.assertIsNone(dlock.NotHeld("m").cause)
        self.assertIsNone(dlock._error(2, "m").cause)
        self.assertEqual(dlock.LockLost("m", cause="refused").cause, "refused")
        # the cause is read from the library's NOT_HELD message, each of them
        for code in ("deleted", "taken_over", "refused", "expired"):
            self.assertEqual(dlock._error(2, f"lock 'x' was lost: {code}: why").cause, code)


def sample_value(exposition, line_start):
    """The value of the sample line of a text exposition that starts with line_start."""
    for line in exposition.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start} in:\n{exposition}")


ACQUIRED_LINE = 'dlock_acquires_total{kind="exclusive",outcome="acquired"}'


@unittest.skipIf(prometheus_client is None, NO_PROMETHEUS_CLIENT)
class PrometheusCollector(Base):
    def setUp(self):
        super().setUp()
        self.registry = CollectorRegistry()

    def test_generate_latest(self):
        collector = dlock.prometheus.register(self.client, self.registry)
        self.assertIsInstance(collector, dlock.prometheus.Collector)
        before = generate_latest(self.registry).decode()
        with self.client.lock(unique()):
            pass
        after = generate_latest(self.registry).decode()
        self.assertEqual(sample_value(after, ACQUIRED_LINE),
                         sample_value(before, ACQUIRED_LINE) + 1)
        # counters keep one _total (prometheus_client adds it back), histograms their parts
        self.assertIn("# TYPE dlock_acquires_total counter\n", after)
        self.assertNotIn("_total_total", after)
        self.assertIn("# TYPE dlock_hold_seconds histogram\n", after)
        self.assertIn("# TYPE dlock_locks_held gauge\n", after)
        self.assertEqual(sample_value(after, 'dlock_hold_seconds_bucket{le="+Inf"}'), 1)
        self.assertEqual(sample_value(after, "dlock_hold_seconds_count"), 1)
        self.assertGreater(sample_value(after, "dlock_hold_seconds_sum"), 0)
        buckets = re.findall(r'^dlock_acquire_wait_seconds_bucket\{le="([^"]+)"\} ', after, re.M)
        self.assertGreater(len(buckets), 5)
        self.assertEqual(buckets[-1], "+Inf")
        self.assertEqual(sorted(buckets[:-1], key=float), buckets[:-1])
        # every family of the library, as many samples as it counts
        for family in self.client.metrics():
            self.assertIn(f"# TYPE {family.name} {family.type}\n", after)
        # prometheus_client's parser reads it back, and OpenMetrics is written too
        parsed = {f.name: f for f in text_string_to_metric_families(after)}
        self.assertEqual(parsed["dlock_acquires"].type, "counter")
        om = generate_openmetrics(self.registry).decode()
        self.assertIn("# TYPE dlock_acquires counter\n", om)
        self.assertIn(ACQUIRED_LINE + " 1.0\n", om)
        self.assertTrue(om.endswith("# EOF\n"))

    def test_two_clients_need_distinct_labels(self):
        dlock.prometheus.register(self.client, self.registry)
        with dlock.Client(URL) as other:
            with self.assertRaises(ValueError) as cm:
                dlock.prometheus.register(other, self.registry)
            self.assertIn("label", str(cm.exception))
            with self.assertRaises(ValueError):
                dlock.prometheus.register(other, self.registry, label="b")  # the first has none
            with self.assertRaises(ValueError):
                dlock.prometheus.register(self.client, self.registry)  # twice
            dlock.prometheus.unregister(self.client, self.registry)
            self.assertEqual(generate_latest(self.registry).decode().count("dlock_"), 0)
            collector = dlock.prometheus.register(self.client, self.registry, label="a")
            with self.assertRaises(ValueError):
                dlock.prometheus.register(other, self.registry, label="a")  # taken
            with self.assertRaises(ValueError):
                dlock.prometheus.register(other, self.registry)  # no label
            self.assertIs(dlock.prometheus.register(other, self.registry, label="b"), collector)
            self.client.acquire(unique()).release()
            text = generate_latest(self.registry).decode()
            self.assertEqual(text.count("# TYPE dlock_acquires_total counter\n"), 1)
            self.assertEqual(sample_value(text, 'dlock_acquires_total{client="a",kind="exclusive",'
                                                'outcome="acquired"}'), 1)
            self.assertEqual(sample_value(text, 'dlock_acquires_total{client="b",kind="exclusive",'
                                                'outcome="acquired"}'), 0)
            self.assertEqual(sample_value(text, 'dlock_locks_held{client="b"}'), 0)
            dlock.prometheus.unregister(other, self.registry)
            with self.assertRaises(KeyError):
                dlock.prometheus.unregister(other, self.registry)
            self.assertNotIn('client="b"', generate_latest(self.registry).decode())
        with self.assertRaises(TypeError):
            dlock.prometheus.register(object(), self.registry)

    def test_the_default_registry_and_a_collected_client(self):
        client = dlock.Client(URL)
        label = unique("default")
        collector = dlock.prometheus.register(client, label=label)  # prometheus_client.REGISTRY
        try:
            client.acquire(unique()).release()
            self.assertEqual(sample_value(generate_latest().decode(),
                                          f'dlock_acquires_total{{client="{label}",'
                                          'kind="exclusive",outcome="acquired"}'), 1)
            self.assertEqual(collector.clients(), [(client, label)])
            client.close()
            del client
            gc.collect()
            self.assertEqual(collector.clients(), [])  # held weakly: gone with the client
            self.assertNotIn("dlock_acquires_total", generate_latest().decode())
        finally:
            prometheus_client.REGISTRY.unregister(collector)
            dlock.prometheus._collectors.pop(prometheus_client.REGISTRY, None)

    def test_a_closed_client_reports_its_final_counts(self):
        dlock.prometheus.register(self.client, self.registry)
        self.client.acquire(unique()).release()
        self.client.close()
        self.assertEqual(sample_value(generate_latest(self.registry).decode(), ACQUIRED_LINE), 1)


def free_ports(n):
    """n distinct loopback ports free now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop(proc):
    """Stops a process this test started, by its pid: SIGTERM, then SIGKILL after 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@unittest.skipIf(prometheus_client is None, NO_PROMETHEUS_CLIENT)
class PrometheusScrape(unittest.TestCase):
    """The issue's end-to-end check: a real Prometheus scrapes an exporter built on
    dlock.prometheus and prometheus_client.start_http_server, and its query API answers with
    what the exporter counted."""

    @unittest.skipUnless(os.path.exists(PROMETHEUS),
                         f"no {PROMETHEUS} (apt-get install prometheus; scripts/setup does)")
    def test_a_real_prometheus_scrapes_the_exporter(self):
        n = 7
        started = time.monotonic()
        work = tempfile.mkdtemp(prefix="dlock-scrape-")
        exporter_port, prometheus_port = free_ports(2)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [ROOT] + ([PROMETHEUS_CLIENT_DIR] if PROMETHEUS_CLIENT_DIR else []) +
            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        procs = []
        exporter_log = open(os.path.join(work, "exporter.log"), "w+")
        prometheus_log = open(os.path.join(work, "prometheus.log"), "w+")

        def logs():
            parts = []
            for f in (exporter_log, prometheus_log):
                f.flush()
                f.seek(0)
                parts.append(f"--- {os.path.basename(f.name)}:\n{f.read()[-3000:]}")
            return "\n".join(parts)

        try:
            exporter = subprocess.Popen(
                [sys.executable, EXPORTER, URL, str(exporter_port), str(n)], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=exporter_log, text=True)
            procs.append(exporter)
            ready, _, _ = select.select([exporter.stdout], [], [], 15)
            said = exporter.stdout.readline().strip() if ready else "(nothing in 15 s)"
            self.assertEqual(said, str(n), logs())

            config = os.path.join(work, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global:\n"
                        "  scrape_interval: 1s\n"
                        "  scrape_timeout: 1s\n"
                        "scrape_configs:\n"
                        "  - job_name: dlock\n"
                        "    static_configs:\n"
                        f"      - targets: ['127.0.0.1:{exporter_port}']\n")
            procs.append(subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(work, 'data')}",
                 f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                stdin=subprocess.DEVNULL, stdout=prometheus_log, stderr=prometheus_log))

            query = 'dlock_acquires_total{outcome="acquired",kind="exclusive"}'
            url = (f"http://127.0.0.1:{prometheus_port}/api/v1/query?" +
                   urllib.parse.urlencode({"query": query}))
            deadline = time.monotonic() + 30
            got = None
            while time.monotonic() < deadline:
                for p in procs:
                    self.assertIsNone(p.poll(), f"{p.args[0]} exited\n{logs()}")
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        answer = json.load(r)
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    answer = None  # not listening yet
                if answer and answer.get("status") == "success" and answer["data"]["result"]:
                    got = answer["data"]["result"]
                    if float(got[0]["value"][1]) == n:
                        break
                time.sleep(0.2)
            self.assertIsNotNone(got, f"Prometheus never had {query} in 30 s\n{logs()}")
            self.assertEqual(len(got), 1, got)
            self.assertEqual(float(got[0]["value"][1]), n, got)
            self.assertEqual(got[0]["metric"]["job"], "dlock")
            self.assertEqual(got[0]["metric"]["instance"], f"127.0.0.1:{exporter_port}")
            took = time.monotonic() - started
            print(f"\n  Prometheus scraped {n} acquisitions in {took:.1f} s", file=sys.stderr)
        finally:
            for p in reversed(procs):
                if p.stdin is not None:
                    p.stdin.close()
                stop(p)
            if procs and procs[0].stdout is not None:
                procs[0].stdout.close()
            exporter_log.close()
            prometheus_log.close()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
