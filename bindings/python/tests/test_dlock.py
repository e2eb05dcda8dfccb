"""Tests for the Python binding, against a real redis-server.

Run through bindings/test.sh python (starts a throwaway redis-server), or by hand:
    REDIS_PORT=6379 DLOCK_LIBRARY=build/libdlock.so python3 -m unittest discover -s bindings/python/tests -v
"""

import asyncio
import concurrent.futures
import contextlib
import ctypes
import gc
import io
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
import uuid
import warnings
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import dlock  # noqa: E402

PORT = os.environ.get("REDIS_PORT")
URL = f"redis://127.0.0.1:{PORT}"


def cli(*args):
    out = subprocess.run(["redis-cli", "-p", PORT, *map(str, args)], capture_output=True,
                         text=True, check=True, timeout=10)
    return out.stdout.strip()


def listening(name):
    """How many connections listen for lock `name`'s releases (its waiters' clients)."""
    return int(cli("PUBSUB", "NUMSUB", f"dlock:{{{name}}}:released").split()[-1])


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def unique(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def library_says(fn, *args):
    """dlock_last_error() after calling the C function fn directly, which must fail: what the
    binding's exception for the same call should say."""
    status = fn(*args)
    assert status != 0, f"{fn.__name__} succeeded"
    return dlock._c.dlock_last_error().decode()


def setUpModule():
    if not PORT:
        raise unittest.SkipTest("REDIS_PORT is not set (run bindings/test.sh python)")


class Base(unittest.TestCase):
    def setUp(self):
        self.client = dlock.Client(URL)

    def tearDown(self):
        self.client.close()


class Basics(Base):
    def test_acquire_extend_release(self):
        name = unique()
        lock = self.client.acquire(name, lease_ms=3000)
        self.assertIsInstance(lock.fencing_token, int)
        self.assertGreater(lock.fencing_token, 0)
        self.assertEqual(lock.attempts, 1)
        self.assertEqual(lock.name, name)
        self.assertTrue(lock.valid)
        self.assertTrue(0 < lock.remaining_ms <= 3000)
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "1")
        lock.extend(20)  # seconds
        self.assertGreater(int(cli("PTTL", f"dlock:{{{name}}}")), 10_000)
        self.assertGreater(lock.remaining_ms, 10_000)
        self.assertGreater(lock.remaining, 10)
        lock.extend(lease_ms=30_000)  # the older spelling
        self.assertGreater(int(cli("PTTL", f"dlock:{{{name}}}")), 20_000)
        lock.extend(0)  # no expiry
        self.assertEqual(lock.remaining_ms, float("inf"))
        self.assertEqual(cli("PTTL", f"dlock:{{{name}}}"), "-1")
        lock.release()
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
        self.assertFalse(lock.valid)
        self.assertEqual(lock.remaining_ms, 0)
        self.assertTrue(lock.released)
        self.assertIsNone(lock.fencing_token)  # no hold, no token
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        with self.assertRaises(dlock.NotHeld):
            lock.extend(1)
        self.assertIn("not held", repr(lock))

    def test_with_blocks(self):
        name = unique()
        with self.client.lock(name, lease_ms=5000, wait_ms=1000, owner="tests") as lock:
            self.assertTrue(lock.valid)
            self.assertTrue(cli("GET", f"dlock:{{{name}}}").endswith("|tests"))
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
        with self.client.lock(name) as lock:
            lock.release()  # released inside: leaving the block is fine
        with dlock.Client(URL) as c2:
            c2.acquire(name).release()
        self.assertTrue(c2.closed)

    def test_lost_inside_with_raises_not_held_on_exit(self):
        name = unique()
        with self.assertRaises(dlock.NotHeld):
            with self.client.lock(name, lease_ms=5000):
                cli("DEL", f"dlock:{{{name}}}")
        # ... but never masks the block's own exception
        with self.assertRaises(KeyError):
            with self.client.lock(name, lease_ms=5000):
                cli("DEL", f"dlock:{{{name}}}")
                raise KeyError("mine")

    def test_tokens_strictly_rising(self):
        name = unique()
        last = 0
        for i in range(50):
            lease = 0 if i % 5 == 0 else 5000
            with self.client.lock(name, lease_ms=lease) as lock:
                self.assertGreater(lock.fencing_token, last)
                last = lock.fencing_token
        # across an expiry and a takeover, and across clients
        lock = self.client.acquire(name, lease_ms=100, heartbeat_ms=0)
        self.assertGreater(lock.fencing_token, last)
        last = lock.fencing_token
        with dlock.Client(URL) as other:
            other_lock = other.acquire(name, wait_ms=2000)
            self.assertGreater(other_lock.fencing_token, last)
            other_lock.release()
        with self.assertRaises(dlock.NotHeld):
            lock.release()

    def test_contention_and_waiting_in_one_process(self):
        name = unique()
        holder = self.client.acquire(name, lease_ms=10_000)
        with dlock.Client(URL) as other:
            with self.assertRaises(dlock.NotAcquired) as cm:
                other.acquire(name, blocking=False)
            self.assertIn(name, str(cm.exception))
            self.assertIsInstance(cm.exception, TimeoutError)
            with self.assertRaises(dlock.NotAcquired):
                other.acquire(name, wait_ms=150)
            t0 = time.monotonic()
            with self.assertRaises(TimeoutError):
                other.acquire(name, timeout=0.15)
            self.assertGreaterEqual(time.monotonic() - t0, 0.14)
            held_token = holder.fencing_token
            threading.Timer(0.3, holder.release).start()
            lock = other.acquire(name, wait_ms=10_000)
            self.assertGreater(lock.fencing_token, held_token)
            self.assertGreaterEqual(lock.attempts, 1)  # 1: handed the lock by the release
            lock.release()

    def test_unfair_waiters_wait_outside_the_line(self):
        # fair=False: the waiter takes no place in line, so a fair waiter (the default) that
        # came later is handed the lock first; retries 20-30 s apart, so only releases serve.
        name = unique()
        holder = self.client.acquire(name, lease_ms=10_000)
        got = {}

        def wait(label, **options):
            with dlock.Client(URL) as c:
                lock = c.acquire(name, wait_ms=20_000, retry_ms=(20_000, 30_000), **options)
                time.sleep(0.1)
                got[label] = (lock.fencing_token, lock.attempts)
                lock.release()

        unfair = threading.Thread(target=wait, args=("unfair",), kwargs={"fair": False})
        unfair.start()
        # Its first attempt refused, the unfair waiter listens for releases (and takes no place
        # in line); only then does the fair one come.
        self.assertTrue(wait_for(lambda: listening(name) >= 1, 20), "the unfair waiter never waited")
        fair = threading.Thread(target=wait, args=("fair",), kwargs={"fair": True})
        fair.start()
        # Its first attempt refused, the fair waiter stands in line: the only one there.
        self.assertTrue(wait_for(lambda: cli("ZCARD", f"dlock:{{{name}}}:line") == "1", 20),
                        "the fair waiter never took its place in line")
        holder.release()  # hands the lock to the fair waiter, the only one in line
        fair.join(10)
        unfair.join(10)
        self.assertLess(got["fair"][0], got["unfair"][0], got)
        self.assertGreaterEqual(got["unfair"][1], 2, got)  # woken by a release, it asked again
        with self.assertRaisesRegex(TypeError, "fair must be a bool"):
            self.client.acquire(name, fair=1)

    def test_threads_share_a_client(self):
        name = unique()
        counter = [0]

        def work():
            for _ in range(25):
                with self.client.lock(name, wait_ms=-1):
                    v = counter[0]
                    time.sleep(0)
                    counter[0] = v + 1

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(counter[0], 150)

    def test_close_releases_what_it_holds(self):
        client = dlock.Client(URL)
        name = unique()
        lock = client.acquire(name, lease_ms=0)
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "1")
        client.close()
        client.close()  # idempotent
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
        self.assertFalse(lock.valid)
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        with self.assertRaises(dlock.InvalidArgument):
            client.acquire(name)
        self.assertIn("closed", repr(client))

    def test_version_and_library(self):
        self.assertRegex(dlock.version(), r"^0\.\d+\.\d+$")
        self.assertTrue(dlock.library_path)

    def test_url_password_not_in_repr(self):
        user = unique("user")
        cli("ACL", "SETUSER", user, "on", ">s3cret-pw", "~*", "&*", "+@all")
        try:
            client = dlock.Client(f"redis://{user}:s3cret-pw@127.0.0.1:{PORT}/0")
            # as the library shows URLs (dlock_url_redact): the password, and only it, hidden
            self.assertEqual(repr(client), f"<dlock.Client redis://{user}:***@127.0.0.1:{PORT}/0>")
            client.close()
            with self.assertRaises(dlock.InvalidArgument) as cm:
                client.acquire(unique())
            self.assertIn(f"{user}:***@", str(cm.exception))
            self.assertNotIn("s3cret-pw", str(cm.exception) + repr(client))
        finally:
            cli("ACL", "DELUSER", user)
        with dlock.Client(URL) as c:  # no password: shown as given
            self.assertEqual(repr(c), f"<dlock.Client {URL}>")


class ReusableLock(Base):
    """client.lock(name) is an unacquired, reusable lock object, as threading.Lock, redis-py's
    Lock and filelock are: every `with` acquires on entry and releases on exit."""

    def setUp(self):
        super().setUp()
        self.other = dlock.Client(URL)

    def tearDown(self):
        self.other.close()
        super().tearDown()

    def held(self, name):
        return self.other.inspect(name).holders != []

    def test_reuse_holds_the_lock_in_every_block(self):
        # The safety defect of issue 31: the second block ran with no lock held.
        name = unique("reuse")
        lk = self.client.lock(name)
        self.assertFalse(self.held(name), "client.lock() must not acquire")
        self.assertIsNone(lk.fencing_token)
        tokens = []
        for _ in range(3):
            with lk as got:
                self.assertIs(got, lk)
                self.assertTrue(self.held(name), "a `with` block ran without the lock")
                self.assertTrue(lk.owned())
                tokens.append(lk.fencing_token)
            self.assertFalse(self.held(name))
            self.assertFalse(lk.owned())
            self.assertIsNone(lk.fencing_token)
        self.assertEqual(tokens, sorted(set(tokens)))
        # the other client is refused inside each block, not only the first
        with lk:
            with self.assertRaises(dlock.NotAcquired):
                self.other.acquire(name, blocking=False)
        with lk:
            with self.assertRaises(dlock.NotAcquired):
                self.other.acquire(name, blocking=False)

    def test_acquire_returns_a_bool(self):
        name = unique("bool")
        holder = self.other.acquire(name)
        lk = self.client.lock(name)
        self.assertFalse(lk.acquire(blocking=False))
        self.assertFalse(lk.owned())
        self.assertTrue(lk.locked())  # someone holds it
        t0 = time.monotonic()
        self.assertFalse(lk.acquire(timeout=0.2))
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.assertFalse(lk.acquire(True, 0.05))  # threading.Lock's positional order
        with self.assertRaisesRegex(ValueError, "non-blocking"):
            lk.acquire(blocking=False, timeout=1)
        holder.release()
        self.assertFalse(lk.locked())
        self.assertTrue(lk.acquire(blocking=False))
        self.assertTrue(lk.owned() and lk.locked() and lk.valid)
        self.assertGreater(lk.fencing_token, 0)
        self.assertEqual(lk.attempts, 1)
        lk.release()
        self.assertTrue(lk.acquire(timeout=5))
        lk.release()
        self.assertTrue(lk.acquire())  # no limit, free: at once
        lk.release()

    def test_a_second_acquire_while_held_raises(self):
        name = unique("twice")
        lk = self.client.lock(name)
        self.assertTrue(lk.acquire())
        token = lk.fencing_token
        for call in (lambda: lk.acquire(), lambda: lk.acquire(blocking=False),
                     lambda: lk.acquire(timeout=1), lk.__enter__):
            with self.assertRaises(dlock.AlreadyHeld) as cm:
                call()
            self.assertIsInstance(cm.exception, RuntimeError)
            self.assertIsInstance(cm.exception, dlock.Error)
        self.assertEqual(lk.fencing_token, token)  # still the same hold
        self.assertTrue(self.held(name))
        lk.release()
        with self.assertRaises(dlock.NotHeld):  # release when not held
            lk.release()
        with self.assertRaises(dlock.NotHeld):
            lk.extend()
        # a nested `with` of the same object raises, and the outer block still holds it
        with lk:
            with self.assertRaises(dlock.AlreadyHeld):
                with lk:
                    pass
            self.assertTrue(self.held(name))
        self.assertFalse(self.held(name))

    def test_waits_without_limit_by_default(self):
        name = unique("wait")
        holder = self.other.acquire(name)
        threading.Timer(0.5, holder.release).start()
        t0 = time.monotonic()
        with self.client.lock(name) as lk:  # no timeout given: waits for the release
            self.assertGreaterEqual(time.monotonic() - t0, 0.4)
            self.assertTrue(lk.owned())
            threading.Timer(0.3, lk.release).start()
            lock = self.other.acquire(name)  # Client.acquire waits too
            lock.release()

    def test_timeout_given_to_lock_bounds_with_and_acquire(self):
        name = unique("timeout")
        holder = self.other.acquire(name)
        lk = self.client.lock(name, timeout=0.2)
        t0 = time.monotonic()
        with self.assertRaises(dlock.NotAcquired) as cm:
            with lk:
                self.fail("ran without the lock")
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.assertFalse(lk.acquire())  # its default, 0.2 s
        t0 = time.monotonic()
        self.assertFalse(lk.acquire(blocking=True))  # as redis-py: the lock's own timeout
        self.assertLess(time.monotonic() - t0, 10)
        with self.assertRaises(TimeoutError):
            with self.client.lock(name, blocking=False):
                pass
        with self.assertRaises(TimeoutError):
            with self.client.lock(name, wait_ms=0):  # the older spelling
                pass
        holder.release()
        with lk:
            self.assertTrue(self.held(name))

    def test_threads_sharing_one_object_never_share_a_hold(self):
        name = unique("threads")
        lk = self.client.lock(name)
        lk.acquire()
        errors = []

        def other_thread():
            try:
                with lk:
                    errors.append("entered")
            except dlock.AlreadyHeld as e:
                errors.append(e)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(10)
        self.assertIsInstance(errors[0], dlock.AlreadyHeld)
        self.assertTrue(lk.owned() and self.held(name))  # the first hold stands
        lk.release()

    def test_on_lost_and_kinds_with_a_reused_object(self):
        name = unique("lostreuse")
        lost = []
        event = threading.Event()
        lk = self.client.lock(name, lease=2, heartbeat=0.15,
                              on_lost=lambda lock: (lost.append(lock), event.set()))
        with lk:
            pass
        with self.assertRaises(dlock.NotHeld):
            with lk:
                cli("DEL", f"dlock:{{{name}}}")
                self.assertTrue(event.wait(5), "on_lost never ran")
                self.assertFalse(lk.owned())
                self.assertIsNotNone(lk.fencing_token)  # the lost hold's, until released
        self.assertEqual(lost, [lk])
        with lk:  # reusable after a loss too
            self.assertTrue(self.held(name))
        self.assertEqual(len(lost), 1)
        readers = [self.client.lock(name, shared=True) for _ in range(2)]
        with readers[0], readers[1]:
            self.assertEqual(len(self.other.inspect(name).holders), 2)
        with readers[0]:
            self.assertEqual(len(self.other.inspect(name).holders), 1)
        self.assertTrue(wait_for(lambda: not dlock._lost_slots))

    def test_star_import_leaves_builtins_alone(self):
        ns = {}
        exec("from dlock import *", ns)
        self.assertNotIn("ConnectionError", ns)
        self.assertNotIn("TimeoutError", ns)
        for name in dlock.__all__:
            self.assertTrue(hasattr(dlock, name), name)
            self.assertFalse(hasattr(__builtins__, name) if not isinstance(__builtins__, dict)
                             else name in __builtins__, f"{name} shadows a builtin")
        self.assertTrue(issubclass(dlock.ConnectionError, ConnectionError))
        self.assertTrue(issubclass(dlock.NotAcquired, TimeoutError))
        self.assertEqual(str(dlock.NotAcquired("busy")), "busy")

    def test_async_with_is_reusable(self):
        name = unique("areuse")

        async def main():
            lk = self.client.lock(name)
            self.assertIs(self.client.alock(name).__class__, dlock.Lock)
            tokens = []
            for _ in range(3):
                async with lk as got:
                    self.assertIs(got, lk)
                    self.assertTrue(await self.other.ainspect(name) != dlock.LockInfo("exclusive", []))
                    tokens.append(lk.fencing_token)
                self.assertFalse(self.held(name))
            self.assertEqual(tokens, sorted(set(tokens)))
            self.assertTrue(await lk.aacquire())
            with self.assertRaises(dlock.AlreadyHeld):
                await lk.aacquire()
            with self.assertRaises(dlock.AlreadyHeld):
                async with lk:
                    pass
            await lk.aextend(5)
            await lk.arelease()
            with self.assertRaises(dlock.NotHeld):
                await lk.arelease()
            holder = self.other.acquire(name)
            self.assertFalse(await lk.aacquire(blocking=False))
            self.assertFalse(await lk.aacquire(timeout=0.1))
            with self.assertRaises(TimeoutError):
                async with self.client.lock(name, timeout=0.1):
                    pass
            # cancelled while waiting: the object can acquire again later
            task = asyncio.ensure_future(lk.aacquire())
            await asyncio.sleep(0.2)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            holder.release()
            async with lk:  # waits without limit by default
                self.assertTrue(lk.owned())
            got = await lk  # awaiting acquires, too
            self.assertIs(got, lk)
            await lk.arelease()

        asyncio.run(main())
        self.assertFalse(self.held(name))

    def test_tasks_sharing_one_object_never_release_each_others_hold(self):
        name = unique("tasks")

        async def main():
            lk = self.client.lock(name)
            inside = asyncio.Event()
            leave = asyncio.Event()

            async def first():
                async with lk:
                    inside.set()
                    await leave.wait()
                    self.assertTrue(lk.owned())  # the second task did not release it
                    self.assertTrue(self.held(name))

            async def second():
                await inside.wait()
                with self.assertRaises(dlock.AlreadyHeld):
                    async with lk:
                        pass
                leave.set()

            await asyncio.gather(first(), second())

        asyncio.run(main())
        self.assertFalse(self.held(name))


