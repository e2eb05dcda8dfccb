"""Events (issue 36): Client.on_event / off_event (dlock_client_set_event_hook on every C client
a Client has or opens), the thread each event runs on, handlers that raise, dlock.log_events,
and the close at interpreter exit that keeps the library's thread out of a finalizing
interpreter. Runs in both modes (DLOCK_PY_FORCE_THREADS=1: asyncio through worker threads)."""

import asyncio
import contextlib
import io
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")  # bindings/python
sys.path.insert(0, ROOT)
import dlock  # noqa: E402

PORT = os.environ.get("REDIS_PORT")
URL = f"redis://127.0.0.1:{PORT}"


def setUpModule():
    if not PORT:
        raise unittest.SkipTest("REDIS_PORT is not set (run bindings/test.sh python)")


def cli(*args):
    out = subprocess.run(["redis-cli", "-p", PORT, *map(str, args)], capture_output=True,
                         text=True, check=True, timeout=10)
    return out.stdout.strip()


def unique(prefix="ev"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


class Recorder:
    """A handler that keeps (event, thread ident) pairs."""

    def __init__(self):
        self.seen = []
        self.mu = threading.Lock()

    def __call__(self, event):
        with self.mu:
            self.seen.append((event, threading.get_ident()))

    def events(self, name=None):
        with self.mu:
            return [e for e, _ in self.seen if name is None or e.name == name]

    def types(self, name=None):
        return [e.type for e in self.events(name)]

    def threads(self, name=None):
        with self.mu:
            return {t for e, t in self.seen if name is None or e.name == name}


class Base(unittest.TestCase):
    def setUp(self):
        self.client = dlock.Client(URL)
        self.rec = Recorder()

    def tearDown(self):
        self.client.close()


class Events(Base):
    def test_one_uncontended_cycle(self):
        self.assertIs(self.client.on_event(self.rec), self.rec)
        name = unique()
        lock = self.client.lock(name)
        with lock:
            token = lock.fencing_token
            self.assertEqual(self.rec.types(name), ["acquiring", "acquired"])  # before it returned
        acquiring, acquired, released = self.rec.events(name)
        self.assertEqual([acquiring.type, acquired.type, released.type],
                         ["acquiring", "acquired", "released"])
        self.assertEqual(acquiring, dlock.Event("acquiring", name, 0, 0.0, None, 0, None, "", None))
        self.assertEqual(acquired.attempts, 1)
        self.assertEqual(acquired.fencing_token, token)
        self.assertIsInstance(acquired.fencing_token, int)
        self.assertEqual((acquired.status, acquired.code, acquired.detail, acquired.cause),
                         (0, None, "", None))
        self.assertIsInstance(acquired.elapsed, float)
        self.assertGreaterEqual(acquired.elapsed, 0.0)
        self.assertLess(acquired.elapsed, 5.0)
        self.assertEqual(released.fencing_token, token)
        self.assertEqual((released.status, released.code, released.cause), (0, None, None))
        self.assertIsInstance(released.elapsed, float)
        # blocking calls: on the calling thread
        self.assertEqual(self.rec.threads(name), {threading.get_ident()})
        with self.assertRaises(AttributeError):  # frozen
            acquired.name = "x"  # type: ignore[misc]

    def test_a_wait_that_runs_out(self):
        name = unique()
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        self.client.on_event(self.rec)
        with other.lock(name):
            self.assertFalse(self.client.lock(name, timeout=0.2).acquire())
            with self.assertRaises(dlock.NotAcquired):
                self.client.acquire(name, blocking=False)
        events = self.rec.events(name)
        self.assertEqual([e.type for e in events], ["acquiring", "not_acquired"] * 2)
        waited, one_try = events[1], events[3]
        for e in (waited, one_try):
            self.assertEqual(e.status, dlock.NotAcquired.status)
            self.assertEqual(e.code, "DLOCK_NOT_ACQUIRED")
            self.assertEqual(e.code, dlock.NotAcquired.code)
            self.assertIsNone(e.fencing_token)
            self.assertIsNone(e.cause)
        self.assertGreaterEqual(waited.attempts, 1)
        self.assertGreaterEqual(waited.elapsed, 0.15)
        self.assertEqual(one_try.attempts, 1)

    def test_a_deleted_key_is_lost_deleted(self):
        self.client.on_event(self.rec)
        name = unique("lost")
        lock = self.client.acquire(name, lease=2, heartbeat=0.15)
        token = lock.fencing_token
        cli("DEL", f"dlock:{{{name}}}")  # behind the holder's back
        self.assertTrue(wait_for(lambda: "lost" in self.rec.types(name)), self.rec.types(name))
        lost = [e for e in self.rec.events(name) if e.type == "lost"]
        self.assertEqual(len(lost), 1)
        e = lost[0]
        self.assertEqual(e.cause, "deleted")
        self.assertTrue(e.detail.startswith("deleted: "), e.detail)
        self.assertEqual(e.fencing_token, token)
        self.assertEqual((e.status, e.code), (dlock.NotHeld.status, "DLOCK_NOT_HELD"))
        self.assertGreater(e.elapsed, 0.0)
        # a heartbeat found it: on the library's own thread, not this one
        with self.rec.mu:
            lost_thread = [t for ev, t in self.rec.seen if ev.type == "lost"][0]
        self.assertNotEqual(lost_thread, threading.get_ident())
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        released = self.rec.events(name)[-1]
        self.assertEqual(released.type, "released")
        self.assertEqual((released.status, released.cause), (dlock.NotHeld.status, "deleted"))
        self.assertEqual(released.fencing_token, token)

    def test_a_raising_handler_breaks_nothing(self):
        name = unique()

        def bad(event):
            raise RuntimeError(f"handler failed on {event.type}")

        self.client.on_event(bad)
        self.client.on_event(self.rec)  # runs after the one that raised
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            lock = self.client.lock(name)
            self.assertTrue(lock.acquire())
            self.assertTrue(lock.owned())
            lock.release()
            with self.client.lock(name) as again:
                self.assertTrue(again.owned())
        self.assertEqual(self.rec.types(name), ["acquiring", "acquired", "released"] * 2)
        text = err.getvalue()
        self.assertEqual(text.count("dlock: exception in an on_event handler (ignored):"), 6)
        self.assertIn("RuntimeError: handler failed on acquired", text)

    def test_off_event_and_several_handlers(self):
        name = unique()
        other = Recorder()

        @self.client.on_event
        def first(event):
            self.rec(event)

        self.client.on_event(other)
        with self.client.lock(name):
            pass
        self.client.off_event(first)
        self.client.off_event(first)  # not there: nothing
        self.client.off_event(print)
        with self.client.lock(name):
            pass
        self.assertEqual(self.rec.types(name), ["acquiring", "acquired", "released"])
        self.assertEqual(other.types(name), ["acquiring", "acquired", "released"] * 2)
        self.client.off_event(other)
        with self.client.lock(name):
            pass
        self.assertEqual(len(other.events(name)), 6)
        with self.assertRaises(TypeError):
            self.client.on_event(42)  # type: ignore[arg-type]

    def test_handlers_are_per_client(self):
        name = unique()
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        other_rec = Recorder()
        other.on_event(other_rec)
        self.client.on_event(self.rec)
        with self.client.lock(name):
            pass
        self.assertEqual(self.rec.types(name), ["acquiring", "acquired", "released"])
        self.assertEqual(other_rec.events(), [])

    def test_after_close(self):
        self.client.on_event(self.rec)
        name = unique()
        held = self.client.acquire(name)
        self.client.close()  # releases it: not an event (no caller's release answered)
        self.assertEqual(self.rec.types(name), ["acquiring", "acquired"])
        with self.assertRaises(dlock.NotHeld):
            held.release()  # this one is: NOT_HELD, not lost
        released = self.rec.events(name)[-1]
        self.assertEqual((released.type, released.code, released.cause),
                         ("released", "DLOCK_NOT_HELD", None))
        self.client.on_event(Recorder())  # still takes one: it hears nothing


class AsyncioEvents(Base):
    def run_in_thread(self, coro_fn):
        """asyncio.run(coro_fn()) on a thread of its own (so that the loop's thread is not the
        test's): its result, or its exception raised here."""
        box = {}

        def run():
            try:
                box["result"] = asyncio.run(asyncio.wait_for(coro_fn(), 30))
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=run, name="test-loop")
        t.start()
        t.join(60)
        self.assertFalse(t.is_alive())
        if "error" in box:
            raise box["error"]
        return box["result"]

    def test_on_the_event_loops_thread(self):
        # registered before the loop's C client exists: it is hooked as it opens
        self.client.on_event(self.rec)
        name, lost_name = unique("aev"), unique("alost")

        async def main():
            loop = asyncio.get_running_loop()
            async with self.client.lock(name) as lock:
                token = lock.fencing_token
            held = await self.client.aacquire(lost_name, lease=2, heartbeat=0.15)
            await loop.run_in_executor(None, cli, "DEL", f"dlock:{{{lost_name}}}")
            end = time.monotonic() + 5
            while "lost" not in self.rec.types(lost_name) and time.monotonic() < end:
                await asyncio.sleep(0.02)
            with self.assertRaises(dlock.NotHeld):
                await held.arelease()
            return threading.get_ident(), token

        loop_thread, token = self.run_in_thread(main)
        self.assertNotEqual(loop_thread, threading.get_ident())
        events = self.rec.events(name)
        self.assertEqual([e.type for e in events], ["acquiring", "acquired", "released"])
        self.assertEqual(events[1].fencing_token, token)
        self.assertEqual(events[1].attempts, 1)
        lost = [e for e in self.rec.events(lost_name) if e.type == "lost"]
        self.assertEqual(len(lost), 1)
        self.assertEqual(lost[0].cause, "deleted")
        self.assertEqual(self.rec.types(lost_name)[-1], "released")
        if dlock._use_async_c:
            # the loop's own C client: every event on the loop's thread, its heartbeat's too
            self.assertEqual(self.rec.threads(name), {loop_thread})
            self.assertEqual(self.rec.threads(lost_name), {loop_thread})
        else:
            # the thread fallback: worker threads and the library's thread, never the loop's
            self.assertNotIn(loop_thread, self.rec.threads(name) | self.rec.threads(lost_name))

    def test_registered_after_the_loops_client_exists(self):
        name = unique("aev")

        async def main():
            client = dlock.Client(URL)  # made on the loop: only its loop's C client exists
            rec = Recorder()
            try:
                async with client.lock(name):
                    pass
                client.on_event(rec)  # hooks the C client that is open now
                async with client.lock(name):
                    pass
                # and the blocking API's client, opened later, gets it as it opens
                await asyncio.get_running_loop().run_in_executor(None, self.cycle, client, name)
            finally:
                await client.aclose()
            return threading.get_ident(), rec

        loop_thread, rec = self.run_in_thread(main)
        self.assertEqual(rec.types(name), ["acquiring", "acquired", "released"] * 2)
        if dlock._use_async_c:
            with rec.mu:
                threads = [t for _, t in rec.seen]
            self.assertEqual(set(threads[:3]), {loop_thread})
            self.assertNotIn(loop_thread, set(threads[3:]))  # the executor's thread

    @staticmethod
    def cycle(client, name):
        with client.lock(name):
            pass

    def test_a_raising_handler_on_the_loop(self):
        name = unique("aev")

        def bad(event):
            raise ValueError("bad handler")

        self.client.on_event(bad)
        self.client.on_event(self.rec)

        async def main():
            for _ in range(2):
                async with self.client.lock(name) as lock:
                    self.assertTrue(lock.owned())
            return True

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertTrue(self.run_in_thread(main))
        self.assertEqual(self.rec.types(name), ["acquiring", "acquired", "released"] * 2)
        self.assertEqual(err.getvalue().count("dlock: exception in an on_event handler"), 6)


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


