"""Python side of bench/peers: dlock's Python binding vs redis-py's Lock.

    python3 bench.py uncontended PORT SECONDS ROUNDS LIB...
        one process, acquire+release cycles/s of each library in turn, ROUNDS rounds
    python3 bench.py contended PORT SECONDS PROCS ROUNDS LIB...
        PROCS processes of one library contend for one lock; handoffs/s = acquisitions that
        follow another process's (a shared file under the lock names the last holder)
    python3 bench.py aio-uncontended PORT SECONDS ROUNDS ALIB...
    python3 bench.py aio-contended PORT SECONDS PROCS ROUNDS ALIB...
        the same on asyncio, one event loop per process, awaiting each acquire and release

Prints key=value lines (medians over the rounds, per-round figures, and the median of the
per-round ratios dlock / best peer); bench/peers/run turns them into a table.
LIB: dlock | dlock-object (one reusable client.lock() object; not a peer) | redis-py.
ALIB (asyncio): dlock (await client.aacquire / lock.arelease: a client driven by the event loop
itself, no thread hop) | redis-asyncio (redis.asyncio's Lock, redis-py 4.x). Each library runs with its defaults except a 10 s lease and waiting
without a limit (redis-py's Lock polls every 0.1 s by default; dlock's waiters sleep until the
release is published). Needs the `redis` module for redis-py: Debian's python3-redis, which
/usr/bin/python3 has (bench/peers/run uses it).
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
LEASE_MS = 10_000


def adapter(lib, port, key, wait):
    """Returns (acquire() -> release(), close())."""
    if lib in ("dlock", "dlock-object"):
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        import dlock
        client = dlock.Client(f"redis://127.0.0.1:{port}")
        if lib == "dlock":  # a Lock per hold: client.acquire()
            wait_ms = -1 if wait else 0

            def acquire():
                return client.acquire(key, lease_ms=LEASE_MS, wait_ms=wait_ms).release

            return acquire, client.close
        # One reusable lock object, as `lk = client.lock(...)` then `with lk:` (issue 31): not a
        # peer, the object API's cost against the call above.
        lock = client.lock(key, lease=LEASE_MS / 1000, blocking=wait)

        def acquire_object():
            if not lock.acquire():
                raise RuntimeError("not acquired")
            return lock.release

        return acquire_object, client.close
    if lib == "redis-py":
        import redis
        r = redis.Redis(host="127.0.0.1", port=port)

        def acquire():
            lock = r.lock(key, timeout=LEASE_MS / 1000)  # sleep=0.1 s between tries (default)
            if not lock.acquire(blocking=wait):
                raise RuntimeError("not acquired")
            return lock.release

        return acquire, r.close
    raise SystemExit(f"unknown library {lib!r} (dlock, redis-py)")


async def aadapter(lib, port, key, wait):
    """asyncio: returns (async acquire() -> async release(), async close())."""
    if lib == "dlock":
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        import dlock
        client = dlock.Client(f"redis://127.0.0.1:{port}")  # made on the loop: driven by it
        wait_ms = -1 if wait else 0

        async def acquire():
            return (await client.aacquire(key, lease_ms=LEASE_MS, wait_ms=wait_ms)).arelease

        return acquire, client.aclose
    if lib == "redis-asyncio":
        import redis.asyncio
        r = redis.asyncio.Redis(host="127.0.0.1", port=port)

        async def acquire():
            lock = r.lock(key, timeout=LEASE_MS / 1000)  # sleep=0.1 s between tries (default)
            if not await lock.acquire(blocking=wait):
                raise RuntimeError("not acquired")
            return lock.release

        return acquire, getattr(r, "aclose", None) or r.close
    raise SystemExit(f"unknown asyncio library {lib!r} (dlock, redis-asyncio)")


def median(xs):
    v = sorted(xs)
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def report(mode, rates, rounds, details=None):
    """key=value lines: medians, per-round figures, median of per-round dlock / best peer."""
    ratios, object_ratios = [], []
    for r in range(rounds):
        peers = [rates[lib][r] for lib in rates if not lib.startswith("dlock")]
        if "dlock" in rates and peers:
            ratios.append(rates["dlock"][r] / max(peers))
        if "dlock" in rates and "dlock-object" in rates:
            object_ratios.append(rates["dlock-object"][r] / rates["dlock"][r])
    for lib, xs in rates.items():
        print(f"{mode}_{lib}={median(xs):.1f}")
        print(f"{mode}_{lib}_rounds={'/'.join(f'{x:.0f}' for x in xs)}")
        if details and details.get(lib):
            print(f"{mode}_{lib}_detail={' '.join(details[lib])}")
    if ratios:
        print(f"{mode}_ratio={median(ratios):.2f}")
        print(f"{mode}_ratio_rounds={'/'.join(f'{x:.2f}' for x in ratios)}")
    if object_ratios:
        print(f"{mode}_object_ratio={median(object_ratios):.2f}")
        print(f"{mode}_object_ratio_rounds={'/'.join(f'{x:.2f}' for x in object_ratios)}")
    sys.stdout.flush()


def uncontended(port, seconds, rounds, libs):
    """Every library in this one process, ROUNDS rounds of SECONDS each in turn (rotating)."""
    adapters = {}
    for lib in libs:
        adapters[lib] = adapter(lib, port, f"bench:unc:{lib}:{os.getpid()}", False)
        warm_end = time.monotonic() + 0.3
        while time.monotonic() < warm_end:
            adapters[lib][0]()()
    rates = {lib: [] for lib in libs}
    for r in range(rounds):
        for i in range(len(libs)):
            lib = libs[(i + r) % len(libs)]
            acquire = adapters[lib][0]
            n = 0
            t0 = now = time.monotonic()
            end = t0 + seconds
            while now < end:
                acquire()()
                n += 1
                now = time.monotonic()
            rates[lib].append(n / (now - t0))
    for lib in libs:
        adapters[lib][1]()
    report("unc", rates, rounds)


def aio_uncontended(port, seconds, rounds, libs):
    """uncontended() on one asyncio event loop."""
    import asyncio

    async def main():
        adapters = {}
        for lib in libs:
            adapters[lib] = await aadapter(lib, port, f"bench:aunc:{lib}:{os.getpid()}", False)
            warm_end = time.monotonic() + 0.3
            while time.monotonic() < warm_end:
                await (await adapters[lib][0]())()
        rates = {lib: [] for lib in libs}
        for r in range(rounds):
            for i in range(len(libs)):
                lib = libs[(i + r) % len(libs)]
                acquire = adapters[lib][0]
                n = 0
                t0 = now = time.monotonic()
                end = t0 + seconds
                while now < end:
                    await (await acquire())()
                    n += 1
                    now = time.monotonic()
                rates[lib].append(n / (now - t0))
        for lib in libs:
            await adapters[lib][1]()
        return rates

    report("aunc", asyncio.run(main()), rounds)


def aio_child(lib, port, key, start_at, end_at, path):
    import asyncio

    async def main():
        acquire, close = await aadapter(lib, port, key, True)
        me = str(os.getpid())
        await asyncio.sleep(max(0.0, start_at - time.time()))
        n = handoffs = 0
        while time.time() < end_at:
            release = await acquire()
            if time.time() < end_at:
                n += 1
                with open(path) as f:
                    last = f.read()
                if last != me:
                    handoffs += 1
                    with open(path, "w") as f:
                        f.write(me)
            await release()
        await close()
        return n, handoffs

    n, handoffs = asyncio.run(main())
    print(f"count {n} {handoffs}", flush=True)


def child(lib, port, key, start_at, end_at, path):
    acquire, close = adapter(lib, port, key, True)
    me = str(os.getpid())
    time.sleep(max(0.0, start_at - time.time()))
    n = handoffs = 0
    while time.time() < end_at:
        release = acquire()
        if time.time() < end_at:
            n += 1
            with open(path) as f:
                last = f.read()
            if last != me:
                handoffs += 1
                with open(path, "w") as f:
                    f.write(me)
        release()
    close()
    print(f"count {n} {handoffs}", flush=True)


def contended_once(lib, port, seconds, procs, child_mode="child"):
    key = f"bench:con:{lib}:{os.getpid()}:{time.time()}"
    with tempfile.TemporaryDirectory(prefix="dlock-peers-") as d:
        path = os.path.join(d, "holder")
        with open(path, "w") as f:
            f.write("none")
        start_at = time.time() + 1.5  # time for every process to start and connect
        end_at = start_at + seconds
        ps = [subprocess.Popen([sys.executable, __file__, child_mode, lib, str(port), key,
                                repr(start_at), repr(end_at), path],
                               stdout=subprocess.PIPE, text=True) for _ in range(procs)]
        results = []
        for p in ps:
            out, _ = p.communicate(timeout=seconds + 60)
            if p.returncode != 0 or not out.startswith("count "):
                raise SystemExit(f"{lib} contender exited with {p.returncode}: {out}")
            results.append(tuple(int(x) for x in out.split()[1:3]))
    acquisitions = sum(r[0] for r in results)
    handoffs = sum(r[1] for r in results)
    detail = f"{acquisitions / seconds:.0f}acq/s[{'/'.join(str(r[0]) for r in results)}]"
    return handoffs / seconds, detail


def contended(port, seconds, procs, rounds, libs, mode="con", child_mode="child"):
    rates = {lib: [] for lib in libs}
    details = {lib: [] for lib in libs}
    for r in range(rounds):
        for i in range(len(libs)):
            lib = libs[(i + r) % len(libs)]
            rate, detail = contended_once(lib, port, seconds, procs, child_mode)
            rates[lib].append(rate)
            details[lib].append(detail)
    report(mode, rates, rounds, details)


def main():
    mode, *rest = sys.argv[1:]
    if mode == "uncontended":
        port, seconds, rounds, *libs = rest
        uncontended(int(port), float(seconds), int(rounds), libs)
    elif mode == "contended":
        port, seconds, procs, rounds, *libs = rest
        contended(int(port), float(seconds), int(procs), int(rounds), libs)
    elif mode == "aio-uncontended":
        port, seconds, rounds, *libs = rest
        aio_uncontended(int(port), float(seconds), int(rounds), libs)
    elif mode == "aio-contended":
        port, seconds, procs, rounds, *libs = rest
        contended(int(port), float(seconds), int(procs), int(rounds), libs, "acon", "aio-child")
    elif mode == "aio-child":
        lib, port, key, start_at, end_at, path = rest
        aio_child(lib, int(port), key, float(start_at), float(end_at), path)
    elif mode == "child":
        lib, port, key, start_at, end_at, path = rest
        child(lib, int(port), key, float(start_at), float(end_at), path)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