class TwoProcesses(unittest.TestCase):
    def test_two_processes_contend(self):
        name = unique("procs")
        n = 150
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "counter")
            with open(path, "w") as f:
                f.write("0 0")
            worker = os.path.join(HERE, "worker.py")
            procs = [subprocess.Popen([sys.executable, worker, URL, name, path, str(n)])
                     for _ in range(2)]
            codes = [p.wait(timeout=120) for p in procs]
            self.assertEqual(codes, [0, 0])
            with open(path) as f:
                value, token = (int(x) for x in f.read().split())
        self.assertEqual(value, 2 * n)
        self.assertGreater(token, 0)
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")


class Lost(Base):
    def test_on_lost_reaches_user_code(self):
        name = unique("lost")
        got = []
        event = threading.Event()

        def on_lost(lock):
            got.append((lock, threading.current_thread() is threading.main_thread(), lock.valid))
            event.set()

        # A lease of 2 s (renewed every 150 ms): still valid 0.4 s later on however busy a machine.
        lock = self.client.acquire(name, lease_ms=2000, heartbeat_ms=150, on_lost=on_lost)
        time.sleep(0.4)
        self.assertTrue(lock.valid)
        cli("DEL", f"dlock:{{{name}}}")  # behind the holder's back
        self.assertTrue(event.wait(5), "on_lost never ran")
        self.assertIs(got[0][0], lock)
        self.assertFalse(got[0][1], "on_lost ran on the main thread?")
        self.assertFalse(got[0][2])
        self.assertFalse(lock.valid)
        self.assertEqual(lock.remaining_ms, 0)
        self.assertIn("lost", repr(lock))
        with self.assertRaises(dlock.NotHeld):
            lock.extend(1000)
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertIn("lost", str(cm.exception))
        time.sleep(0.3)
        self.assertEqual(len(got), 1, "on_lost ran more than once")
        self.assertNotIn(name, str(dlock._lost_slots))

    def test_on_lost_may_release_and_raise(self):
        name = unique("lost")
        done = threading.Event()
        seen = []

        def on_lost(lock):
            try:
                lock.release()
            except dlock.NotHeld as e:
                seen.append(e)
            done.set()
            raise RuntimeError("a buggy callback must not break the library")

        lock = self.client.acquire(name, lease_ms=600, heartbeat_ms=150, on_lost=on_lost)
        cli("SET", f"dlock:{{{name}}}", "someone-else")  # taken over
        self.assertTrue(done.wait(5))
        self.assertEqual(len(seen), 1)
        self.assertTrue(lock.released)
        # the client still works
        self.client.acquire(unique()).release()

    def test_without_heartbeats_valid_turns_false(self):
        name = unique()
        lock = self.client.acquire(name, lease_ms=150, heartbeat_ms=0)
        self.assertTrue(wait_for(lambda: not lock.valid, 3))
        # Local validity ends a drift margin (lease/100 + 2 ms) before the server's lease:
        # release is NotHeld once the server's has run out too.
        self.assertTrue(wait_for(lambda: cli("EXISTS", f"dlock:{{{name}}}") == "0", 3))
        with self.assertRaises(dlock.NotHeld):
            lock.release()