class LogEvents(Base):
    def logger(self, level=logging.DEBUG):
        logger = logging.getLogger(f"dlock-test.{unique()}")
        logger.propagate = False
        logger.setLevel(level)
        handler = ListHandler()
        logger.addHandler(handler)
        return logger, handler.records

    def test_one_record_per_event(self):
        logger, records = self.logger()
        handler = dlock.log_events(self.client, logger)
        name = unique("log")
        with self.client.lock(name) as lock:
            token = lock.fencing_token
        self.assertEqual([r.dlock_event for r in records], ["acquiring", "acquired", "released"])
        self.assertEqual({r.levelno for r in records}, {logging.DEBUG})
        acquired = records[1]
        self.assertEqual(acquired.getMessage(),
                         f"dlock: acquired {name!r}, fencing token {token} (1 attempt, waited "
                         f"{acquired.dlock_elapsed:.3f} s)")
        self.assertEqual((acquired.dlock_lock, acquired.dlock_fencing_token,
                          acquired.dlock_attempts, acquired.dlock_status, acquired.dlock_code,
                          acquired.dlock_detail, acquired.dlock_cause),
                         (name, token, 1, 0, None, "", None))
        self.assertEqual(acquired.name, logger.name)
        self.client.off_event(handler)
        with self.client.lock(name):
            pass
        self.assertEqual(len(records), 3)

    def test_levels(self):
        logger, records = self.logger(logging.INFO)  # DEBUG ones are not even formatted
        dlock.log_events(self.client, logger)
        name = unique("log")
        other = dlock.Client(URL)
        self.addCleanup(other.close)
        with self.client.lock(name):
            pass
        with other.lock(name):
            self.assertFalse(self.client.lock(name, timeout=0.05).acquire())
        self.assertEqual([(r.dlock_event, r.levelno) for r in records],
                         [("not_acquired", logging.INFO)])
        self.assertIn("DLOCK_NOT_ACQUIRED", records[0].getMessage())
        lock = self.client.acquire(name, lease=2, heartbeat=0.15)
        cli("DEL", f"dlock:{{{name}}}")
        self.assertTrue(wait_for(lambda: any(r.dlock_event == "lost" for r in records)))
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        lost, released = records[1:]
        self.assertEqual((lost.dlock_event, lost.levelno, lost.dlock_cause),
                         ("lost", logging.ERROR, "deleted"))
        self.assertIn("deleted: ", lost.getMessage())
        # a release that found the lock gone: at WARNING at least
        self.assertEqual((released.dlock_event, released.levelno, released.dlock_code),
                         ("released", logging.WARNING, "DLOCK_NOT_HELD"))

    def test_levels_given(self):
        logger, records = self.logger(logging.INFO)
        dlock.log_events(self.client, logger, levels={"acquired": logging.INFO})
        name = unique("log")
        with self.client.lock(name):
            pass
        self.assertEqual([(r.dlock_event, r.levelno) for r in records],
                         [("acquired", logging.INFO)])
        with self.assertRaises(TypeError):
            dlock.log_events(self.client, logger, levels={"lost": "ERROR"})  # type: ignore

    def test_the_default_logger(self):
        records = ListHandler()
        default = logging.getLogger("dlock")
        old = default.level
        default.setLevel(logging.DEBUG)
        default.addHandler(records)
        try:
            dlock.log_events(self.client)
            with self.client.lock(unique("log")):
                pass
        finally:
            default.removeHandler(records)
            default.setLevel(old)
        self.assertEqual([r.dlock_event for r in records.records],
                         ["acquiring", "acquired", "released"])