class LockMany(Base):
    """client.lock_many(names, ...): several names, all or none (dlock_acquire_many), a
    LockGroup of one Lock per name; its release is dlock_release_many's."""

    def setUp(self):
        super().setUp()
        self.other = dlock.Client(URL)   # holds names in the way
        self.third = dlock.Client(URL)   # looks from outside
        self.addCleanup(self.third.close)
        self.addCleanup(self.other.close)

    def names(self, prefix="many"):
        # "-a" sorts before "-b": the library takes a first, so a busy b makes it give a back
        base = unique(prefix)
        return base + "-a", base + "-b"

    def assert_free(self, *names):
        for name in names:
            self.assertEqual(self.third.inspect(name).holders, [], f"{name} is held")
            self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0", name)

    def test_all_or_none(self):
        a, b = self.names()
        blocker = self.other.acquire(b, lease=10)
        group = self.client.lock_many([a, b], lease=10)
        self.assertIsInstance(group, dlock.LockGroup)
        self.assertEqual(len(group), 2)
        self.assertEqual([lock.name for lock in group], [a, b])
        self.assertEqual(group.names, (a, b))
        self.assertTrue(group.released)
        # one try: nothing held, the free name given back
        self.assertFalse(group.acquire(blocking=False))
        self.assert_free(a)
        self.assertTrue(group.released)
        self.assertEqual([lock.fencing_token for lock in group], [None, None])
        # a bounded wait: the same, after the timeout, whatever order the names come in
        for order in ([a, b], [b, a]):
            started = time.monotonic()
            self.assertFalse(self.client.lock_many(order).acquire(timeout=0.3))
            self.assertGreaterEqual(time.monotonic() - started, 0.25)
            self.assert_free(a)
        # `with` raises as a single lock's `with` does, naming the busy name; nothing held
        with self.assertRaises(dlock.NotAcquired) as cm:
            with self.client.lock_many([a, b], blocking=False):
                self.fail("entered without the names")
        self.assertIn(b, str(cm.exception))
        self.assertIsInstance(cm.exception, TimeoutError)
        with self.assertRaises(dlock.NotAcquired):
            with self.client.lock_many([b, a], timeout=0.2):
                self.fail("entered without the names")
        self.assert_free(a)
        # the free name is really free: someone else takes it at once
        self.other.acquire(a, blocking=False).release()
        self.assertEqual(self.third.inspect(b).holders[0].fencing_token, blocker.fencing_token)
        blocker.release()
        # free now: both held, each by its Lock
        with group as (x, y):
            self.assertIs(x, group[0])
            self.assertIs(y, group[1])
            self.assertTrue(group.valid and x.valid and y.valid)
            self.assertEqual(self.third.inspect(a).holders[0].fencing_token, x.fencing_token)
            self.assertEqual(self.third.inspect(b).holders[0].fencing_token, y.fencing_token)
            self.assertIn("held", repr(group))
            with self.assertRaises(dlock.NotAcquired):
                self.other.acquire(a, blocking=False)
        self.assert_free(a, b)
        self.assertTrue(group.released)
        self.assertEqual(dlock._lost_slots, {})

    def test_each_lock_has_its_own_token_and_tokens_rise(self):
        a, b = self.names("tokens")
        last = {a: 0, b: 0}
        group = self.client.lock_many([b, a], lease=5)  # given out of order: kept in it
        for _ in range(10):
            with group as (lb, la):
                self.assertEqual((lb.name, la.name), (b, a))
                self.assertIsNot(la, lb)
                for lock in (la, lb):
                    self.assertIsInstance(lock.fencing_token, int)
                    self.assertGreater(lock.fencing_token, last[lock.name])
                    last[lock.name] = lock.fencing_token
                    self.assertEqual(
                        self.third.inspect(lock.name).holders[0].fencing_token, lock.fencing_token)
                self.assertNotEqual(la.fencing_token, lb.fencing_token)
        # a single lock afterwards goes on above them, and a group above that
        with self.client.lock(a) as single:
            self.assertGreater(single.fencing_token, last[a])
            last[a] = single.fencing_token
        la, lb = group[1], group[0]
        self.assertTrue(group.acquire(timeout=5))
        self.assertGreater(la.fencing_token, last[a])
        # each Lock is a Lock: extended, and released alone; the group's release skips it
        la.extend(20)
        self.assertGreater(int(cli("PTTL", f"dlock:{{{a}}}")), 10_000)
        self.assertLess(int(cli("PTTL", f"dlock:{{{b}}}")), 6_000)
        la.release()
        self.assert_free(a)
        self.assertTrue(lb.valid)
        self.assertIn("partly held", repr(group))
        with self.assertRaises(dlock.AlreadyHeld):
            group.acquire(blocking=False)  # b's Lock holds
        self.assertTrue(la.acquire(blocking=False))  # ... and the others were left alone
        la.release()
        group.release()
        self.assert_free(a, b)
        with self.assertRaises(dlock.NotHeld):
            group.release()  # holds nothing
        with group:
            group[0].release()
            group[1].release()  # all released inside: leaving is fine
        self.assertEqual(dlock._lost_slots, {})

    def test_opposite_orders_never_overlap_nor_deadlock(self):
        a, b = self.names("orders")
        rounds = 25
        state = {"inside": 0, "counter": 0, "overlaps": 0, "contended": 0}
        acquiring = [False, False]
        errors = []
        start = threading.Barrier(2)

        def worker(k, order):
            try:
                with dlock.Client(URL) as c:
                    group = c.lock_many(order, timeout=30, lease=10)
                    start.wait(10)
                    for _ in range(rounds):
                        acquiring[k] = True
                        with group:
                            acquiring[k] = False
                            if acquiring[1 - k]:
                                state["contended"] += 1  # the other one waits for us now
                            state["inside"] += 1
                            if state["inside"] != 1:
                                state["overlaps"] += 1
                            seen = state["counter"]
                            time.sleep(0.002)  # a lost update if the other got in meanwhile
                            state["counter"] = seen + 1
                            state["inside"] -= 1
                        time.sleep(0.001)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(0, [a, b])),
                   threading.Thread(target=worker, args=(1, [b, a]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertFalse(any(t.is_alive() for t in threads), "deadlocked")
        self.assertEqual(errors, [])
        self.assertEqual(state["overlaps"], 0)
        self.assertEqual(state["counter"], 2 * rounds)
        self.assertGreater(state["contended"], 0, "the two never contended")
        self.assert_free(a, b)

    def test_a_lost_hold_is_named_by_the_groups_release(self):
        a, b = self.names("lost")
        got = []
        heard = threading.Event()

        def on_lost(lock):
            got.append((lock, lock.lost_cause))
            heard.set()

        group = self.client.lock_many([a, b], lease=1, heartbeat=0.25, on_lost=on_lost)
        with self.assertRaises(dlock.NotHeld) as cm:
            with group as (la, lb):
                self.other.break_lock(b, "maintenance", now=True)
                self.assertTrue(heard.wait(5), "on_lost never ran")
                self.assertIs(got[0][0], lb)  # the Lock of the name lost, not the group's first
                self.assertTrue(got[0][1].startswith("broken"), got)
                self.assertFalse(lb.valid)
                self.assertTrue(la.valid)
                self.assertFalse(group.valid)
                self.assertIn("some lost", repr(group))
        self.assertIn(f"'{b}'", str(cm.exception))
        self.assertNotIn(f"'{a}'", str(cm.exception))
        self.assertEqual(cm.exception.cause, "broken")
        self.assert_free(a)  # released all the same
        self.assertTrue(group.released)
        time.sleep(0.3)
        self.assertEqual(len(got), 1, "on_lost ran more than once")
        self.assertTrue(wait_for(lambda: not dlock._lost_slots), dlock._lost_slots)
        # ... but never masks the block's own exception
        with self.assertRaises(KeyError):
            with group:
                cli("DEL", f"dlock:{{{a}}}")
                raise KeyError("mine")
        self.assert_free(a, b)

        # leases that lapse without heartbeats: both lost, both named
        group = self.client.lock_many([a, b], lease=0.15, heartbeat=0)
        self.assertTrue(group.acquire(blocking=False))
        self.assertTrue(wait_for(lambda: not group[0].valid and not group[1].valid, 3))
        self.assertTrue(wait_for(lambda: cli("EXISTS", f"dlock:{{{a}}}") == "0"
                                 and cli("EXISTS", f"dlock:{{{b}}}") == "0", 3))
        with self.assertRaises(dlock.NotHeld) as cm:
            group.release()
        self.assertIn(f"'{a}'", str(cm.exception))
        self.assertIn(f"'{b}'", str(cm.exception))
        self.assertTrue(group.released)

    def test_bad_input(self):
        a, b = self.names("bad")
        c = self.client
        for names in ([], (), iter([])):
            with self.assertRaises(dlock.InvalidArgument):
                c.lock_many(names)
        for names in ([a, a], [a, b, a], [a, a.encode()]):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                c.lock_many(names)
            self.assertIn("twice", str(cm.exception))
            self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaises(dlock.InvalidArgument):
            c.lock_many([a, "x\0y"])
        for names in (a, a.encode(), 5, None, [a, 5]):
            with self.assertRaises(TypeError, msg=repr(names)):
                c.lock_many(names)
        with self.assertRaises(TypeError):
            c.lock_many([a, b], on_release_requested=lambda lock, reason: None)
        with self.assertRaises(TypeError):
            c.alock_many([a, b], wait=5)
        with self.assertRaises(dlock.InvalidArgument):
            c.lock_many([a, b], lease=-1)
        with self.assertRaises(ValueError):
            c.lock_many([a, b], blocking=False, timeout=5)
        too_long = "x" * (dlock.MAX_NAME_BYTES + 1)
        with self.assertRaises(dlock.InvalidArgument):  # the library's check, at acquire
            c.lock_many([a, too_long]).acquire(blocking=False)
        # the library itself refuses what the binding checks first
        h = c._enter()
        try:
            out = (dlock._lib.c_lock_p * 2)()
            twice = (ctypes.c_char_p * 2)(a.encode(), a.encode())
            self.assertEqual(dlock._c.dlock_acquire_many(h, twice, 2, None, out),
                             dlock.InvalidArgument.status)
            self.assertEqual(dlock._c.dlock_acquire_many(h, twice, 0, None, out),
                             dlock.InvalidArgument.status)
        finally:
            c._leave()
        self.assert_free(a, b)
        self.assertEqual(dlock._lost_slots, {})

    def test_asyncio(self):
        a, b = self.names("async")

        async def main():
            loop = asyncio.get_running_loop()
            lost = loop.create_future()

            def on_lost(lock):
                if not lost.done():
                    lost.set_result((lock, threading.current_thread() is threading.main_thread()))

            async with self.client.alock_many([b, a], timeout=5, lease=1, heartbeat=0.25,
                                              on_lost=on_lost) as (lb, la):
                self.assertEqual((lb.name, la.name), (b, a))
                self.assertNotEqual(lb.fencing_token, la.fencing_token)
                self.assertEqual((await self.client.ainspect(a)).holders[0].fencing_token,
                                 la.fencing_token)
                with self.assertRaises(dlock.NotAcquired):
                    async with self.client.alock_many([a], blocking=False):
                        self.fail("entered a held name")
                await la.aextend(5)
            self.assert_free(a, b)
            # awaitable; a lost hold named on the way out of `async with`
            group = self.client.alock_many([a, b], lease=1, heartbeat=0.25, on_lost=on_lost)
            x, y = await group
            self.other.break_lock(a, now=True)
            lock, on_main = await asyncio.wait_for(lost, 5)
            self.assertIs(lock, x)
            self.assertTrue(on_main, "on_lost did not run on the loop's thread")
            with self.assertRaises(dlock.NotHeld) as cm:
                await group.arelease()
            self.assertIn(f"'{a}'", str(cm.exception))
            self.assertNotIn(f"'{b}'", str(cm.exception))
            self.assert_free(a, b)
            # not acquired: False / NotAcquired, and nothing held
            blocker = self.other.acquire(b)
            self.assertFalse(await group.aacquire(blocking=False))
            self.assertFalse(await group.aacquire(timeout=0.2))
            self.assert_free(a)
            # a cancelled wait returns at once; the worker gives back what it gets later
            task = asyncio.ensure_future(group.aacquire(timeout=2))
            await asyncio.sleep(0.2)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertTrue(group.released)
            blocker.release()
            await asyncio.sleep(0.3)  # the worker takes both, then gives them back
            self.assertTrue(wait_for(lambda: not self.third.inspect(a).holders
                                     and not self.third.inspect(b).holders, 5))
            self.assertTrue(await group.aacquire(timeout=5))  # usable again
            await group.arelease()

        asyncio.run(main())
        self.assert_free(a, b)
        self.assertTrue(wait_for(lambda: not dlock._lost_slots), dlock._lost_slots)


class MaxHold(Base):
    """max_hold=: the heartbeats keep the lock past its first lease, then stop at max_hold; the
    lock ends with its lease and is reported lost with the cause "max_hold"."""

    # A lease of 0.8 s renewed every 0.2 s, kept at most 1.2 s: valid at ~1.0 s (past the
    # first lease), lost by ~2.0 s (max_hold + lease).
    OPTIONS = dict(lease=0.8, heartbeat=0.2, max_hold=1.2)

    def test_renewed_past_its_lease_then_lost_with_cause_max_hold(self):
        name = unique("maxhold")
        events = []
        self.client.on_event(lambda e: events.append(e) if e.name == name else None)
        lost = threading.Event()
        seen = []

        def on_lost(lk):
            seen.append(lk.lost_cause)
            lost.set()

        start = time.monotonic()
        lock = self.client.acquire(name, on_lost=on_lost, **self.OPTIONS)
        time.sleep(max(0.0, start + 1.0 - time.monotonic()))
        self.assertTrue(lock.valid, "not renewed past its first lease")
        self.assertIsNone(lock.lost_cause)
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "1")
        self.assertTrue(lost.wait(10), "on_lost never ran")
        self.assertGreaterEqual(time.monotonic() - start, 1.2)
        self.assertFalse(lock.valid)
        self.assertTrue(seen[0].startswith("max_hold: "), seen)
        self.assertIn("max_hold_ms 1200", seen[0])
        self.assertTrue(lock.lost_cause.startswith("max_hold: "), lock.lost_cause)
        self.assertTrue(wait_for(lambda: any(e.type == "lost" for e in events)), events)
        event = next(e for e in events if e.type == "lost")
        self.assertEqual(event.cause, "max_hold")
        self.assertTrue(event.detail.startswith("max_hold: "), event.detail)
        self.assertEqual(event.fencing_token, lock.fencing_token)
        self.assertIn('dlock_losses_total{cause="max_hold"} 1\n', self.client.metrics_text())
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.release()
        self.assertEqual(cm.exception.cause, "max_hold")
        # the _ms spelling says the same; 0 is no maximum
        self.assertEqual(self.client.lock("x", max_hold_ms=1200, lease_ms=800)._spec.max_hold_ms,
                         self.client.lock("x", max_hold=1.2, lease=0.8)._spec.max_hold_ms)
        with self.client.lock(unique("maxhold"), lease=5, max_hold=0) as plain:
            self.assertTrue(plain.valid)

    def test_asyncio_renewed_past_its_lease_then_lost_with_cause_max_hold(self):
        name = unique("maxhold")

        async def main():
            loop = asyncio.get_running_loop()
            lost = loop.create_future()
            start = loop.time()
            lock = await self.client.aacquire(
                name, on_lost=lambda lk: lost.set_result((lk.lost_cause, asyncio.get_running_loop())),
                **self.OPTIONS)
            await asyncio.sleep(max(0.0, start + 1.0 - loop.time()))  # the loop runs meanwhile
            self.assertTrue(lock.valid, "not renewed past its first lease")
            self.assertIsNone(lock.lost_cause)
            cause, on_loop = await asyncio.wait_for(lost, 10)
            self.assertIs(on_loop, loop)
            self.assertGreaterEqual(loop.time() - start, 1.2)
            self.assertTrue(cause.startswith("max_hold: "), cause)
            self.assertFalse(lock.valid)
            with self.assertRaises(dlock.NotHeld) as cm:
                await lock.arelease()
            self.assertEqual(cm.exception.cause, "max_hold")

        asyncio.run(main())

    def test_a_max_hold_needs_a_lease_and_a_number_of_seconds(self):
        c = self.client
        for call in (lambda: c.acquire(unique(), lease=0, max_hold=1),
                     lambda: c.lock(unique(), lease_ms=0, max_hold_ms=1000).acquire()):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                call()
            self.assertIn("max_hold_ms 1000", str(cm.exception))

        async def main():
            with self.assertRaisesRegex(dlock.InvalidArgument, "max_hold_ms 1000"):
                await c.aacquire(unique(), lease=0, max_hold=1)
            with self.assertRaisesRegex(dlock.InvalidArgument, "max_hold_ms 1000"):
                await c.acampaign(unique(), lease=0, max_hold=1)

        asyncio.run(main())
        with self.assertRaisesRegex(dlock.InvalidArgument, "max_hold_ms 1000"):
            c.campaign(unique(), lease=0, max_hold=1)
        # out of range: the library's words (above ten years), or the binding's naming it
        o = dlock._c.dlock_options_new()
        try:
            self.assertEqual(dlock._c.dlock_options_set_max_hold_ms(o, dlock._limits["MAX_LEASE_MS"]), 0)
            too_long = library_says(dlock._c.dlock_options_set_max_hold_ms, o,
                                    dlock._limits["MAX_LEASE_MS"] + 1)
        finally:
            dlock._c.dlock_options_free(o)
        self.assertIn("max_hold_ms", too_long)
        with self.assertRaises(dlock.InvalidArgument) as cm:
            c.lock("x", max_hold_ms=dlock._limits["MAX_LEASE_MS"] + 1)
        self.assertEqual(str(cm.exception), too_long)
        for kw, words in (({"max_hold": -1}, "max_hold -1 s is negative"),
                          ({"max_hold": 1e300}, "max_hold 1e+300 s is too long"),
                          ({"max_hold": float("nan")}, "max_hold must be a number of seconds, not NaN"),
                          ({"max_hold_ms": -1}, "max_hold_ms -1 is negative"),
                          ({"max_hold_ms": 2**64}, "too long (at most ten years; 0 means no maximum)")):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                c.lock("x", **kw)
            self.assertIn(words, str(cm.exception))
        for kw in ({"max_hold": "60"}, {"max_hold": True}, {"max_hold_ms": 1.5},
                   {"max_hold": 1, "max_hold_ms": 1000}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.lock("x", **kw)
        with self.assertRaises(TypeError):
            c.campaign("x", max_hold=1, wait_ms=0)  # a campaign's other options stay refused


class MinHoldAndLockDelay(Base):
    """min_hold=: the name stays taken at least that long after the acquire, however the hold
    ends; lock_delay=: after a lease runs out, the name stays closed that long more."""

    def test_an_early_release_leaves_the_name_closed_until_the_min_hold(self):
        name = unique("minhold")
        self.assertTrue({"min_hold", "lock_delay"} <= self.client.capabilities)
        start = time.monotonic()
        lock = self.client.acquire(name, lease=5, min_hold=1.0, owner="cron")
        token = lock.fencing_token
        lock.release()  # at once: it leaves a marker with no owner
        self.assertLess(time.monotonic() - start, 0.9)
        with dlock.Client(URL) as other:
            with self.assertRaises(dlock.NotAcquired) as cm:
                other.acquire(name, blocking=False)
            self.assertIn("min_hold", str(cm.exception))
            info = other.inspect(name)
            self.assertEqual(info.holders, [])
            self.assertTrue(0 < info.closed_ms <= 1000, info)
            self.assertEqual(info.closed_by, "min_hold")
            # once the min hold has passed since the acquire: taken, with a greater token
            after = other.acquire(name, timeout=5)
            self.assertGreaterEqual(time.monotonic() - start, 0.9)
            self.assertGreater(after.fencing_token, token)
            after.release()
        # the _ms spelling says the same; 0 is none (a release frees the name at once)
        self.assertEqual(self.client.lock("x", min_hold_ms=1500)._spec.min_hold_ms,
                         self.client.lock("x", min_hold=1.5)._spec.min_hold_ms)
        plain = unique("minhold")
        self.client.acquire(plain, min_hold=0).release()
        self.client.acquire(plain, blocking=False, min_hold_ms=0).release()

    def test_asyncio_min_hold(self):
        name = unique("minhold")

        async def main():
            start = time.monotonic()
            lock = await self.client.aacquire(name, lease=5, min_hold=1.0)
            token = lock.fencing_token
            await lock.arelease()
            with self.assertRaisesRegex(dlock.NotAcquired, "min_hold"):
                await self.client.aacquire(name, blocking=False)
            info = await self.client.ainspect(name)
            self.assertEqual((info.holders, info.closed_by), ([], "min_hold"))
            after = await self.client.aacquire(name, timeout=5)
            self.assertGreaterEqual(time.monotonic() - start, 0.9)
            self.assertGreater(after.fencing_token, token)
            await after.arelease()

        asyncio.run(main())

    def test_a_lease_that_runs_out_leaves_the_name_closed_for_the_lock_delay(self):
        name = unique("lockdelay")
        start = time.monotonic()
        # A lease of 0.5 s, no heartbeats, never released: it ends uncleanly, then 1 s of delay.
        lock = self.client.acquire(name, lease=0.5, heartbeat=0, lock_delay=1.0)
        token = lock.fencing_token
        with dlock.Client(URL) as other:
            time.sleep(max(0.0, start + 0.7 - time.monotonic()))
            with self.assertRaises(dlock.NotAcquired) as cm:
                other.acquire(name, blocking=False)
            self.assertIn("lock_delay", str(cm.exception))
            info = other.inspect(name)
            self.assertEqual(info.holders, [])
            self.assertTrue(0 < info.closed_ms <= 1000, info)
            self.assertEqual(info.closed_by, "lock_delay")
            after = other.acquire(name, timeout=5)
            self.assertGreaterEqual(time.monotonic() - start, 1.4)
            self.assertGreater(after.fencing_token, token)
            after.release()
        with self.assertRaises(dlock.NotHeld):
            lock.release()
        # a release is a clean end: no delay
        clean = unique("lockdelay")
        self.client.acquire(clean, lease=5, lock_delay_ms=10_000).release()
        self.client.acquire(clean, blocking=False).release()
        self.assertEqual(self.client.lock("x", lock_delay_ms=1500)._spec.lock_delay_ms,
                         self.client.lock("x", lock_delay=1.5)._spec.lock_delay_ms)

    def test_bad_values_are_refused_naming_the_option(self):
        c = self.client
        self.assertEqual(dlock.MAX_LOCK_DELAY_MS, 60_000)
        # above the cap: the library's words, at lock() already
        o = dlock._c.dlock_options_new()
        try:
            self.assertEqual(dlock._c.dlock_options_set_lock_delay_ms(o, 60_000), 0)
            too_long = library_says(dlock._c.dlock_options_set_lock_delay_ms, o, 60_001)
            self.assertEqual(dlock._c.dlock_options_set_min_hold_ms(o, dlock._limits["MAX_LEASE_MS"]), 0)
            min_too_long = library_says(dlock._c.dlock_options_set_min_hold_ms, o,
                                        dlock._limits["MAX_LEASE_MS"] + 1)
        finally:
            dlock._c.dlock_options_free(o)
        self.assertIn("lock_delay_ms 60001", too_long)
        self.assertIn("min_hold_ms", min_too_long)
        for kw in ({"lock_delay_ms": 60_001}, {"lock_delay": 60.001}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                c.lock("x", **kw)
            self.assertEqual(str(cm.exception), too_long)
        with self.assertRaises(dlock.InvalidArgument) as cm:
            c.lock("x", min_hold_ms=dlock._limits["MAX_LEASE_MS"] + 1)
        self.assertEqual(str(cm.exception), min_too_long)
        # a min hold above the max hold: refused at acquire, naming both
        for call in (lambda: c.acquire(unique(), lease=1, max_hold=1, min_hold=2),
                     lambda: c.lock(unique(), lease_ms=1000, max_hold_ms=1000, min_hold_ms=2000).acquire(),
                     lambda: c.campaign(unique(), lease=1, max_hold=1, min_hold=2)):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                call()
            self.assertIn("min_hold_ms 2000", str(cm.exception))
            self.assertIn("max_hold_ms 1000", str(cm.exception))

        async def main():
            with self.assertRaisesRegex(dlock.InvalidArgument, "min_hold_ms 2000"):
                await c.aacquire(unique(), lease=1, max_hold=1, min_hold=2)
            with self.assertRaisesRegex(dlock.InvalidArgument, "lock_delay_ms 60001"):
                await c.acampaign(unique(), lock_delay_ms=60_001)

        asyncio.run(main())
        for kw, words in (({"min_hold": -1}, "min_hold -1 s is negative"),
                          ({"min_hold": 1e300}, "min_hold 1e+300 s is too long"),
                          ({"min_hold": float("nan")}, "min_hold must be a number of seconds, not NaN"),
                          ({"min_hold_ms": -1}, "min_hold_ms -1 is negative"),
                          ({"min_hold_ms": 2**64}, "too long (at most ten years; 0 means no minimum)"),
                          ({"lock_delay": -1}, "lock_delay -1 s is negative"),
                          ({"lock_delay": float("nan")}, "lock_delay must be a number of seconds, not NaN"),
                          ({"lock_delay_ms": -1}, "lock_delay_ms -1 is negative"),
                          ({"lock_delay_ms": 2**64}, "too long (at most 60000 ms; 0 means none)")):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                c.lock("x", **kw)
            self.assertIn(words, str(cm.exception))
        for kw in ({"min_hold": "60"}, {"min_hold": True}, {"min_hold_ms": 1.5},
                   {"min_hold": 1, "min_hold_ms": 1000}, {"lock_delay": "1"},
                   {"lock_delay_ms": 1.5}, {"lock_delay": 1, "lock_delay_ms": 1000}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.lock("x", **kw)


class BreakLock(Base):
    """client.break_lock(name, reason, now): an operator's takeover. The broken holder hears it
    at its next renewal (within its heartbeat period) and is reported lost with the cause
    "broken"; the name stays closed until the broken lease would have ended, unless now=True."""

    # A lease of 1 s renewed every 0.25 s: the holder hears of the break within ~0.25 s.
    OPTIONS = dict(lease=1, heartbeat=0.25, owner="holder-7")

    def hold(self, name):
        lost = threading.Event()
        seen = []

        def on_lost(lk):
            seen.append(lk.lost_cause)
            lost.set()

        return self.client.acquire(name, on_lost=on_lost, **self.OPTIONS), lost, seen

    def test_the_capability(self):
        self.assertIn("break", self.client.capabilities)
        self.assertEqual(dlock.MAX_REASON_BYTES, 1024)

    def test_a_broken_holder_is_lost_with_cause_broken_and_the_name_stays_closed(self):
        name = unique("break")
        events = []
        self.client.on_event(lambda e: events.append(e) if e.name == name else None)
        lock, lost, seen = self.hold(name)
        token = lock.fencing_token
        with dlock.Client(URL) as operator:
            info = operator.break_lock(name, reason="disk full on db-3")
            self.assertIsInstance(info, dlock.LockInfo)
            self.assertEqual(len(info.holders), 1, info)
            broken = info.holders[0]
            self.assertEqual(broken.owner, "holder-7")
            self.assertEqual(broken.fencing_token, lock.fencing_token)
            self.assertTrue(0 < broken.remaining_ms <= 1000, broken)
            self.assertTrue(0 < info.closed_ms <= 1000, info)
            self.assertEqual(info.closed_by, "broken")
            # closed: no holder, closed_ms > 0, and nobody takes it meanwhile
            seen_now = operator.inspect(name)
            self.assertEqual(seen_now.holders, [])
            self.assertGreater(seen_now.closed_ms, 0)
            self.assertEqual(seen_now.closed_by, "broken")
            with self.assertRaises(dlock.NotAcquired):
                operator.acquire(name, blocking=False)
            # the holder hears it at its next renewal
            self.assertTrue(lost.wait(5), "on_lost never ran")
            self.assertTrue(seen[0].startswith("broken"), seen)
            self.assertIn("disk full on db-3", seen[0])
            self.assertFalse(lock.valid)
            self.assertEqual(lock.lost_cause, seen[0])
            with self.assertRaises(dlock.NotHeld) as cm:
                lock.release()
            self.assertEqual(cm.exception.cause, "broken")
            self.assertTrue(wait_for(lambda: any(e.type == "lost" for e in events)), events)
            event = next(e for e in events if e.type == "lost")
            self.assertEqual(event.cause, "broken")
            self.assertEqual(event.fencing_token, token)
            self.assertIn('dlock_losses_total{cause="broken"} 1\n', self.client.metrics_text())
            # once the broken lease would have ended, the name opens with a greater token
            after = operator.acquire(name, timeout=5)
            self.assertGreater(after.fencing_token, token)
            self.assertEqual(operator.inspect(name).closed_ms, 0)
            self.assertEqual(operator.inspect(name).closed_by, "")
            after.release()

    def test_now_frees_the_name_at_once(self):
        name = unique("break")
        lock, lost, seen = self.hold(name)
        with dlock.Client(URL) as operator:
            info = operator.break_lock(name, "failover", now=True)
            self.assertEqual([(h.owner, h.fencing_token) for h in info.holders],
                             [("holder-7", lock.fencing_token)])
            self.assertEqual((info.closed_ms, info.closed_by), (0, ""))
            taken = operator.acquire(name, blocking=False)
            self.assertGreater(taken.fencing_token, lock.fencing_token)
            self.assertTrue(lost.wait(5), "on_lost never ran")
            self.assertTrue(seen[0].startswith("broken"), seen)
            self.assertIn("failover", seen[0])
            self.assertFalse(lock.valid)
            # the broken holder's release changes nothing of the new holder's
            with self.assertRaises(dlock.NotHeld):
                lock.release()
            self.assertEqual(operator.inspect(name).holders[0].fencing_token, taken.fencing_token)
            taken.release()

    def test_a_free_name_and_bad_input(self):
        c = self.client
        info = c.break_lock(unique("break"))
        self.assertEqual(info, dlock.LockInfo("exclusive", []))
        self.assertEqual(c.break_lock(unique("break"), "", now=True).holders, [])
        name = unique("break")
        too_long = "r" * (dlock.MAX_REASON_BYTES + 1)
        with self.assertRaises(dlock.InvalidArgument) as cm:
            c.break_lock(name, too_long)
        self.assertEqual(str(cm.exception), library_says(
            lambda: dlock._c.dlock_break_with(c._h, name.encode(), too_long.encode(), 0, None)))
        c.break_lock(name, "r" * dlock.MAX_REASON_BYTES)  # at most is fine
        for bad in ("", "x" * (dlock.MAX_NAME_BYTES + 1)):
            with self.assertRaises(dlock.InvalidArgument):
                c.break_lock(bad, "why")
        with self.assertRaises(dlock.InvalidArgument):
            c.break_lock(name, "a\0b")
        for kw in ({"reason": 5}, {"reason": b"bytes"}, {"now": 1}, {"now": "yes"}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.break_lock(name, **kw)
        with self.assertRaises(TypeError):
            c.break_lock(5)
        c.close()
        with self.assertRaises(dlock.InvalidArgument):
            c.break_lock(name)

    def test_asyncio(self):
        name = unique("break")

        async def main():
            loop = asyncio.get_running_loop()
            lost = loop.create_future()
            lock = await self.client.aacquire(
                name, on_lost=lambda lk: lost.done() or lost.set_result(lk.lost_cause), **self.OPTIONS)
            with dlock.Client(URL) as operator:
                info = await operator.abreak_lock(name, reason="async operator", now=True)
                self.assertEqual(info.holders[0].fencing_token, lock.fencing_token)
                self.assertEqual(info.holders[0].owner, "holder-7")
                cause = await asyncio.wait_for(lost, 5)
                self.assertTrue(cause.startswith("broken"), cause)
                self.assertIn("async operator", cause)
                with self.assertRaises(dlock.NotHeld) as cm:
                    await lock.arelease()
                self.assertEqual(cm.exception.cause, "broken")
                closed = await operator.abreak_lock(name)  # nobody holds it now
                self.assertEqual(closed.holders, [])
                self.assertEqual((await operator.ainspect(name)).closed_ms, 0)

        asyncio.run(main())


class ReleaseRequests(Base):
    """client.request_release(name, reason): a holder acquired with on_release_requested= hears
    the reason and may let go. Its subscription is live one round trip after its acquire, and a
    request sent before then is missed: the tests ask again until it is heard."""

    def ask_until_heard(self, asker, name, reason, heard):
        end = time.monotonic() + 5
        while time.monotonic() < end:
            self.assertTrue(asker.request_release(name, reason))
            if heard.wait(0.15):
                return True
        return False

    def test_the_holder_hears_the_reason_and_may_release_in_the_handler(self):
        self.assertIn("release_request", self.client.capabilities)
        name = unique("ask")
        heard = threading.Event()
        seen = []

        def on_request(lk, reason):
            seen.append((lk, reason, threading.current_thread().name))
            lk.release()
            heard.set()

        lock = self.client.acquire(name, on_release_requested=on_request)
        with dlock.Client(URL) as asker:
            self.assertTrue(self.ask_until_heard(asker, name, "deploy #42", heard), "never heard")
            self.assertEqual(seen, [(lock, "deploy #42", "dlock-events")])
            self.assertTrue(lock.released)
            self.assertEqual(asker.inspect(name).holders, [])
            self.assertFalse(asker.request_release(name, "again"))  # free now: nobody to ask

    def test_a_free_name_and_bad_input(self):
        c = self.client
        self.assertIs(c.request_release(unique("ask")), False)
        self.assertIs(c.request_release(unique("ask"), ""), False)
        with self.assertRaises(dlock.InvalidArgument):
            c.request_release(unique("ask"), "r" * (dlock.MAX_REASON_BYTES + 1))
        with self.assertRaises(dlock.InvalidArgument):
            c.request_release("")
        for bad in ({"reason": 5}, {"reason": b"bytes"}):
            with self.assertRaises(TypeError):
                c.request_release("x", **bad)
        with self.assertRaises(TypeError):
            c.lock("x", on_release_requested="not callable")
        c.close()
        with self.assertRaises(dlock.InvalidArgument):
            c.request_release("x")

    def test_asyncio(self):
        name = unique("ask")

        async def main():
            loop = asyncio.get_running_loop()
            heard = loop.create_future()
            releases = []

            def on_request(lk, reason):  # on this event loop
                self.assertIs(asyncio.get_running_loop(), loop)
                if not heard.done():
                    heard.set_result(reason)
                    releases.append(loop.create_task(lk.arelease()))

            lock = await self.client.aacquire(name, on_release_requested=on_request)
            with dlock.Client(URL) as asker:
                for _ in range(30):
                    self.assertTrue(await asker.arequest_release(name, "async asker"))
                    await asyncio.wait([heard], timeout=0.15)
                    if heard.done():
                        break
                self.assertEqual(heard.result(), "async asker")
                await releases[0]
                self.assertTrue(lock.released)
                self.assertFalse(await asker.arequest_release(name))

        asyncio.run(main())


class Reentrancy(Base):
    """reentrant="ctx": the same client and context re-enter their hold (a Lock of its own, the
    same fencing token, no wait); only the last release frees the name."""

    def test_the_same_context_reenters_and_the_last_release_frees(self):
        name = unique("reentrant")
        with dlock.Client(URL) as other:
            outer = self.client.acquire(name, lease=5, reentrant="task-7")
            inner = self.client.acquire(name, blocking=False, reentrant=b"task-7")
            self.assertIsNot(inner, outer)
            self.assertEqual(inner.fencing_token, outer.fencing_token)
            with self.assertRaises(dlock.NotAcquired):  # another context, or none, contends
                self.client.acquire(name, blocking=False, reentrant="task-8")
            with self.assertRaises(dlock.NotAcquired):
                self.client.acquire(name, blocking=False)
            inner.release()
            with self.assertRaises(dlock.NotAcquired):
                other.acquire(name, blocking=False)
            self.assertTrue(outer.valid)
            outer.release()
            other.acquire(name, blocking=False).release()

    def test_asyncio_tasks(self):
        name = unique("reentrant")

        async def main():
            ctx = str(id(asyncio.current_task()))
            async with self.client.alock(name, reentrant=ctx) as outer:
                inner = await self.client.aacquire(name, blocking=False, reentrant=ctx)
                self.assertEqual(inner.fencing_token, outer.fencing_token)

                async def another_task():
                    return await self.client.aacquire(name, blocking=False,
                                                      reentrant=str(id(asyncio.current_task())))
                with self.assertRaises(dlock.NotAcquired):
                    await asyncio.create_task(another_task())
                await inner.arelease()
                self.assertTrue(outer.valid)
            self.assertEqual(self.client.inspect(name).holders, [])

        asyncio.run(main())

    def test_bad_contexts(self):
        with self.assertRaises(dlock.InvalidArgument) as cm:
            self.client.lock("x", reentrant="")
        self.assertIn("reentrant context is empty", str(cm.exception))
        with self.assertRaises(dlock.InvalidArgument) as cm:  # the library's check, its words
            self.client.lock("x", reentrant="c" * 257)
        self.assertIn("reentrant context is longer than 256 bytes", str(cm.exception))
        self.client.lock("x", reentrant="c" * 256)
        with self.assertRaises(TypeError):
            self.client.lock("x", reentrant=7)


class SlowCallbacks(Base):
    def test_a_slow_on_lost_holds_up_no_heartbeat(self):
        # on_lost runs on the binding's dlock-events thread, fed by the library's completion
        # queue: while it sleeps, the client's own thread keeps renewing its other locks.
        started = threading.Event()

        def slow(lock):
            started.set()
            time.sleep(2.5)  # more than three leases of `steady`

        # Renewed every 100 ms: a renewal may come 700 ms late on a busy machine.
        steady = self.client.acquire(unique("steady"), lease_ms=800, heartbeat_ms=100)
        doomed_name = unique("doomed")
        doomed = self.client.acquire(doomed_name, lease_ms=800, heartbeat_ms=100, on_lost=slow)
        cli("DEL", f"dlock:{{{doomed_name}}}")  # behind the holder's back
        self.assertTrue(started.wait(10), "on_lost never ran")
        time.sleep(2.7)
        self.assertGreater(int(cli("PTTL", f"dlock:{{{steady.name}}}")), 0,
                           "the lease ran out on the server while on_lost slept")
        self.assertTrue(steady.valid)
        steady.release()
        self.assertFalse(doomed.valid)


class Errors(Base):
    def test_every_status_has_a_class(self):
        expect = {
            1: (dlock.NotAcquired, "DLOCK_NOT_ACQUIRED"),
            2: (dlock.NotHeld, "DLOCK_NOT_HELD"),
            3: (dlock.InvalidArgument, "DLOCK_EINVAL"),
            4: (dlock.ConnectionError, "DLOCK_EIO"),
            5: (dlock.BackendError, "DLOCK_EBACKEND"),
            6: (dlock.AuthError, "DLOCK_EAUTH"),
            7: (dlock.Cancelled, "DLOCK_ECANCELLED"),
            8: (dlock.OutOfMemory, "DLOCK_ENOMEM"),
            9: (dlock.InternalError, "DLOCK_EINTERNAL"),
        }
        for status, (cls, code) in expect.items():
            e = dlock._error(status, "msg")
            self.assertIs(type(e), cls)
            self.assertIsInstance(e, dlock.Error)
            self.assertEqual((e.status, e.code, str(e), e.message), (status, code, "msg", "msg"))
            self.assertEqual(cls.code, dlock._status_name(status))
        self.assertIsInstance(dlock._error(1, "m"), TimeoutError)
        self.assertIsInstance(dlock._error(3, "m"), ValueError)
        self.assertIsInstance(dlock._error(4, "m"), ConnectionError)
        self.assertIsInstance(dlock._error(8, "m"), MemoryError)
        # a status a newer library may add: a plain Error, with the library's name for it
        e = dlock._error(77, "")
        self.assertIs(type(e), dlock.Error)
        self.assertEqual((e.status, e.code, str(e)), (77, "DLOCK_UNKNOWN", "DLOCK_UNKNOWN"))
        e = dlock._error(77, "what happened")
        self.assertEqual((e.status, e.code, str(e)), (77, "DLOCK_UNKNOWN", "what happened"))

    def test_not_acquired_and_not_held(self):
        name = unique()
        lock = self.client.acquire(name)
        with dlock.Client(URL) as other:
            with self.assertRaises(dlock.NotAcquired) as cm:
                other.acquire(name, blocking=False)
        self.assertEqual(cm.exception.status, 1)
        cli("DEL", f"dlock:{{{name}}}")
        with self.assertRaises(dlock.NotHeld) as cm:
            lock.extend(5000)
        self.assertIn(name, str(cm.exception))
        with self.assertRaises(dlock.NotHeld):
            lock.release()

    def test_invalid_argument(self):
        for url in ("bogus://x", f"redis://127.0.0.1:{PORT}?nope=1", "redis://h:notaport"):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                dlock.Client(url)
            self.assertTrue(str(cm.exception))
            self.assertIsInstance(cm.exception, ValueError)

    def test_connection_error(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with self.assertRaises(dlock.ConnectionError) as cm:
            dlock.Client(f"redis://127.0.0.1:{port}?connect_timeout_ms=500")
        self.assertIn(f"127.0.0.1:{port}", str(cm.exception))
        self.assertIn("Connection refused", str(cm.exception))
        self.assertIsInstance(cm.exception, ConnectionError)

    def test_auth_error(self):
        user = unique("user")
        cli("ACL", "SETUSER", user, "on", ">right", "~*", "&*", "+@all")
        try:
            with self.assertRaises(dlock.AuthError) as cm:
                dlock.Client(f"redis://{user}:wrong@127.0.0.1:{PORT}")
            self.assertNotIn("wrong", str(cm.exception))
            with dlock.Client(f"redis://{user}:right@127.0.0.1:{PORT}") as c:
                c.acquire(unique()).release()
        finally:
            cli("ACL", "DELUSER", user)

    def test_backend_error(self):
        name = unique()
        cli("SET", f"dlock:{{{name}}}:fence", "not-a-number")
        with self.assertRaises(dlock.BackendError) as cm:
            self.client.acquire(name)
        self.assertTrue(str(cm.exception))
        self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")

    @unittest.skipUnless(dlock._use_async_c, "needs the library's async API")
    def test_cancelled(self):
        name = unique()
        holder = self.client.acquire(name)
        client = dlock.Client(URL)

        async def main():
            task = asyncio.ensure_future(client.aacquire(name, wait_ms=-1))
            await asyncio.sleep(0.2)
            await client.aclose()  # cancels the pending acquire
            with self.assertRaises(dlock.Cancelled) as cm:
                await task
            self.assertIn("closed", str(cm.exception))  # the queue entry's message

        asyncio.run(main())
        holder.release()


class BadInput(Base):
    def test_wrong_types_are_type_errors(self):
        c = self.client
        for bad in (123, None, 1.5, ["x"], object()):
            with self.assertRaises(TypeError):
                c.acquire(bad)
        for kw in ({"lease_ms": "10"}, {"lease_ms": 1.5}, {"lease_ms": True}, {"wait_ms": "1"},
                   {"heartbeat_ms": 2.0}, {"retry_ms": 5}, {"retry_ms": ("a", 1)}, {"owner": 7},
                   {"on_lost": 5}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.acquire(unique(), **kw)
        with self.assertRaises(TypeError):
            dlock.Client(5)
        with self.assertRaises(TypeError):
            c.acquire()  # missing name
        with self.assertRaises(TypeError):
            c.acquire("x", 1000)  # options are keyword-only
        lock = c.acquire(unique())
        with self.assertRaises(TypeError):
            lock.extend("1000")
        lock.release()

    def test_bad_values_are_value_errors(self):
        c = self.client
        cases = [
            ("x" * 1025, {}),                # one byte over DLOCK_MAX_NAME_BYTES
            ("x" * 1_000_000, {}),           # huge
            ("é" * 513, {}),                 # 1026 bytes in UTF-8
            ("", {}),
            (b"a\0b", {}),
            ("a\0b", {}),
            (unique(), {"lease_ms": -1}),
            (unique(), {"lease_ms": 2**64}),
            (unique(), {"lease_ms": 20 * 365 * 86400 * 1000}),  # over 10 years
            (unique(), {"wait_ms": -2}),
            (unique(), {"lease_ms": 1000, "heartbeat_ms": 1000}),
            (unique(), {"retry_ms": (0, 10)}),
            (unique(), {"retry_ms": (10, 5)}),
            (unique(), {"owner": "o" * 257}),
            (unique(), {"owner": "a\0b"}),
        ]
        for name, kw in cases:
            with self.assertRaises(dlock.InvalidArgument, msg=f"{name[:20]!r} {kw}") as cm:
                c.acquire(name, **kw)
            self.assertIsInstance(cm.exception, ValueError)
            self.assertTrue(str(cm.exception))
        self.assertEqual(cli("KEYS", "dlock:{t-*}"), "", "bad input left a lock behind")
        ok = c.acquire("x" * 1024)  # exactly the limit is fine
        ok.release()
        ok = c.acquire(b"\xff\xfe raw bytes")
        self.assertEqual(ok.name, b"\xff\xfe raw bytes")
        ok.release()
        lock = c.acquire(unique())
        with self.assertRaises(ValueError):
            lock.extend(-5)
        with self.assertRaises(ValueError):
            lock.extend(lease_ms=5)  # too short for the library
        with self.assertRaises(ValueError):
            lock.extend(0.005)  # the same in seconds
        lock.release()
        with self.assertRaises(ValueError):
            dlock.Client("redis://127.0.0.1:1\0")


class Messages(Base):
    """Every exception carries dlock_last_error()'s message for the call that failed."""

    def test_open(self):
        url = "redis://h:notaport"
        with self.assertRaises(dlock.InvalidArgument) as cm:
            dlock.Client(url)
        out = ctypes.c_void_p()
        self.assertEqual(str(cm.exception), library_says(dlock._c.dlock_client_open, url.encode(),
                                                         ctypes.byref(out)))

    def test_acquire_and_extend(self):
        c, out = self.client, ctypes.c_void_p()
        for name in ("", "x" * 1025):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                c.acquire(name)
            self.assertEqual(str(cm.exception),
                             library_says(dlock._c.dlock_acquire, c._h, name.encode(), None, ctypes.byref(out)))
        o = dlock._c.dlock_options_new()
        try:
            with self.assertRaises(dlock.InvalidArgument) as cm:
                c.acquire("x", lease_ms=5)  # too short: the library's setter says so
            self.assertEqual(str(cm.exception),
                             library_says(dlock._c.dlock_options_set_lease_ms, o, 5))
        finally:
            dlock._c.dlock_options_free(o)
        lock = c.acquire(unique())
        with self.assertRaises(dlock.InvalidArgument) as cm:
            lock.extend(lease_ms=5)
        self.assertEqual(str(cm.exception), library_says(dlock._c.dlock_extend, lock._h, 5))

        async def main():
            with self.assertRaises(dlock.InvalidArgument) as acm:
                await c.aacquire("")
            self.assertEqual(str(acm.exception),
                             library_says(dlock._c.dlock_acquire, c._h, b"", None, ctypes.byref(out)))
            with self.assertRaises(dlock.InvalidArgument) as acm:
                await lock.aextend(0.005)
            self.assertEqual(str(acm.exception), library_says(dlock._c.dlock_extend, lock._h, 5))
            with dlock.Client(URL) as other:
                with self.assertRaises(dlock.NotAcquired) as acm:
                    await other.aacquire(lock.name, wait_ms=50)
            self.assertIn(f"'{lock.name}' is held by", str(acm.exception))

        asyncio.run(main())
        lock.release()

    def test_after_close(self):
        client = dlock.Client(URL)
        locks = [client.acquire(unique("closed")) for _ in range(4)]
        client.close()

        def check(cm, lock):
            # the library's: lock 'NAME' was released when its client was closed
            self.assertIn(f"'{lock.name}'", str(cm.exception))
            self.assertIn("client was closed", str(cm.exception))

        with self.assertRaises(dlock.NotHeld) as cm:
            locks[0].release()
        check(cm, locks[0])
        with self.assertRaises(dlock.NotHeld) as cm:
            locks[1].extend(1000)
        check(cm, locks[1])

        async def main():
            with self.assertRaises(dlock.NotHeld) as acm:
                await locks[2].arelease()
            check(acm, locks[2])
            with self.assertRaises(dlock.NotHeld) as acm:
                await locks[3].aextend(1000)
            check(acm, locks[3])

        asyncio.run(main())
        for lock in (locks[1], locks[3]):  # still hold their handles: free them
            with self.assertRaises(dlock.NotHeld):
                lock.release()
        with self.assertRaises(dlock.InvalidArgument) as cm:
            client.acquire("x")
        self.assertIn(f"client redis://127.0.0.1:{PORT} is closed", str(cm.exception))

    def test_a_dropped_lock_leaves_this_threads_message_alone(self):
        # Lock.__del__ may run between a failed call and its dlock_last_error() read: it must
        # make no dlock call on this thread (the dlock-events thread releases the lock).
        name = unique("dropped")
        forgotten = self.client.acquire(name, lease_ms=0, on_lost=lambda lock: None)
        with self.assertRaises(dlock.InvalidArgument) as cm:
            self.client.acquire("")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del forgotten
            gc.collect()
        self.assertEqual(dlock._c.dlock_last_error().decode(), str(cm.exception))
        self.assertTrue(wait_for(lambda: cli("EXISTS", f"dlock:{{{name}}}") == "0"))
        self.assertTrue(wait_for(lambda: not dlock._lost_slots and not dlock._pending))


class Ranges(Base):
    """Out-of-range numbers get the library's bound and words, not the C type's range."""

    def setUp(self):
        super().setUp()
        self.o = dlock._c.dlock_options_new()

    def tearDown(self):
        dlock._c.dlock_options_free(self.o)
        super().tearDown()

    def refused(self, call, **kw):
        with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
            call(**kw)
        self.assertNotIn(str(2**64 - 1), str(cm.exception))
        return str(cm.exception)

    def test_lease_and_heartbeat(self):
        c, lib = self.client, dlock._c
        self.assertEqual(lib.dlock_options_set_lease_ms(self.o, dlock._limits["MAX_LEASE_MS"]), 0)
        lease_words = library_says(lib.dlock_options_set_lease_ms, self.o, dlock._limits["MAX_LEASE_MS"] + 1)
        self.assertEqual(lib.dlock_options_set_heartbeat_ms(self.o, dlock._limits["MAX_LEASE_MS"]), 0)
        heartbeat_words = library_says(lib.dlock_options_set_heartbeat_ms, self.o, dlock._limits["MAX_LEASE_MS"] + 1)
        lock = c.acquire(unique())
        extend_words = library_says(lib.dlock_extend, lock._h, dlock._limits["MAX_LEASE_MS"] + 1)

        def bound(message):  # "lease_ms N is too long (BOUND)" -> BOUND
            return message.split(" (", 1)[1]

        for value in (-1, -2**70, 2**64, 2**70):
            self.assertEqual(bound(self.refused(c.acquire, name="x", lease_ms=value)), bound(lease_words))
            self.assertEqual(bound(self.refused(c.acquire, name="x", heartbeat_ms=value)), bound(heartbeat_words))
            self.assertEqual(bound(self.refused(lock.extend, lease_ms=value)), bound(extend_words))
        self.assertIn("lease_ms -1 is negative", self.refused(c.acquire, name="x", lease_ms=-1))
        # inside uint64_t: the library's own message
        self.assertEqual(self.refused(c.acquire, name="x", lease_ms=2**63),
                         library_says(lib.dlock_options_set_lease_ms, self.o, 2**63))

        async def main():
            message = self.refused(c.acquire, name="x", lease_ms=-1)
            with self.assertRaises(dlock.InvalidArgument) as cm:
                await c.aacquire("x", lease_ms=-1)
            self.assertEqual(str(cm.exception), message)
            with self.assertRaises(dlock.InvalidArgument) as cm:
                await lock.aextend(lease_ms=-1)
            self.assertEqual(str(cm.exception), message)

        asyncio.run(main())
        lock.release()

    def test_wait_and_retry(self):
        c, lib = self.client, dlock._c
        for value in (-2, -2**63):  # inside int64_t: the library's words
            self.assertEqual(self.refused(c.acquire, name="x", wait_ms=value),
                             library_says(lib.dlock_options_set_wait_ms, self.o, value))
        # outside int64_t: refused here, naming the option, never clamped
        for value in (-2**63 - 1, -2**70, 2**63, 2**70):
            self.assertIn(f"wait_ms {value} is out of range", self.refused(c.lock, name="x", wait_ms=value))
        retry_words = library_says(lib.dlock_options_set_retry_ms, self.o, 0, 5)
        for pair in ((0, 10), (10, 5)):
            self.assertEqual(self.refused(c.acquire, name="x", retry_ms=pair), retry_words)
        for pair, which in (((-1, 5), "retry_ms[0] -1"), ((5, -1), "retry_ms[1] -1"),
                            ((1, 2**64), f"retry_ms[1] {2**64}"), ((2**70, 2**70), f"retry_ms[0] {2**70}")):
            self.assertIn(which + " is out of range", self.refused(c.lock, name="x", retry_ms=pair))

    def test_seconds(self):
        c = self.client
        for kw, words in (({"timeout": -2}, "timeout -2 is negative"),
                          ({"timeout": 1e300}, "timeout 1e+300 is too long"),
                          ({"timeout": float("nan")}, "timeout must be a number of seconds, not NaN"),
                          ({"lease": -1}, "lease -1 s is negative"),
                          ({"lease": 1e300}, "lease 1e+300 s is too long"),
                          ({"lease": float("inf")}, "lease inf s is too long"),
                          ({"heartbeat": -0.5}, "heartbeat -0.5 s is negative"),
                          ({"retry": (-1, 1)}, "retry[0] -1 s is out of range"),
                          ({"lease": 0.004}, "")):  # 4 ms: refused by the library
            self.assertIn(words, self.refused(c.lock, name="x", **kw) if words else
                          self.refused(c.acquire, name="x", **kw))
        for kw in ({"timeout": "1"}, {"timeout": True}, {"lease": "10"}, {"lease": True},
                   {"blocking": 1}, {"retry": 0.1}, {"lease": 1, "lease_ms": 1000},
                   {"timeout": 1, "wait_ms": 1000}, {"blocking": False, "wait_ms": 0},
                   {"heartbeat": 1, "heartbeat_ms": 1000}, {"retry": (1, 2), "retry_ms": (1, 2)}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.lock("x", **kw)
        with self.assertRaisesRegex(ValueError, "non-blocking"):
            c.lock("x", blocking=False, timeout=1)
        # seconds become the library's milliseconds, rounded up (never down to 0, no expiry)
        name = unique("seconds")
        with c.lock(name, lease=1.5, heartbeat=0.5, retry=(0.01, 0.1)) as lock:
            self.assertTrue(1000 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 1500)
            lock.extend(2.25)
            self.assertTrue(1500 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 2250)
            lock.extend()  # the lock's own lease again
            self.assertTrue(1000 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 1500)
        with c.lock(name, lease=0) as lock:  # no expiry
            self.assertEqual(cli("PTTL", f"dlock:{{{name}}}"), "-1")
            self.assertEqual(lock.remaining, float("inf"))
        with c.lock(name) as lock:
            lock.extend(0)
            lock.extend()  # no lease given: the library's default, 10 s
            self.assertTrue(9000 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 10_000)

    def test_timedelta_durations(self):
        # A datetime.timedelta wherever seconds go, exactly (whole microseconds), and refused
        # with the same words when negative.
        c = self.client
        name = unique("timedelta")
        ms = timedelta(milliseconds=1)
        with c.lock(name, lease=timedelta(seconds=1.5), heartbeat=timedelta(seconds=0.5),
                    retry=(10 * ms, 100 * ms), timeout=timedelta(seconds=5)) as lock:
            self.assertTrue(1000 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 1500)
            lock.extend(timedelta(seconds=2.25))
            self.assertTrue(1500 < int(cli("PTTL", f"dlock:{{{name}}}")) <= 2250)
            # a waiter given a timedelta gives up after it
            with dlock.Client(URL) as other:
                started = time.monotonic()
                self.assertFalse(other.lock(name).acquire(timeout=timedelta(milliseconds=200)))
                self.assertGreaterEqual(time.monotonic() - started, 0.19)
        for kw, words in (({"timeout": timedelta(seconds=-1)}, "timeout -1 is negative"),
                          ({"lease": -ms}, "lease -0.001 s is negative"),
                          ({"retry": (-ms, ms)}, "retry[0] -0.001 s is out of range")):
            self.assertIn(words, self.refused(c.lock, name="x", **kw))


class Limits(Base):
    def test_limits_are_the_librarys(self):
        self.assertEqual((dlock.MAX_NAME_BYTES, dlock.MAX_OWNER_BYTES), (1024, 256))  # as documented
        name = "n" * dlock.MAX_NAME_BYTES
        self.client.acquire(name, owner="o" * dlock.MAX_OWNER_BYTES).release()
        with self.assertRaises(dlock.InvalidArgument) as cm:
            self.client.acquire(name + "n")
        self.assertIn(str(dlock.MAX_NAME_BYTES), str(cm.exception))
        with self.assertRaises(dlock.InvalidArgument) as cm:
            self.client.acquire(unique(), owner="o" * (dlock.MAX_OWNER_BYTES + 1))
        self.assertIn(str(dlock.MAX_OWNER_BYTES), str(cm.exception))


class Inspect(Base):
    def test_a_held_lock_seen_from_another_client(self):
        name = unique("inspect")
        lock = self.client.acquire(name, lease_ms=5000, owner="worker-7")
        with dlock.Client(URL) as other:
            info = other.inspect(name)
            self.assertIsInstance(info, dlock.LockInfo)
            self.assertEqual(info.kind, "exclusive")
            self.assertEqual(len(info.holders), 1)
            holder = info.holders[0]
            self.assertIsInstance(holder, dlock.Holder)
            self.assertEqual(holder.owner, "worker-7")
            self.assertEqual(holder.fencing_token, lock.fencing_token)
            self.assertTrue(0 < holder.remaining_ms <= 5000, holder)
            lock.release()
            self.assertEqual(other.inspect(name), dlock.LockInfo("exclusive", []))

    def test_no_owner_and_no_expiry(self):
        name = unique("inspect")
        lock = self.client.acquire(name.encode(), lease_ms=0)
        (holder,) = self.client.inspect(name).holders
        self.assertEqual(holder, dlock.Holder(None, None, lock.fencing_token))
        lock.release()
        self.assertEqual(self.client.inspect(unique("never")).holders, [])

    def test_async_and_errors(self):
        name = unique("inspect")
        lock = self.client.acquire(name, owner="async")

        async def main():
            return await self.client.ainspect(name)

        self.assertEqual(asyncio.run(main()).holders[0].owner, "async")
        lock.release()
        for bad in ("", "x" * (dlock.MAX_NAME_BYTES + 1)):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                self.client.inspect(bad)
            self.assertEqual(str(cm.exception), library_says(
                lambda: dlock._c.dlock_inspect(self.client._h, bad.encode(), ctypes.byref(ctypes.c_void_p()))))
        with self.assertRaises(TypeError):
            self.client.inspect(5)
        self.client.close()
        with self.assertRaises(dlock.InvalidArgument):
            self.client.inspect(name)


class Values(Base):
    """value= at acquire, Lock.set_value, Holder.value: bytes stored with a hold."""

    BINARY = b"\x00addr\xff\x00:8080\n\x00"  # NUL first, last and inside; not UTF-8

    def test_a_value_set_at_acquire_is_what_inspect_shows(self):
        name = unique("value")
        with dlock.Client(URL) as other:
            with self.client.lock(name, value=self.BINARY, owner="node-a") as lock:
                (holder,) = other.inspect(name).holders
                self.assertIsInstance(holder.value, bytes)
                self.assertEqual(holder.value, self.BINARY)
                self.assertEqual(holder, dlock.Holder("node-a", holder.remaining_ms,
                                                      lock.fencing_token, self.BINARY))
            self.assertEqual(other.inspect(name).holders, [])  # gone with the hold
            # a str is stored as UTF-8; every acquire of a reused Lock stores it again
            lock = self.client.lock(name, value="leader: 10.0.0.7 — ok")
            for _ in range(2):
                with lock:
                    self.assertEqual(other.inspect(name).holders[0].value,
                                     "leader: 10.0.0.7 — ok".encode())
            # no value: b"", and Holder's older three-field form still builds
            with self.client.lock(name):
                (holder,) = other.inspect(name).holders
                self.assertEqual(holder.value, b"")
                self.assertEqual(holder, dlock.Holder(None, holder.remaining_ms,
                                                      holder.fencing_token))
            # acquire() and the asyncio forms take it too
            held = self.client.acquire(name, value=bytearray(b"ba"))
            self.assertEqual(other.inspect(name).holders[0].value, b"ba")
            held.release()

    def test_set_value_replaces_it(self):
        name = unique("value")
        lock = self.client.acquire(name, value=b"first", lease=5)
        lock.set_value(self.BINARY)
        self.assertEqual(self.client.inspect(name).holders[0].value, self.BINARY)
        lock.set_value("text")
        self.assertEqual(self.client.inspect(name).holders[0].value, b"text")
        lock.extend(8)  # the lease is renewed, the value kept
        self.assertEqual(self.client.inspect(name).holders[0].value, b"text")
        self.assertGreater(lock.remaining, 5)
        lock.set_value(b"")  # removes it
        self.assertEqual(self.client.inspect(name).holders[0].value, b"")
        lock.set_value(memoryview(b"mv"))
        self.assertEqual(self.client.inspect(name).holders[0].value, b"mv")
        self.assertTrue(lock.valid)
        lock.release()
        with self.assertRaises(dlock.NotHeld):  # this object holds nothing now
            lock.set_value(b"late")
        with self.assertRaises(dlock.NotHeld):
            self.client.lock(name).set_value(b"never acquired")
        self.assertEqual(self.client.inspect(name).holders, [])

    def test_a_deposed_holders_set_value_raises_not_held_and_changes_nothing(self):
        name = unique("value-deposed")
        # no heartbeats: nothing in the background notices the loss; set_value's own check does
        deposed = self.client.acquire(name, value=b"old leader", lease=10, heartbeat=0)
        self.assertEqual(cli("DEL", f"dlock:{{{name}}}"), "1")  # behind its back
        with dlock.Client(URL) as other:
            successor = other.acquire(name, value=b"new leader", blocking=False)
            with self.assertRaises(dlock.NotHeld) as cm:
                deposed.set_value(b"still me")
            self.assertEqual(cm.exception.code, "DLOCK_NOT_HELD")
            (holder,) = other.inspect(name).holders
            self.assertEqual((holder.value, holder.fencing_token),
                             (b"new leader", successor.fencing_token))
            self.assertFalse(deposed.valid)
            with self.assertRaises(dlock.NotHeld):
                deposed.release()
            successor.release()
        # with nobody after it: refused all the same, and nothing appears
        lock = self.client.acquire(name, value=b"v", heartbeat=0)
        cli("DEL", f"dlock:{{{name}}}")
        with self.assertRaises(dlock.NotHeld):
            lock.set_value(b"w")
        self.assertEqual(self.client.inspect(name).holders, [])
        with self.assertRaises(dlock.NotHeld):
            lock.release()

    def test_too_long_a_value_is_invalid_argument(self):
        self.assertEqual(dlock.MAX_VALUE_BYTES, 4096)  # as documented
        name = unique("value-limit")
        longest = bytes(range(256)) * 16
        self.assertEqual(len(longest), dlock.MAX_VALUE_BYTES)
        too_long = longest + b"x"
        with self.assertRaises(dlock.InvalidArgument) as cm:  # at lock(), before any acquire
            self.client.lock(name, value=too_long)
        self.assertIsInstance(cm.exception, ValueError)
        o = dlock._c.dlock_options_new()
        try:
            self.assertEqual(str(cm.exception), library_says(
                dlock._c.dlock_options_set_value, o, too_long, len(too_long)))
        finally:
            dlock._c.dlock_options_free(o)
        self.assertIn(str(dlock.MAX_VALUE_BYTES), str(cm.exception))
        with self.assertRaises(dlock.InvalidArgument):
            self.client.acquire(name, value="é" * 2049)  # 4098 bytes of UTF-8
        self.assertEqual(self.client.inspect(name).holders, [])
        with self.client.lock(name, value=longest) as lock:
            self.assertEqual(self.client.inspect(name).holders[0].value, longest)
            with self.assertRaises(dlock.InvalidArgument) as cm:
                lock.set_value(too_long)
            self.assertIn(str(dlock.MAX_VALUE_BYTES), str(cm.exception))
            self.assertEqual(self.client.inspect(name).holders[0].value, longest)  # unchanged
        for bad in (5, 1.5, ["a"], object()):
            with self.assertRaises(TypeError, msg=repr(bad)):
                self.client.lock(name, value=bad)
        lock = self.client.acquire(name)
        with self.assertRaises(TypeError):
            lock.set_value(None)
        lock.release()

    def test_asyncio(self):
        name = unique("value-async")
        sync_hold = self.client.acquire(unique("value-sync"), value=b"sync")

        async def main():
            async with dlock.Client(URL) as client:
                async with client.alock(name, value=self.BINARY) as lock:
                    self.assertEqual((await client.ainspect(name)).holders[0].value, self.BINARY)
                    await lock.aset_value(b"replaced")
                    self.assertEqual((await client.ainspect(name)).holders[0].value, b"replaced")
                    lock.set_value(b"blocking, on the loop")  # one round trip, on the loop
                    self.assertEqual((await client.ainspect(name)).holders[0].value,
                                     b"blocking, on the loop")
                    # from another thread while the loop runs (as release())
                    await asyncio.get_running_loop().run_in_executor(
                        None, lock.set_value, b"from a thread")
                    self.assertEqual((await client.ainspect(name)).holders[0].value,
                                     b"from a thread")
                held = await client.aacquire(name, value="aacquire")
                self.assertEqual((await client.ainspect(name)).holders[0].value, b"aacquire")
                cli("DEL", f"dlock:{{{name}}}")
                with self.assertRaises(dlock.NotHeld):
                    await held.aset_value(b"deposed")
                with self.assertRaises(dlock.NotHeld):
                    await held.arelease()
                with self.assertRaises(dlock.NotHeld):
                    await held.aset_value(b"released")
                # a hold of the blocking API, written from a worker thread
                await sync_hold.aset_value(b"from asyncio")
                self.assertEqual((await client.ainspect(sync_hold.name)).holders[0].value,
                                 b"from asyncio")

        asyncio.run(asyncio.wait_for(main(), 20))
        sync_hold.release()


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A loop's default executor that says what was handed to it (run_in_executor(None, ...))."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.submitted = []

    def submit(self, fn, /, *args, **kwargs):
        self.submitted.append(getattr(fn, "__name__", repr(fn)))
        return super().submit(fn, *args, **kwargs)


@contextlib.contextmanager
def completion_threads():
    """Records, for each async completion the binding registers meanwhile, which table it went
    through ("loop": _ops, run by the hooks client's done callback; "queue": _pending, run by
    the dlock-events thread) and the thread it ran on: [(table, threading.get_ident())]."""
    seen = []

    class Recording(dict):
        def __init__(self, table, items):
            super().__init__(items)
            self.table = table

        def __setitem__(self, key, fn):
            table = self.table

            def recorded(*args):
                seen.append((table, threading.get_ident()))
                return fn(*args)

            super().__setitem__(key, recorded)

    old_ops, old_pending = dlock._ops, dlock._pending
    dlock._ops, dlock._pending = Recording("loop", old_ops), Recording("queue", old_pending)
    try:
        yield seen
    finally:
        ops, pending = dict(dlock._ops), dict(dlock._pending)
        old_ops.clear()
        old_ops.update(ops)
        old_pending.clear()
        old_pending.update(pending)
        dlock._ops, dlock._pending = old_ops, old_pending


def events_thread():
    """The dlock-events thread's ident (it drains the blocking API's completion queue)."""
    return next(t.ident for t in threading.enumerate() if t.name == "dlock-events")


class AsyncReads(Base):
    """ainspect and aleader: on the loop's own client (dlock_inspect_async, dlock_leader_async),
    answered on the loop's thread with no thread hop; a worker thread with
    DLOCK_PY_FORCE_THREADS=1."""

    def test_they_answer_on_the_loops_thread(self):
        name, shared = unique("aread"), unique("aread-shared")

        async def main():
            loop = asyncio.get_running_loop()
            pool = _CountingExecutor()
            loop.set_default_executor(pool)
            me = threading.get_ident()
            async with dlock.Client(URL) as client:
                lock = await client.acampaign(name, value=b"10.0.0.7:80", owner="me")
                reader = await client.aacquire(shared, shared=True)
                with completion_threads() as seen:
                    info = await client.ainspect(name)
                    leader = await client.aleader(name)
                    nobody = await client.aleader(unique("aread-free"))
                    with self.assertRaises(dlock.InvalidArgument):  # no election
                        await client.aleader(shared)
                self.assertEqual(info.kind, "exclusive")
                self.assertEqual([(h.owner, h.value, h.fencing_token) for h in info.holders],
                                 [("me", b"10.0.0.7:80", lock.fencing_token)])
                self.assertEqual(leader.fencing_token, lock.fencing_token)
                self.assertEqual(leader.value, b"10.0.0.7:80")
                self.assertIsNone(nobody)
                with self.assertRaises(dlock.InvalidArgument):
                    await client.ainspect("")
                if dlock._use_async_c:
                    self.assertEqual(seen, [("loop", me)] * 4)
                    self.assertEqual(pool.submitted, [])
                    self.assertIsNone(client._h)  # the blocking API's client was never opened
                else:  # every read on the executor, the refused ones too
                    self.assertEqual(seen, [])
                    self.assertEqual(len(pool.submitted), 5)
                await reader.arelease()
                await lock.arelease()
                self.assertFalse(dlock._ops)

        asyncio.run(asyncio.wait_for(main(), 20))


class AsyncValues(Base):
    """aset_value: on the loop's own client (dlock_lock_set_value_async) for a hold taken there,
    completing on the loop's thread with no thread hop; through the completion queue for a
    hold of the blocking API; from a worker thread for another loop's hold and with
    DLOCK_PY_FORCE_THREADS=1 (the thread path)."""

    def value_of(self, name):
        holders = self.client.inspect(name).holders  # the blocking API's client: no loop
        return holders[0].value if holders else None

    def test_a_hold_of_this_loop(self):
        name = unique("avalue-loop")

        async def main():
            loop = asyncio.get_running_loop()
            pool = _CountingExecutor()
            loop.set_default_executor(pool)
            me = threading.get_ident()
            async with dlock.Client(URL) as client:
                lock = await client.aacquire(name, value=b"first", lease=5)
                threads = threading.active_count()
                with completion_threads() as seen:
                    await lock.aset_value(b"second")
                    self.assertEqual(self.value_of(name), b"second")
                    await lock.aset_value("")  # removes it
                    self.assertEqual(self.value_of(name), b"")
                    with self.assertRaises(dlock.InvalidArgument):  # refused before any I/O
                        await lock.aset_value(b"x" * (dlock.MAX_VALUE_BYTES + 1))
                    with self.assertRaises(TypeError):
                        await lock.aset_value(None)
                    self.assertEqual(self.value_of(name), b"")
                    cli("DEL", f"dlock:{{{name}}}")  # deposed behind its back
                    with self.assertRaises(dlock.NotHeld) as cm:
                        await lock.aset_value(b"deposed")
                    self.assertEqual(cm.exception.code, "DLOCK_NOT_HELD")
                    self.assertEqual(self.value_of(name), None)  # nothing written
                with self.assertRaises(dlock.NotHeld):
                    await lock.arelease()
                with self.assertRaises(dlock.NotHeld):  # this object holds nothing now
                    await lock.aset_value(b"released")
                if dlock._use_async_c:
                    # each completion ran on this, the loop's, thread: no thread hop, no worker
                    self.assertEqual(seen, [("loop", me)] * 3)
                    self.assertEqual(pool.submitted, [])
                    self.assertEqual(threading.active_count(), threads)
                    self.assertIsNone(client._h)  # the blocking API's client was never opened
                else:  # the thread path: the blocking call on the loop's executor, each time
                    self.assertEqual(seen, [])  # (but TypeError's, raised before it)
                    self.assertEqual(pool.submitted.count("set_value"), 5)
                self.assertFalse(dlock._ops)

        asyncio.run(asyncio.wait_for(main(), 20))

    def test_a_hold_of_the_blocking_api(self):
        name = unique("avalue-sync")
        lock = self.client.acquire(name, value=b"sync", lease=5)

        async def main():
            pool = _CountingExecutor()
            asyncio.get_running_loop().set_default_executor(pool)
            with completion_threads() as seen:
                await lock.aset_value(b"from asyncio")
                self.assertEqual(self.value_of(name), b"from asyncio")
                cli("DEL", f"dlock:{{{name}}}")
                with self.assertRaises(dlock.NotHeld):
                    await lock.aset_value(b"deposed")
            self.assertEqual(self.value_of(name), None)
            if dlock._use_async_c:  # through the completion queue, as aextend()
                self.assertEqual(seen, [("queue", events_thread())] * 2)
                self.assertEqual(pool.submitted, [])
            else:
                self.assertEqual(seen, [])
                self.assertEqual(pool.submitted, ["set_value"] * 2)

        asyncio.run(asyncio.wait_for(main(), 20))
        with self.assertRaises(dlock.NotHeld):
            lock.release()

    def test_a_hold_of_another_loop(self):
        name = unique("avalue-other")
        other = asyncio.new_event_loop()
        runner = threading.Thread(target=other.run_forever, name="other-loop")
        runner.start()

        def on_other(coro):
            return asyncio.run_coroutine_threadsafe(coro, other).result(10)

        try:
            lock = on_other(self.client.aacquire(name, value=b"other", lease=5))

            async def main():
                pool = _CountingExecutor()
                asyncio.get_running_loop().set_default_executor(pool)
                await lock.aset_value(b"from this loop")  # a worker thread, while `other` runs
                self.assertEqual(pool.submitted, ["set_value"])

            asyncio.run(asyncio.wait_for(main(), 20))
            self.assertEqual(self.value_of(name), b"from this loop")
            on_other(lock.arelease())
        finally:
            on_other(other.shutdown_asyncgens())
            other.call_soon_threadsafe(other.stop)
            runner.join(10)
            other.close()
        self.assertEqual(self.value_of(name), None)


class Election(Base):
    """campaign, leader, set_value (proclaim) and release (resign)."""

    def in_line(self, name, n):
        return lambda: cli("ZCARD", f"dlock:{{{name}}}:line") == str(n)

    def test_campaign_leader_and_resign(self):
        name = unique("election")
        self.assertIsNone(self.client.leader(name))  # nobody leads yet
        leadership = self.client.campaign(name, value=b"10.0.0.7:8080", owner="node-a", lease=5)
        self.assertIsInstance(leadership, dlock.Lock)
        self.assertTrue(leadership.owned())
        with dlock.Client(URL) as other:
            leader = other.leader(name)
            self.assertIsInstance(leader, dlock.Holder)
            self.assertEqual(leader.owner, "node-a")
            self.assertEqual(leader.value, b"10.0.0.7:8080")
            self.assertEqual(leader.fencing_token, leadership.fencing_token)  # the term
            self.assertTrue(0 < leader.remaining_ms <= 5000, leader)
            leadership.set_value("10.0.0.7:9090")  # proclaim
            self.assertEqual(other.leader(name).value, b"10.0.0.7:9090")
            self.assertEqual(other.leader(name.encode()).fencing_token, leadership.fencing_token)
            leadership.release()  # resign
            self.assertIsNone(other.leader(name))
            # again: a new term, above the last
            last = leader.fencing_token
            again = self.client.campaign(name)
            self.assertGreater(again.fencing_token, last)
            self.assertEqual(other.leader(name).value, b"")
            again.release()
            self.assertIsNone(other.leader(name))

    def test_the_second_candidate_leads_once_the_first_resigns_with_a_greater_term(self):
        name = unique("election")
        first = self.client.campaign(name, value=b"first")
        outcome = []

        def candidate():
            try:
                with dlock.Client(URL) as c:
                    lk = c.campaign(name, value=b"second\x00")
                    outcome.append((lk.fencing_token, c.leader(name)))
                    lk.release()
            except BaseException as e:
                outcome.append(e)

        t = threading.Thread(target=candidate)
        t.start()
        try:
            self.assertTrue(wait_for(self.in_line(name, 1), 20), "the second candidate is not waiting")
            self.assertEqual(outcome, [])  # waiting in line while the first leads
            self.assertEqual(self.client.leader(name).value, b"first")
        finally:
            first_term = first.fencing_token
            first.release()  # resign: the second candidate leads
            t.join(20)
        self.assertFalse(t.is_alive())
        ((term, leader),) = outcome
        self.assertGreater(term, first_term)
        self.assertEqual((leader.fencing_token, leader.value), (term, b"second\x00"))
        self.assertIsNone(self.client.leader(name))

    def test_what_a_leadership_is_not(self):
        name = unique("election")
        for kw in ({"shared": True}, {"permits": 2}, {"kind": "exclusive"}, {"timeout": 1},
                   {"blocking": False}, {"wait_ms": 0}):
            with self.assertRaises(TypeError, msg=str(kw)):
                self.client.campaign(name, **kw)
        for kw in ({"value": 5}, {"lease": "5"}, {"fair": 1}):
            with self.assertRaises(TypeError, msg=str(kw)):
                self.client.campaign(name, **kw)
        for kw in ({"value": b"x" * (dlock.MAX_VALUE_BYTES + 1)}, {"lease": -1}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)):
                self.client.campaign(name, **kw)
        self.assertIsNone(self.client.leader(name))  # nothing was left behind
        with self.assertRaises(dlock.InvalidArgument):
            self.client.leader("")
        # a name held shared, or a semaphore, is no election: leader() says so
        with self.client.lock(name, shared=True):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                self.client.leader(name)
            self.assertIn("shared", str(cm.exception))
        with self.client.lock(name, permits=2):
            with self.assertRaises(dlock.InvalidArgument) as cm:
                self.client.leader(name)
            self.assertIn("semaphore", str(cm.exception))
        # any exclusive hold is a leadership (client.lock(...) waits without limit too)
        with self.client.lock(name, value=b"by lock()", owner="o") as lk:
            leader = self.client.leader(name)
            self.assertEqual((leader.owner, leader.value, leader.fencing_token),
                             ("o", b"by lock()", lk.fencing_token))

    def test_asyncio(self):
        name = unique("election-async")

        async def main():
            async with dlock.Client(URL) as a, dlock.Client(URL) as b:
                self.assertIsNone(await a.aleader(name))
                first = await a.acampaign(name, value=b"a")
                second = asyncio.ensure_future(b.acampaign(name, value=b"b"))
                for _ in range(2000):
                    if self.in_line(name, 1)():
                        break
                    await asyncio.sleep(0.01)
                self.assertTrue(self.in_line(name, 1)(), "the second candidate is not waiting")
                self.assertFalse(second.done())
                self.assertEqual((await b.aleader(name)).value, b"a")
                await first.aset_value(b"a, proclaimed")
                self.assertEqual((await b.aleader(name)).value, b"a, proclaimed")
                term = first.fencing_token
                await first.arelease()  # resign
                leadership = await asyncio.wait_for(second, 20)
                self.assertGreater(leadership.fencing_token, term)
                leader = await a.aleader(name)
                self.assertEqual((leader.value, leader.fencing_token),
                                 (b"b", leadership.fencing_token))
                await leadership.arelease()
                self.assertIsNone(await a.aleader(name))

        asyncio.run(asyncio.wait_for(main(), 30))


class Reports:
    """What an observe callback was told, in order: (leader, thread name)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.all = []

    def __call__(self, leader):
        with self.cond:
            self.all.append((leader, threading.current_thread().name))
            self.cond.notify_all()

    def leaders(self):
        with self.cond:
            return [leader for leader, _ in self.all]

    def await_last(self, pred, timeout=10.0):
        with self.cond:
            return self.cond.wait_for(lambda: self.all and pred(self.all[-1][0]), timeout)

    def __repr__(self):
        return repr(self.leaders())


def leads(term=None, value=None):
    """A predicate: someone leads (in that term, with that value)."""
    return lambda leader: (leader is not None and (term is None or leader.fencing_token == term)
                           and (value is None or leader.value == value))


def nobody(leader):
    return leader is None


class Observe(Base):
    """client.observe (an Observer) and client.aobserve (an AsyncObserver)."""

    def test_the_leader_first_then_each_change_and_nothing_after_cancel(self):
        name = unique("observe")
        with dlock.Client(URL) as b, dlock.Client(URL) as watcher:
            early = Reports()
            with watcher.observe(name, early) as observer:  # nobody leads: the first report
                self.assertIsInstance(observer, dlock.Observer)
                self.assertFalse(observer.cancelled)
                self.assertTrue(early.await_last(nobody), early)
            self.assertTrue(observer.cancelled)  # left the `with`
            self.assertIn("cancelled", repr(observer))

            leadership = self.client.campaign(name, value=b"one", owner="node-a", lease=5)
            term = leadership.fencing_token
            reports = Reports()
            observer = watcher.observe(name.encode(), reports)  # started while node-a leads
            self.assertTrue(reports.await_last(leads(term)), reports)
            first, thread = reports.all[0]
            self.assertEqual((first.value, first.owner, first.fencing_token), (b"one", "node-a", term))
            self.assertTrue(0 < first.remaining_ms <= 5000, first)
            self.assertEqual(thread, "dlock-events")  # as on_lost
            # a new value (proclaim): within the poll interval, 500 ms, and one read
            leadership.set_value(b"two\x00")
            self.assertTrue(reports.await_last(leads(term, b"two\x00"), 1.0),
                            f"the new value took over a second: {reports}")
            leadership.release()  # resign: nobody leads
            self.assertTrue(reports.await_last(nobody), reports)
            again = b.campaign(name, value="three")  # a new leader, in a greater term
            self.assertGreater(again.fencing_token, term)
            self.assertTrue(reports.await_last(leads(again.fencing_token, b"three")), reports)
            terms = [leader.fencing_token for leader in reports.leaders() if leader is not None]
            self.assertEqual(terms, sorted(terms), reports)

            observer.cancel()
            self.assertTrue(observer.cancelled)
            observer.cancel()  # idempotent
            count = len(reports.all)
            again.set_value("four")
            again.release()
            time.sleep(1.2)  # over two poll intervals
            self.assertEqual(len(reports.all), count, f"a report after cancel returned: {reports}")
            self.assertNotIn(observer._slot.id, dlock._observers)
            self.assertEqual(watcher._observers, {})

    def test_cancel_waits_for_a_running_callback_which_may_cancel_itself_and_raise(self):
        name = unique("observe")
        leadership = self.client.campaign(name, value=b"one")
        running = threading.Event()
        finished = []

        def slow(leader):
            running.set()
            time.sleep(0.3)
            finished.append(leader)

        observer = self.client.observe(name, slow)
        self.assertTrue(running.wait(10), "no first report")
        observer.cancel()  # from another thread while it runs: waits for it
        self.assertEqual(len(finished), 1, "cancel returned while the callback ran")

        # a callback that cancels its own Observer, then raises: printed and ignored
        box, ready, done, calls = [], threading.Event(), threading.Event(), []

        def cancels_itself(leader):
            ready.wait(5)  # until the Observer is in box
            calls.append(leader)
            box[0].cancel()  # from inside: returns at once
            done.set()
            raise RuntimeError("a buggy callback must not break the library")

        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            box.append(self.client.observe(name, cancels_itself))
            ready.set()
            self.assertTrue(done.wait(10))
            leadership.set_value(b"two")
            leadership.release()
            time.sleep(1.2)
        self.assertEqual(len(calls), 1)
        self.assertTrue(box[0].cancelled)
        self.assertIn("exception in observe callback", stderr.getvalue())
        self.assertIn("a buggy callback", stderr.getvalue())
        # the client still works, and observes again
        again = Reports()
        with self.client.observe(name, again):
            self.assertTrue(again.await_last(nobody))

    def test_a_slow_callback_holds_up_no_heartbeat(self):
        # The callback runs on the dlock-events thread: while it sleeps, the client's own
        # thread keeps renewing its locks (and reading for its other observers).
        started = threading.Event()

        def slow(leader):
            started.set()
            time.sleep(2.5)  # more than three leases of `steady`

        steady = self.client.acquire(unique("steady"), lease_ms=800, heartbeat_ms=100)
        with self.client.observe(unique("observe"), slow):
            self.assertTrue(started.wait(10), "no first report")
            time.sleep(2.7)
            self.assertGreater(int(cli("PTTL", f"dlock:{{{steady.name}}}")), 0,
                               "the lease ran out on the server while the callback slept")
            self.assertTrue(steady.valid)
        steady.release()

    def test_the_callback_may_call_the_client_and_close_ends_it(self):
        name = unique("observe")
        watcher = dlock.Client(URL)
        asked = []

        def ask(leader):  # a blocking call of the same client, from the callback
            asked.append((leader, watcher.leader(name)))

        observer = watcher.observe(name, ask)
        self.assertTrue(wait_for(lambda: len(asked) == 1))
        self.assertEqual(asked[0], (None, None))
        watcher.close()  # ends its observers
        self.assertTrue(observer.cancelled)
        self.client.campaign(name).release()
        time.sleep(1.2)
        self.assertEqual(len(asked), 1)
        observer.cancel()  # still fine
        with self.assertRaises(dlock.InvalidArgument):
            watcher.observe(name, ask)

    def test_bad_arguments(self):
        with self.assertRaises(dlock.InvalidArgument):
            self.client.observe("", print)
        with self.assertRaises(dlock.InvalidArgument):
            self.client.observe("a\0b", print)
        with self.assertRaises(TypeError):
            self.client.observe(5, print)
        with self.assertRaises(TypeError):
            self.client.observe("x", None)
        with self.assertRaises(dlock.InvalidArgument):
            self.client.aobserve("a\0b")  # at once

        async def empty_name():
            async for _ in self.client.aobserve(""):  # the library's check: at the start
                pass

        with self.assertRaises(dlock.InvalidArgument) as cm:
            asyncio.run(asyncio.wait_for(empty_name(), 10))
        self.assertIn("name", str(cm.exception))
        self.assertEqual(dlock._observers, {})
        self.assertEqual(self.client._observers, {})

    # -- asyncio

    def mine(self, before):
        """The observer slots made since `before` (a set of ids) that are still observing."""
        return set(dlock._observers) - before

    def test_asyncio_leader_then_nobody_and_break_cancels(self):
        name = unique("observe-async")

        async def main():
            async with dlock.Client(URL) as a, dlock.Client(URL) as watcher:
                leadership = await a.acampaign(name, value=b"a")
                before = set(dlock._observers)
                seen = []
                async for leader in watcher.aobserve(name):
                    seen.append(leader)
                    if len(seen) == 1:
                        self.assertEqual(len(self.mine(before)), 1)
                        self.assertEqual((leader.value, leader.fencing_token),
                                         (b"a", leadership.fencing_token))
                        await leadership.aset_value(b"a, proclaimed")
                        t0 = time.monotonic()
                    elif len(seen) == 2:
                        self.assertLess(time.monotonic() - t0, 1.0, "the new value took over a second")
                        self.assertEqual(leader.value, b"a, proclaimed")
                        await leadership.arelease()  # resign
                    else:
                        self.assertIsNone(leader)
                        break  # drops the iterator: the observer is cancelled
                self.assertEqual(len(seen), 3)
                self.assertEqual(self.mine(before), set(), "break left the observer running")
                self.assertFalse(any(lc.observers for lc in watcher._loops.values()))
                self.assertEqual(watcher._observers, {})

        asyncio.run(asyncio.wait_for(main(), 30))

    def test_asyncio_cancelled_task_closed_client_and_async_with(self):
        name = unique("observe-async")

        async def main():
            async with dlock.Client(URL) as a:
                watcher = dlock.Client(URL)
                before = set(dlock._observers)
                got = []

                async def consume():
                    async for leader in watcher.aobserve(name):
                        got.append(leader)

                task = asyncio.ensure_future(consume())
                for _ in range(1000):
                    if got:
                        break
                    await asyncio.sleep(0.01)
                self.assertEqual(got, [None])
                self.assertEqual(len(self.mine(before)), 1)
                task.cancel()  # cancels the observation too
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertEqual(self.mine(before), set())

                # async with: cancelled on the way out, whatever holds the iterator
                async with watcher.aobserve(name) as leaders:
                    self.assertIsInstance(leaders, dlock.AsyncObserver)
                    self.assertIsNone(await leaders.__anext__())
                    self.assertEqual(len(self.mine(before)), 1)
                self.assertTrue(leaders.cancelled)
                self.assertEqual(self.mine(before), set())
                with self.assertRaises(StopAsyncIteration):
                    await leaders.__anext__()

                # the client's close ends the iteration
                leaders = watcher.aobserve(name)
                leadership = await a.acampaign(name, value=b"a")
                self.assertEqual((await leaders.__anext__()).value, b"a")
                await watcher.aclose()
                with self.assertRaises(StopAsyncIteration):
                    await asyncio.wait_for(leaders.__anext__(), 10)
                self.assertTrue(leaders.cancelled)
                self.assertEqual(self.mine(before), set())
                await leadership.arelease()

        asyncio.run(asyncio.wait_for(main(), 30))


class Kinds(Base):
    def test_capabilities(self):
        caps = self.client.capabilities
        self.assertIsInstance(caps, frozenset)
        self.assertLessEqual(caps, {"fencing_strict", "notifies", "shared", "permits", "fair",
                                    "observe_push", "break", "min_hold", "lock_delay",
                                    "release_request"})
        # what dlock.h promises for Redis (one server)
        self.assertTrue({"fencing_strict", "notifies", "observe_push", "break", "min_hold",
                         "lock_delay", "release_request"} <= caps, caps)

    def test_kind_and_permits_reach_the_library(self):
        c, caps = self.client, self.client.capabilities
        c.acquire(unique(), kind="exclusive", permits=0).release()  # the defaults, said aloud
        name = unique("shared")
        if "shared" in caps:
            a, b = c.acquire(name, kind="shared"), c.acquire(name, kind="shared")
            self.assertEqual(len(c.inspect(name).holders), 2)
            self.assertEqual(c.inspect(name).kind, "shared")
            a.release()
            b.release()
        else:  # refused by the library, in its words, leaving nothing behind
            with self.assertRaises(dlock.InvalidArgument) as cm:
                c.acquire(name, kind="shared")
            self.assertIn("shared", str(cm.exception))
            self.assertEqual(c.inspect(name).holders, [])
        name = unique("permits")
        if "permits" in caps:
            locks = [c.acquire(name, permits=2) for _ in range(2)]
            with self.assertRaises(dlock.NotAcquired):
                c.acquire(name, permits=2, blocking=False)
            for lock in locks:
                lock.release()
        else:
            with self.assertRaises(dlock.InvalidArgument) as cm:
                c.acquire(name, permits=2)
            self.assertIn("permits", str(cm.exception))
            self.assertEqual(c.inspect(name).holders, [])

        async def main():
            if "shared" not in caps:
                with self.assertRaises(dlock.InvalidArgument):
                    await c.aacquire(unique(), kind="shared")
            await (await c.aacquire(unique(), kind="exclusive")).arelease()

        asyncio.run(main())

    def test_bad_kind_and_permits(self):
        c = self.client
        for kw in ({"kind": "Shared"}, {"kind": "read"}, {"permits": -1}, {"permits": 2**32}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)):
                c.acquire(unique(), **kw)
        for kw in ({"kind": 1}, {"permits": "2"}, {"permits": 1.0}):
            with self.assertRaises(TypeError, msg=str(kw)):
                c.acquire(unique(), **kw)


class SharedAndPermits(Base):
    """shared=True and permits=n as a user would check them, against this redis-server (which
    offers both)."""

    def setUp(self):
        super().setUp()
        self.other = dlock.Client(URL)
        self.third = dlock.Client(URL)

    def tearDown(self):
        self.third.close()
        self.other.close()
        super().tearDown()

    def test_backend_offers_both(self):
        self.assertTrue({"shared", "permits"} <= self.client.capabilities)

    def test_three_shared_holders_and_no_exclusive_meanwhile(self):
        name = unique("shared")
        with self.client.lock(name, shared=True, owner="r1") as r1, \
                self.client.lock(name, shared=True, owner="r2") as r2:
            r3 = self.other.acquire(name, shared=True, owner="r3")
            # a client holding the name shared may not take it exclusive (no upgrade) ...
            with self.assertRaises(dlock.InvalidArgument):
                self.client.acquire(name, blocking=False)
            # ... and another client is refused while the shared holds stand
            with self.assertRaises(dlock.NotAcquired):
                self.third.acquire(name, blocking=False)
            with self.assertRaises(dlock.NotAcquired):
                self.third.acquire(name, kind="exclusive", wait_ms=200)
            info = self.third.inspect(name)
            self.assertEqual(info.kind, "shared")
            self.assertEqual(info.permits, 0)
            self.assertEqual(sorted((h.owner, h.fencing_token) for h in info.holders),
                             [("r1", r1.fencing_token), ("r2", r2.fencing_token),
                              ("r3", r3.fencing_token)])
            self.assertEqual(len({r1.fencing_token, r2.fencing_token, r3.fencing_token}), 3)
            r3.release()
        self.assertEqual(self.third.inspect(name), dlock.LockInfo("exclusive", []))
        self.third.acquire(name).release()  # free for an exclusive hold now

    def test_async_shared(self):
        name = unique("shared")

        async def main():
            a = await self.client.aacquire(name, shared=True)
            async with self.other.alock(name, shared=True) as b:
                info = await self.third.ainspect(name)
                self.assertEqual((info.kind, len(info.holders)), ("shared", 2))
                with self.assertRaises(dlock.NotAcquired):
                    await self.third.aacquire(name, blocking=False)
                self.assertGreater(b.fencing_token, a.fencing_token)
            await a.arelease()
            with self.assertRaises(dlock.InvalidArgument):
                await self.client.aacquire(name, shared=True, permits=2)

        asyncio.run(main())

    def test_a_waiting_exclusive_acquire_keeps_new_shared_holds_out(self):
        name = unique("shared")
        reader = self.client.acquire(name, shared=True)
        reader_token = reader.fencing_token
        got = []
        writer = threading.Thread(
            target=lambda: got.append(self.other.acquire(name, wait_ms=5000)))
        writer.start()

        def new_reader_refused():
            try:
                self.third.acquire(name, shared=True, blocking=False).release()
                return False  # before the writer queued up
            except dlock.NotAcquired:
                return True

        self.assertTrue(wait_for(new_reader_refused))
        reader.release()
        writer.join(10)
        self.assertEqual(len(got), 1)
        self.assertGreater(got[0].fencing_token, reader_token)
        self.assertEqual(self.third.inspect(name).kind, "exclusive")
        got[0].release()

    def test_semaphore_of_two(self):
        name = unique("sem")
        a = self.client.acquire(name, permits=2, owner="a")
        b = self.other.acquire(name, permits=2, owner="b")
        with self.assertRaises(dlock.NotAcquired):
            self.third.acquire(name, permits=2, blocking=False)
        info = self.third.inspect(name)
        self.assertEqual(info.permits, 2)
        self.assertEqual(info.kind, "exclusive")
        self.assertEqual(sorted(h.owner for h in info.holders), ["a", "b"])
        with self.assertRaises(dlock.InvalidArgument) as cm:
            self.third.acquire(name, permits=3, blocking=False)
        self.assertIn("2 permits", str(cm.exception))
        self.assertIn("3 permits", str(cm.exception))
        for mixed in ({}, {"shared": True}):  # no lock kind on a semaphore while it is held
            with self.assertRaises(dlock.InvalidArgument, msg=str(mixed)):
                self.third.acquire(name, blocking=False, **mixed)
        a.release()
        c = self.third.acquire(name, permits=2)  # a permit came free
        self.assertGreater(c.fencing_token, b.fencing_token)
        b.release()
        c.release()
        self.assertEqual(self.third.inspect(name).permits, 0)  # free: a lock again
        self.third.acquire(name, permits=3).release()  # and any size once free

    def test_take_several_permits_at_once(self):
        name = unique("take")
        three = self.client.acquire(name, permits=4, take=3, owner="three")
        info = self.third.inspect(name)
        self.assertEqual((info.permits, [h.owner for h in info.holders]), (4, ["three"]))
        with self.assertRaises(dlock.NotAcquired):  # 2 more do not fit in the 1 left ...
            self.other.acquire(name, permits=4, take=2, blocking=False)
        one = self.other.acquire(name, permits=4, take=1, blocking=False)  # ... 1 does
        with self.assertRaises(dlock.NotAcquired):  # and now none is left
            self.third.acquire(name, permits=4, blocking=False)
        three.release()  # frees all 3
        again = self.third.acquire(name, permits=4, take=3, blocking=False)
        self.assertGreater(again.fencing_token, one.fencing_token)
        again.release()
        one.release()
        self.assertEqual(self.third.inspect(name).holders, [])

    def test_take_is_checked(self):
        name = unique("take")
        for kw in ({"take": 0}, {"take": 0, "permits": 4}, {"take": -1}, {"take": 2**32}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                self.client.lock(name, **kw)
            self.assertIn("take", str(cm.exception))
        for kw in ({"take": "2"}, {"take": 2.0}, {"take": True}):
            with self.assertRaises(TypeError, msg=str(kw)):
                self.client.lock(name, permits=4, **kw)
        # more than the permits, or more than 1 without any: refused at acquire, in the
        # library's words, naming take and permits
        for kw in ({"take": 5, "permits": 4}, {"take": 2}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                self.client.acquire(name, **kw)
            self.assertIn("take", str(cm.exception))
            self.assertIn("permits", str(cm.exception))
        lock = self.client.lock(name, permits=4, take=5)
        with self.assertRaises(dlock.InvalidArgument):
            lock.acquire()
        self.assertEqual(self.client.inspect(name).holders, [])  # nothing taken
        # take=1 is the default said aloud, with or without permits
        self.client.acquire(name, take=1).release()
        self.client.acquire(name, permits=4, take=1).release()
        self.client.acquire(name, permits=4, take=4).release()

    def test_take_on_reentry_and_lock_many(self):
        name = unique("take")
        held = self.client.acquire(name, permits=4, take=2, reentrant="job")
        again = self.client.acquire(name, permits=4, take=2, reentrant="job")
        self.assertEqual(again.fencing_token, held.fencing_token)
        with self.assertRaises(dlock.InvalidArgument) as cm:  # a re-entry asking another take
            self.client.acquire(name, permits=4, take=3, reentrant="job")
        self.assertIn("take", str(cm.exception))
        again.release()
        held.release()
        names = [unique("take-a"), unique("take-b")]
        with self.client.lock_many(names, permits=4, take=3):
            for n in names:
                with self.assertRaises(dlock.NotAcquired):
                    self.other.acquire(n, permits=4, take=2, blocking=False)
                self.other.acquire(n, permits=4, blocking=False).release()
        with self.assertRaises(dlock.InvalidArgument):
            self.client.lock_many(names, permits=4, take=0)

        async def main():
            a = await self.client.aacquire(name, permits=4, take=4)
            with self.assertRaises(dlock.NotAcquired):
                await self.other.aacquire(name, permits=4, blocking=False)
            await a.arelease()

        asyncio.run(main())

    def test_tokens_rise_across_kinds(self):
        name = unique("tokens")
        tokens = []
        for kw in ({}, {"shared": True}, {"shared": True}, {"permits": 2}, {"kind": "shared"},
                   {"shared": False}):
            lock = self.client.acquire(name, **kw)
            tokens.append(lock.fencing_token)
            lock.release()
        self.assertEqual(tokens, sorted(set(tokens)), tokens)

    def test_shared_with_permits_or_exclusive_is_refused(self):
        name = unique("bad")
        for kw in ({"shared": True, "permits": 2}, {"shared": True, "kind": "exclusive"},
                   {"shared": False, "kind": "shared"}, {"kind": "shared", "permits": 2}):
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)) as cm:
                self.client.acquire(name, **kw)
            self.assertIn("shared", str(cm.exception))
            with self.assertRaises(dlock.InvalidArgument, msg=str(kw)):
                self.client.lock(name, **kw)
        with self.assertRaises(TypeError):
            self.client.acquire(name, shared="yes")
        self.assertEqual(self.client.inspect(name).holders, [])  # nothing taken
        # agreeing words and permits=0 (off) are fine
        self.client.acquire(name, shared=True, kind="shared", permits=0).release()


class NoLeaks(Base):
    def test_10000_cycles(self):
        name = unique("leak")
        for _ in range(1000):  # warm up allocator pools
            self.client.acquire(name, on_lost=lambda lock: None).release()
        gc.collect()
        before = rss_kib()
        t0 = time.monotonic()
        reused = self.client.lock(name, lease=5, on_lost=lambda lock: None)
        for i in range(10_000):
            if i % 3 == 0:
                self.client.acquire(name, lease_ms=5000, on_lost=lambda lock: None).release()
            elif i % 3 == 1:
                with self.client.lock(name, lease=5, on_lost=lambda lock: None):
                    pass
            else:
                with reused:
                    pass
        gc.collect()
        grown = rss_kib() - before
        print(f"\n  10000 acquire+release cycles in {time.monotonic() - t0:.2f} s, "
              f"RSS grew {grown} KiB", file=sys.stderr)
        self.assertLess(grown, 4096, f"RSS grew {grown} KiB over 10000 cycles")
        self.assertEqual(dlock._lost_slots, {})
        self.assertEqual(dlock._pending, {})

    def test_forgotten_locks_are_released_by_gc(self):
        names = [unique("gc") for _ in range(100)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in names:
                self.client.acquire(n, lease_ms=0, on_lost=lambda lock: None)  # dropped at once
            gc.collect()
        self.assertTrue(any(issubclass(w.category, ResourceWarning) for w in caught))
        self.assertTrue(wait_for(lambda: cli("EXISTS", *[f"dlock:{{{n}}}" for n in names]) == "0"))
        self.assertTrue(wait_for(lambda: not dlock._lost_slots and not dlock._pending))

    def test_clients_open_and_close(self):
        def threads():
            return len(os.listdir("/proc/self/task"))

        base = threads()
        for _ in range(100):
            with dlock.Client(URL) as c:
                c.acquire(unique()).release()
        self.assertEqual(threads(), base)


class Asyncio(Base):
    def test_async_with(self):
        name = unique()

        async def main():
            async with self.client.alock(name, lease_ms=5000) as lock:
                self.assertTrue(lock.valid)
                await lock.aextend(20)
                self.assertGreater(lock.remaining_ms, 10_000)
            self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
            lock = await self.client.alock(name)  # awaitable too
            await lock.arelease()
            with self.assertRaises(dlock.NotHeld):
                await lock.arelease()
            with self.assertRaises(dlock.NotHeld):
                await lock.aextend(100)
            lock = await self.client.aacquire(name)
            cli("DEL", f"dlock:{{{name}}}")
            with self.assertRaises(dlock.NotHeld):
                await lock.arelease()
            holder = self.client.acquire(name)
            with self.assertRaises(dlock.NotAcquired):
                await self.client.aacquire(name, wait_ms=100)
            holder.release()
            with self.assertRaises(TypeError):
                await self.client.aacquire(42)
            with self.assertRaises(ValueError):
                await self.client.aacquire("x" * 5000)

        asyncio.run(main())

    def test_many_waiters_do_not_block_the_loop(self):
        name = unique("many")
        n = 40

        async def main():
            ticks = 0
            stop = False

            async def ticker():
                nonlocal ticks
                while not stop:
                    ticks += 1
                    await asyncio.sleep(0.01)

            counter = 0
            tokens = []

            async def worker():
                nonlocal counter
                async with self.client.alock(name, wait_ms=-1, lease_ms=5000) as lock:
                    tokens.append(lock.fencing_token)
                    v = counter
                    await asyncio.sleep(0.005)
                    counter = v + 1

            t = asyncio.ensure_future(ticker())
            await asyncio.gather(*(worker() for _ in range(n)))
            stop = True
            await t
            return counter, tokens, ticks

        counter, tokens, ticks = asyncio.run(main())
        self.assertEqual(counter, n)
        self.assertEqual(tokens, sorted(tokens))
        self.assertEqual(len(set(tokens)), n)
        self.assertGreater(ticks, 5, "the event loop did not run while acquires waited")

    def test_cancelling_a_waiter_leaves_nothing_behind(self):
        name = unique()
        holder = self.client.acquire(name)

        async def main():
            task = asyncio.ensure_future(self.client.aacquire(name, wait_ms=-1))
            await asyncio.sleep(0.2)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            holder.release()
            await asyncio.sleep(0.3)

        asyncio.run(main())
        if dlock._use_async_c:
            self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
        else:  # the worker thread still waits; it gives the lock back once it gets it
            self.assertTrue(wait_for(lambda: cli("EXISTS", f"dlock:{{{name}}}") == "0", 5))
        self.assertTrue(wait_for(lambda: not dlock._pending))

    def test_on_lost_runs_on_the_loop(self):
        name = unique("lost")

        async def main():
            loop = asyncio.get_running_loop()
            lost = loop.create_future()
            lock = await self.client.aacquire(
                name, lease_ms=600, heartbeat_ms=150,
                on_lost=lambda lk: lost.set_result((lk, asyncio.get_running_loop())))
            cli("DEL", f"dlock:{{{name}}}")
            got, on_loop = await asyncio.wait_for(lost, 5)
            self.assertIs(got, lock)
            self.assertIs(on_loop, loop)
            with self.assertRaises(dlock.NotHeld):
                await lock.arelease()

        asyncio.run(main())


@unittest.skipUnless(dlock._use_async_c, "the event-loop client (not the thread fallback)")
class LoopDriven(unittest.TestCase):
    """The async API on a client driven by the event loop itself (dlock_client_open_hooks through
    loop.add_reader / add_writer / call_later): no thread hop, no thread of dlock's own."""

    def test_no_thread_and_every_completion_on_the_loop(self):
        name = unique("hooks")

        def threads():
            return len(os.listdir("/proc/self/task"))

        async def main():
            before = threads()
            me = threading.get_ident()
            lost_on = []
            async with dlock.Client(URL) as client:  # made on the loop: no owned thread
                lk = await client.aacquire(name, lease=3, heartbeat=0.1,
                                           on_lost=lambda l: lost_on.append(threading.get_ident()))
                self.assertEqual(lk._lc.thread, me)
                await lk.aextend(5)
                self.assertGreater(lk.remaining_ms, 3000)
                await lk.arelease()
                for _ in range(50):
                    async with client.alock(name, lease=2):
                        pass
                holder = await client.aacquire(name)
                waiter = asyncio.ensure_future(client.aacquire(name, timeout=5))
                await asyncio.sleep(0.05)
                await holder.arelease()  # the waiter is woken by the release's message
                got = await waiter
                lk2 = await client.aacquire(unique("hooks-lost"), lease=3, heartbeat=0.1,
                                            on_lost=lambda l: lost_on.append(threading.get_ident()))
                cli("DEL", f"dlock:{{{lk2.name}}}")
                for _ in range(300):
                    if lost_on:
                        break
                    await asyncio.sleep(0.01)
                self.assertEqual(lost_on, [me])  # on the loop's own thread
                with self.assertRaises(dlock.NotHeld):
                    await lk2.arelease()
                # Every completion ran with no dlock thread alive: on this thread, the loop's.
                self.assertEqual(threads(), before)
                self.assertNotIn("dlock-events", [t.name for t in threading.enumerate()
                                                  if t.ident != me and t.name == "dlock-events"
                                                  and dlock._events_now is None])
                self.assertIsNone(client._h)  # the sync API's client was never opened
                await got.arelease()
            self.assertEqual(threads(), before)

        asyncio.run(asyncio.wait_for(main(), 20))
        self.assertFalse(dlock._loop_clients)
        self.assertTrue(wait_for(lambda: not dlock._ops and not dlock._lost_slots),
                        (dlock._ops, dlock._lost_slots))

    def test_cancelling_a_pending_acquire_cancels_it_in_the_library(self):
        name = unique("hooks-cancel")

        async def main():
            async with dlock.Client(URL) as client:
                holder = await client.aacquire(name)
                task = asyncio.ensure_future(client.aacquire(name))
                await asyncio.sleep(0.1)
                self.assertEqual(listening(name), 1)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.05)
                self.assertFalse(dlock._ops)  # its done ran (DLOCK_ECANCELLED)
                await holder.arelease()
                await asyncio.sleep(0.1)
                self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")  # nobody took it

        asyncio.run(asyncio.wait_for(main(), 20))

    def test_two_loops_on_two_threads_share_one_client(self):
        name = unique("hooks-two")
        client = dlock.Client(URL)
        self.addCleanup(client.close)
        counter = [0]
        tokens = []
        loops = []
        errors = []

        async def worker():
            loops.append(asyncio.get_running_loop())
            for _ in range(30):
                async with client.alock(name, lease=5) as lk:
                    tokens.append(lk.fencing_token)
                    v = counter[0]
                    await asyncio.sleep(0.001)
                    counter[0] = v + 1

        def run():
            try:
                asyncio.run(worker())
            except BaseException as e:
                errors.append(e)

        ts = [threading.Thread(target=run) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(counter[0], 60)
        self.assertEqual(tokens, sorted(tokens))
        self.assertEqual(len(set(tokens)), 60)
        # each loop had its own client, closed when its asyncio.run ended
        self.assertFalse(dlock._loop_clients)
        self.assertTrue(all(v.closed for v in client._loops.values()))
        client.acquire(name, blocking=False).release()  # the sync API still works

    def test_close_from_another_thread_cancels_the_loops_pending_acquire(self):
        name = unique("hooks-close")
        holder_client = dlock.Client(URL)
        self.addCleanup(holder_client.close)
        holder = holder_client.acquire(name)
        client = dlock.Client(URL)
        waiting = threading.Event()
        outcome = []

        async def main():
            task = asyncio.ensure_future(client.aacquire(name))
            await asyncio.sleep(0.1)
            waiting.set()
            try:
                await asyncio.wait_for(task, 10)
            except BaseException as e:
                outcome.append(e)

        t = threading.Thread(target=lambda: asyncio.run(main()))
        t.start()
        self.assertTrue(waiting.wait(10))
        client.close()  # not the loop's thread: it closes that client on its loop
        t.join(15)
        self.assertEqual(len(outcome), 1)
        self.assertIsInstance(outcome[0], dlock.Cancelled)
        self.assertIn("closed", str(outcome[0]))
        holder.release()
        self.assertFalse(dlock._loop_clients)

    def test_sync_release_and_extend_of_an_async_hold(self):
        name = unique("hooks-sync")
        client = dlock.Client(URL)
        self.addCleanup(client.close)
        key = f"dlock:{{{name}}}"

        async def main():
            loop = asyncio.get_running_loop()
            lk = await client.aacquire(name, lease=5)
            # extend() on the loop's thread would wait for the loop it blocks: refused, clearly
            with self.assertRaises(dlock.InvalidArgument) as cm:
                lk.extend(20)
            self.assertIn("aextend", str(cm.exception))
            # from another thread while the loop runs: fine
            await loop.run_in_executor(None, lambda: lk.extend(20))
            self.assertGreater(int(cli("PTTL", key)), 10_000)
            # release() on the loop's thread: works (holds the loop one round trip)
            lk.release()
            self.assertEqual(cli("EXISTS", key), "0")
            lk = await client.aacquire(name, lease=5)
            await loop.run_in_executor(None, lk.release)  # from another thread
            self.assertEqual(cli("EXISTS", key), "0")
            return await client.aacquire(name, lease=5)

        lk = asyncio.run(main())
        # asyncio.run's end closed that loop's client: it released what it held
        self.assertEqual(cli("EXISTS", key), "0")
        with self.assertRaises(dlock.NotHeld):
            lk.release()
        client.acquire(name, blocking=False).release()

    def test_a_loop_closed_without_shutdown_leaves_nothing_hanging(self):
        name = unique("hooks-closed")
        client = dlock.Client(URL)
        loop = asyncio.new_event_loop()
        lk = loop.run_until_complete(client.aacquire(name, lease=2))
        loop.close()  # no shutdown_asyncgens: nothing can drive that client any more
        t0 = time.monotonic()
        with self.assertRaises(dlock.InvalidArgument) as cm:
            lk.extend(5)
        self.assertIn("closed", str(cm.exception))
        with self.assertRaises(dlock.InvalidArgument):
            lk.release()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client.close()
        self.assertLess(time.monotonic() - t0, 3)
        self.assertTrue(any(issubclass(w.category, ResourceWarning) for w in caught))
        lk._h = lk._lc = lk._slot = None  # its hold is left to expire
        dlock._loop_clients.clear()

    def test_a_loop_run_by_hand_is_closed_by_client_close(self):
        name = unique("hooks-hand")
        client = dlock.Client(URL)
        loop = asyncio.new_event_loop()
        try:
            lk = loop.run_until_complete(client.aacquire(name, lease=5))
            self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "1")
            client.close()  # the loop's thread, loop idle: closed there, the loop turned
            self.assertEqual(cli("EXISTS", f"dlock:{{{name}}}"), "0")
            self.assertFalse(dlock._loop_clients)
            with self.assertRaises(dlock.NotHeld):
                lk.release()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def test_exceptions_in_callbacks_never_reach_c(self):
        # the hooks and completions catch everything (and say so on stderr)
        op = next(dlock._ids)

        def boom(*args):
            raise RuntimeError("a buggy completion")

        dlock._ops[op] = boom
        with open(os.devnull, "w") as devnull:
            old, sys.stderr = sys.stderr, devnull
            try:
                self.assertIsNone(dlock._done(0, op))
                self.assertIsNone(dlock._hook_watch_fd(op, None, -1, 1, None))
                self.assertIsNone(dlock._hook_set_timer(op, None, 5))
                self.assertIsNone(dlock._hook_cleanup(op))
            finally:
                sys.stderr = old
        self.assertNotIn(op, dlock._ops)

        async def main():
            async with dlock.Client(URL) as client:
                lk = await client.aacquire(unique("hooks-raise"), lease=3, heartbeat=0.1,
                                           on_lost=boom)
                handled = []
                asyncio.get_running_loop().set_exception_handler(
                    lambda loop, ctx: handled.append(ctx))
                cli("DEL", f"dlock:{{{lk.name}}}")
                for _ in range(300):
                    if not lk.valid:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                # on_lost ran on the loop, outside C: asyncio's handler saw its exception
                self.assertFalse(lk.valid)
                with self.assertRaises(dlock.NotHeld):
                    await lk.arelease()
                # and the client still works
                async with client.alock(unique("hooks-after")):
                    pass

        asyncio.run(asyncio.wait_for(main(), 20))


class Guard(Base):
    """`async with lock.guard():` cancels the block when the lock is lost (issue 31, item 4)."""

    def test_a_lost_lock_cancels_the_guarded_block(self):
        name = unique("guard")
        key = f"dlock:{{{name}}}"
        told = []

        async def main():
            loop = asyncio.get_running_loop()
            # A lease of 3 s renewed every 150 ms: a renewal finds the key gone well within it.
            lk = self.client.lock(name, lease=3, heartbeat=0.15, on_lost=told.append)
            deleted_at = []
            reached = []

            async def delete_by_hand():
                await asyncio.sleep(0.3)
                await loop.run_in_executor(None, cli, "DEL", key)
                deleted_at.append(time.monotonic())

            with self.assertRaises(dlock.LockLost) as cm:
                async with lk.guard() as held:
                    self.assertIs(held, lk)
                    self.assertTrue(lk.valid)
                    deleter = asyncio.ensure_future(delete_by_hand())
                    await asyncio.sleep(60)  # the work: only the loss ends it
                    reached.append("after the sleep")
            cancelled_after = time.monotonic() - deleted_at[0]
            await deleter
            self.assertEqual(reached, [])
            self.assertLess(cancelled_after, 3.0, "not cancelled within the lease")
            self.assertIsInstance(cm.exception, dlock.NotHeld)
            self.assertEqual(cm.exception.code, "DLOCK_NOT_HELD")
            self.assertIsInstance(cm.exception.__cause__, asyncio.CancelledError)
            self.assertIn(repr(name), str(cm.exception))
            self.assertTrue(lk.released)
            self.assertEqual(told, [lk])  # on_lost= still runs
            task = asyncio.current_task()
            if hasattr(task, "cancelling"):
                self.assertEqual(task.cancelling(), 0)
            await asyncio.sleep(0.01)  # the task itself is not cancelled any more
            async with lk.guard():  # the lock object is reusable
                self.assertEqual(cli("EXISTS", key), "1")
            self.assertEqual(cli("EXISTS", key), "0")

        asyncio.run(asyncio.wait_for(main(), 20))
        self.assertTrue(wait_for(lambda: not dlock._lost_slots and not dlock._pending))

    def test_other_cancellations_and_errors_go_on(self):
        name = unique("guard")
        key = f"dlock:{{{name}}}"

        async def main():
            lk = self.client.lock(name, lease=5, heartbeat=0.15)
            entered = asyncio.Event()

            async def work():
                async with lk.guard():
                    entered.set()
                    await asyncio.sleep(60)

            task = asyncio.ensure_future(work())
            await asyncio.wait_for(entered.wait(), 5)
            task.cancel()  # not a loss: stays a CancelledError, and the lock is released
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertEqual(cli("EXISTS", key), "0")
            with self.assertRaises(KeyError):
                async with lk.guard():
                    raise KeyError("the block's own")
            self.assertEqual(cli("EXISTS", key), "0")
            # lost, and the block raises its own error on being cancelled: that one goes on
            with self.assertRaises(ValueError):
                async with lk.guard():
                    cli("DEL", key)
                    try:
                        await asyncio.sleep(60)
                    except asyncio.CancelledError:
                        raise ValueError("cleanup failed")
            self.assertTrue(lk.released)
            guard = lk.guard()
            async with guard:
                pass
            with self.assertRaises(RuntimeError):  # one guard, one block
                async with guard:
                    pass

        asyncio.run(asyncio.wait_for(main(), 20))


def _forked_child(say, inherited, inherited_lock):
    """What test_forked_child_acquires_loses_and_is_told runs in the child: says one line per
    step through say(); every wait is bounded."""
    with dlock.Client(URL) as client:  # a client of its own
        name = unique("fork-sync")
        lost = threading.Event()
        lk = client.acquire(name, lease=3, heartbeat=0.15, on_lost=lambda lock: lost.set())
        cli("DEL", f"dlock:{{{name}}}")
        say("sync " + ("ok" if lost.wait(5) else "on_lost never ran"))
        try:
            lk.release()
        except dlock.NotHeld:
            pass

        async def asynchronous():
            loop = asyncio.get_running_loop()
            name = unique("fork-async")
            told = loop.create_future()
            try:
                lk = await asyncio.wait_for(client.aacquire(
                    name, lease=3, heartbeat=0.15,
                    on_lost=lambda lock: told.done() or told.set_result(lock)), 5)
            except asyncio.TimeoutError:
                return "aacquire never completed"
            cli("DEL", f"dlock:{{{name}}}")
            try:
                await asyncio.wait_for(told, 5)
            except asyncio.TimeoutError:
                return "on_lost never ran"
            try:
                await asyncio.wait_for(lk.arelease(), 5)
            except dlock.NotHeld:
                pass
            return "ok"

        say("async " + asyncio.run(asynchronous()))

    # The parent's client and lock refuse every use, and a close releases nothing of the parent's.
    for what, use in (("acquire", lambda: inherited.acquire(unique("fork-x"), blocking=False)),
                      ("lock", lambda: inherited.lock("x")),
                      ("inspect", lambda: inherited.inspect("x")),
                      ("release", inherited_lock.release),
                      ("extend", lambda: inherited_lock.extend(5)),
                      ("valid", lambda: inherited_lock.valid)):
        try:
            use()
        except dlock.ForkedClient as e:
            message = str(e)
            good = "fork" in message and "new dlock.Client" in message
            say(f"inherited-{what} " + ("ok" if good else "unclear: " + message))
        except BaseException as e:
            say(f"inherited-{what} raised {type(e).__name__}: {e}")
        else:
            say(f"inherited-{what} worked in the child")
    say("repr " + ("ok" if "fork" in repr(inherited) and "fork" in repr(inherited_lock)
                   else repr(inherited)))
    inherited.close()
    say("close ok")


class Fork(unittest.TestCase):
    """A child made by fork (gunicorn --preload, Celery prefork, multiprocessing's fork) of a
    process that used dlock (issue 31, item 5)."""

    def test_forked_child_acquires_loses_and_is_told(self):
        client = dlock.Client(URL)
        self.addCleanup(client.close)
        # The parent uses dlock first: a hold with on_lost (the completion queue and its
        # thread), and asyncio. It still holds a lock at the fork.
        held = client.acquire(unique("fork-parent"), lease=10, on_lost=lambda lock: None)
        self.addCleanup(lambda: held.released or held.release())

        async def use_async():
            lk = await client.aacquire(unique("fork-parent"), lease=5)
            await lk.arelease()

        asyncio.run(use_async())
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
            pid = os.fork()
        if pid == 0:  # the child: reports through the pipe, never returns into unittest
            code = 1
            try:
                os.close(r)
                _forked_child(lambda line: os.write(w, (line + "\n").encode()), client, held)
                code = 0
            except BaseException:
                os.write(w, ("child raised: " + traceback.format_exc()).encode())
            finally:
                os._exit(code)
        os.close(w)
        out, status = b"", None
        deadline = time.monotonic() + 45
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    break
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                out += chunk
            while status is None and time.monotonic() < deadline + 5:
                got, st = os.waitpid(pid, os.WNOHANG)
                if got:
                    status = st
                else:
                    time.sleep(0.02)
        finally:
            os.close(r)
            if status is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        report = out.decode(errors="replace")
        self.assertIsNotNone(status, f"the child hung; it said:\n{report}")
        lines = dict(line.split(" ", 1) for line in report.splitlines() if " " in line)
        for step in ("sync", "async", "inherited-acquire", "inherited-lock", "inherited-inspect",
                     "inherited-release", "inherited-extend", "inherited-valid", "repr", "close"):
            self.assertEqual(lines.get(step, "").split(" ")[0], "ok",
                             f"child step {step!r}; it said:\n{report}")
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report)
        # The parent's hold is untouched, and its queue, thread and client still work.
        self.assertTrue(held.valid)
        self.assertEqual(cli("EXISTS", f"dlock:{{{held.name}}}"), "1")
        asyncio.run(asyncio.wait_for(use_async(), 10))
        lost = threading.Event()
        lk = client.acquire(unique("fork-parent"), lease=3, heartbeat=0.15,
                            on_lost=lambda lock: lost.set())
        cli("DEL", f"dlock:{{{lk.name}}}")
        self.assertTrue(lost.wait(5), "the parent's on_lost never ran after the fork")
        with self.assertRaises(dlock.NotHeld):
            lk.release()
        held.release()


if __name__ == "__main__":
    unittest.main()