class AtExit(unittest.TestCase):
    def run_child(self, body):
        code = textwrap.dedent(f"""
            import sys, threading, time
            sys.path.insert(0, {ROOT!r})
            import dlock
            URL = {URL!r}
        """) + textwrap.dedent(body)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False)

    def test_a_client_with_handlers_is_closed_at_exit(self):
        # the library's thread must not call into a finalizing interpreter: the client closes
        # before that, releasing its lock (which a plain exit leaves to expire)
        name = unique("exit")
        out = self.run_child(f"""
            client = dlock.Client(URL)
            client.on_event(lambda e: None)
            lock = client.acquire({name!r}, lease=30)
            client.self_ref = client  # a cycle: no finalizer before exit would close it
            print("held", flush=True)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("held", out.stdout)
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")

    def test_a_call_in_progress_is_not_waited_for(self):
        # a daemon thread waiting without limit: closing would wait for it, so the exit leaves
        # that client open (and exits at once)
        name = unique("exit")
        holder = dlock.Client(URL)
        self.addCleanup(holder.close)
        held = holder.acquire(name, lease=30)
        out = self.run_child(f"""
            waiter = dlock.Client(URL)
            waiter.on_event(lambda e: print(e.type, flush=True))
            threading.Thread(target=lambda: waiter.acquire({name!r}), daemon=True).start()
            time.sleep(0.3)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["acquiring"])
        held.release()


if __name__ == "__main__":
    unittest.main()
