"""An example that uses every public name of dlock, for type checkers.

suite.sh checks it with `mypy --strict` against the installed package (its inline annotations
and py.typed), then runs it against the suite's Redis: python3 tests/typed_example.py URL.
The explicit annotations on the left of each `=` are the point: mypy --strict checks that
dlock's own types agree with them. Not a unittest module (no test_ prefix).
"""

import asyncio
import logging
import queue
import sys
from datetime import timedelta
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple, Type, Union

import dlock
import dlock.prometheus
from dlock import (MAX_NAME_BYTES, MAX_OWNER_BYTES, MAX_VALUE_BYTES, AlreadyHeld, AsyncObserver,
                   AuthError, BackendError, Cancelled, Client, Error, Event, ForkedClient, Holder,
                   InternalError, InvalidArgument, Lock, LockGroup, LockInfo, LockLost,
                   MetricFamily, Metrics, MetricSample, NotAcquired, NotHeld, Observer,
                   OutOfMemory, library_path, log_events, version)

# Every status class, each a dlock.Error (dlock.ConnectionError is not in __all__).
ERRORS: Tuple[Type[Error], ...] = (
    NotAcquired, NotHeld, AlreadyHeld, InvalidArgument, BackendError, AuthError, Cancelled,
    OutOfMemory, InternalError, LockLost, ForkedClient, dlock.ConnectionError,
)


def on_lost(lock: Lock) -> None:
    cause: Optional[str] = lock.lost_cause  # "deleted: ...", "taken_over: ...", ...
    print("lost", lock.name, cause, file=sys.stderr)


def describe(info: LockInfo) -> str:
    kind: Union[str, int] = info.kind
    holders: List[Holder] = info.holders
    permits: int = info.permits
    closed_ms: int = info.closed_ms
    closed_by: str = info.closed_by
    parts = [f"kind={kind} permits={permits} closed_ms={closed_ms} closed_by={closed_by!r}"]
    for h in holders:
        owner: Optional[str] = h.owner
        left: Optional[int] = h.remaining_ms
        token: Optional[int] = h.fencing_token
        value: bytes = h.value
        parts.append(f"{owner}: {left} ms, token {token}, value {value!r}")
    return "; ".join(parts)


def sync_part(client: Client, prefix: str) -> None:
    caps: FrozenSet[str] = client.capabilities
    closed: bool = client.closed

    # lock(): not acquired yet; `with` acquires and releases, every time.
    lk: Lock = client.lock(prefix + "sync", lease=timedelta(seconds=5), heartbeat=1, retry=(0.01, 0.2),
                           owner="typed-example", on_lost=on_lost, timeout=10, fair=True,
                           max_hold=3600.0, min_hold=0.0, lock_delay=0, reentrant="typed-1")
    with lk as held:
        token: Optional[int] = held.fencing_token
        assert token is not None and lk.owned() and lk.locked()
        attempts: int = lk.attempts
        valid: bool = lk.valid
        left_ms: float = lk.remaining_ms
        left_s: float = lk.remaining
        lk.extend(3.5)
        lk.extend(lease_ms=4000)
        print("sync:", token, attempts, valid, left_ms, left_s, closed, sorted(caps))
        print(describe(client.inspect(prefix + "sync")))
    released: bool = lk.released
    assert released

    # acquire() by hand: True or False, like threading.Lock.
    if lk.acquire(timeout=2.5):
        try:
            other = client.lock(prefix + "sync", blocking=False)
            got: bool = other.acquire()
            assert not got
            try:
                lk.acquire(blocking=False)
            except AlreadyHeld as e:
                status: Optional[int] = e.status
                code: Optional[str] = e.code
                message: str = e.message
                print("already held:", status, code, message)
        finally:
            lk.release()

    # Client.acquire(): acquired at once, or NotAcquired (a TimeoutError too).
    busy = client.acquire(prefix + "busy", lease_ms=5000, wait_ms=None)
    try:
        client.acquire(prefix + "busy", timeout=0.05)
    except NotAcquired as e:
        timed_out: TimeoutError = e
        print("busy:", timed_out)
    finally:
        busy.release()
    try:
        busy.release()
    except NotHeld as e:
        why: Optional[str] = e.cause  # None: released already, not lost
        print("not held:", e.code, why, busy.lost_cause)

    # several names, all or none: a sequence of Locks, in the order given
    pair: LockGroup = client.lock_many([prefix + "acct/2", prefix + "acct/1"], timeout=5.0,
                                       lease=5, on_lost=on_lost, owner="typed-example")
    with pair as (dst, src):
        dst_token: Optional[int] = dst.fencing_token
        first_lock: Lock = pair[0]
        both: Tuple[Lock, ...] = pair[:]
        names: Tuple[Union[str, bytes], ...] = pair.names
        assert first_lock is dst and len(both) == 2 and pair.valid and src.valid
        print("pair:", names, dst_token, src.fencing_token)
    if pair.acquire(blocking=False):
        pair.release()
    none_held: bool = pair.released
    assert none_held

    # kinds and permits, where the backend offers them.
    if "shared" in caps:
        readers = [client.lock(prefix + "rw", kind="shared"), client.lock(prefix + "rw", shared=True)]
        for r in readers:
            assert r.acquire(timeout=1)
        print(describe(client.inspect((prefix + "rw").encode())))
        for r in readers:
            r.release()
    if "permits" in caps:
        sem = client.lock(prefix + "sem", kind="exclusive", permits=3, blocking=True,
                          heartbeat_ms=0, retry_ms=(10, 100), max_hold_ms=0,
                          min_hold_ms=0, lock_delay_ms=0)
        with sem:
            print(describe(client.inspect(prefix + "sem")))
        several: Lock = client.acquire(prefix + "sem", permits=3, take=2, blocking=False)
        several.release()

    try:
        client.lock(prefix + "bad", lease=-1)
    except InvalidArgument as e:
        invalid: ValueError = e
        print("invalid:", invalid)

    # values stored with a hold, and leader election
    with client.lock(prefix + "valued", value=b"\x00bytes", owner="typed-example") as valued:
        valued.set_value("text")
        valued.set_value(b"")
    leadership: Lock = client.campaign(prefix + "leader", value="10.0.0.7:8080", lease=5,
                                       heartbeat=1, owner="typed-example", on_lost=on_lost,
                                       fair=True, max_hold=600, lock_delay=0.0)
    leadership.set_value(b"10.0.0.7:9090")
    leader: Optional[Holder] = client.leader(prefix + "leader")
    assert leader is not None and leader.fencing_token == leadership.fencing_token
    print("leader:", leader.value, "term", leader.fencing_token)
    leadership.release()
    assert client.leader(prefix + "leader") is None

    # an operator's takeover
    if "break" in caps:
        victim = client.acquire(prefix + "broken", lease=5, owner="typed-example")
        broke: LockInfo = client.break_lock(prefix + "broken", reason="typed example", now=True)
        assert broke.holders[0].fencing_token == victim.fencing_token and broke.closed_ms == 0
        print("broke:", describe(broke), dlock.MAX_REASON_BYTES)
        client.break_lock(prefix + "broken")

    # asking a holder to let go: it hears the reason, and may release
    if "release_request" in caps:
        def let_go(lock: Lock, reason: str) -> None:
            print("asked to let go of", lock.name, "because", reason)

        asked_lock = client.acquire(prefix + "asked", on_release_requested=let_go)
        asked: bool = client.request_release(prefix + "asked", reason="typed example")
        assert asked
        asked_lock.release()
        nobody: bool = client.request_release(prefix + "asked")
        assert not nobody

    # observing who leads: a callback on the dlock-events thread, until cancel()
    reports: "queue.Queue[Optional[Holder]]" = queue.Queue()
    observer: Observer = client.observe(prefix + "leader", reports.put)
    with observer:
        first: Optional[Holder] = reports.get(timeout=5)
        assert first is None
    cancelled: bool = observer.cancelled
    assert cancelled
    observer.cancel()
    metrics_part(client)
    events_part(client, prefix)


def events_part(client: Client, prefix: str) -> None:
    # what happens to the client's locks, as it happens (on the thread that did the work)
    seen: List[Event] = []

    @client.on_event
    def on_event(event: Event) -> None:
        kind: str = event.type
        name: str = event.name
        attempts: int = event.attempts
        elapsed: float = event.elapsed
        token: Optional[int] = event.fencing_token
        status: int = event.status
        code: Optional[str] = event.code
        detail: str = event.detail
        cause: Optional[str] = event.cause
        assert kind and name and attempts >= 0 and elapsed >= 0 and status >= 0
        assert token is None or token > 0
        assert code is None or code.startswith("DLOCK_")
        assert detail is not None and cause in (None, "deleted", "taken_over", "refused", "expired")
        seen.append(event)

    logged: Callable[[Event], None] = log_events(client, logging.getLogger("dlock"),
                                                 levels={"acquired": logging.INFO})
    log_events(client)
    with client.lock(prefix + "events"):
        pass
    client.off_event(on_event)
    client.off_event(logged)
    assert [e.type for e in seen] == ["acquiring", "acquired", "released"], seen
    print("events:", [(e.type, e.fencing_token) for e in seen])


def metrics_part(client: Client) -> None:
    # what the client counted, with no metrics library
    metrics: Metrics = client.metrics()
    acquired: float = metrics.value("dlock_acquires_total", kind="exclusive", outcome="acquired")
    anyhow: float = metrics.value("dlock_acquires_total", outcome="acquired")
    assert acquired > 0 and anyhow >= acquired and "dlock_locks_held" in metrics
    families: List[MetricFamily] = metrics.families
    hold: MetricFamily = metrics["dlock_hold_seconds"]
    for family in metrics:
        name: str = family.name
        kind: str = family.type
        help_text: str = family.help
        samples: List[MetricSample] = family.samples
        for s in samples:
            sample_name: str = s.name
            labels: Dict[str, str] = s.labels
            value: float = s.value
            assert name and kind and help_text and sample_name and value >= 0 and labels is not None
    text: str = client.metrics_text()
    print("metrics:", len(families), len(metrics), hold.type, acquired, text.count("\n"))
    # prometheus_client's collector, where prometheus_client is installed (add, remove and
    # clients need none)
    own = dlock.prometheus.Collector()
    own.add(client, label="typed")
    assert own.clients() == [(client, "typed")]
    own.remove(client)
    try:
        collector: dlock.prometheus.Collector = dlock.prometheus.register(client, label="typed")
    except ImportError as e:
        print("no prometheus_client:", e)
        return
    registered: List[Tuple[Client, Optional[str]]] = collector.clients()
    assert registered == [(client, "typed")]
    dlock.prometheus.unregister(client)


async def async_part(client: Client, prefix: str) -> None:
    lk = client.alock(prefix + "async", lease=5, on_lost=on_lost)
    async with lk:
        print("async:", lk.fencing_token)
    if await lk.aacquire(timeout=1.0):
        await lk.aextend(2)
        await lk.aextend(lease_ms=2000)
        await lk.arelease()
    held: Lock = await client.aacquire(prefix + "async", timeout=1)
    await held.arelease()
    held = await client.alock(prefix + "async")  # awaiting a Lock acquires it
    await held.arelease()
    async with lk.guard() as guarded:
        assert guarded is lk
    try:
        async with client.lock(prefix + "async").guard():
            pass
    except LockLost:
        print("lost while the block ran")
    async with client.alock_many([prefix + "async", prefix + "async-2"], timeout=5) as (one, two):
        print("async pair:", one.fencing_token, two.fencing_token)
    group: LockGroup = await client.alock_many([prefix + "async"], lease=5.0)
    await group.arelease()
    if await group.aacquire(timeout=1.0):
        await group.arelease()
    info: LockInfo = await client.ainspect(prefix + "async")
    print(describe(info))
    if "break" in client.capabilities:
        broke: LockInfo = await client.abreak_lock(prefix + "async", "typed example", now=True)
        print(describe(broke))
    if "release_request" in client.capabilities:
        unasked: bool = await client.arequest_release(prefix + "async", "typed example")
        assert not unasked
    leadership: Lock = await client.acampaign(prefix + "async-leader", value=b"a", lease_ms=5000)
    await leadership.aset_value("b")
    leader: Optional[Holder] = await client.aleader(prefix + "async-leader")
    assert leader is not None and leader.value == b"b"
    observed: AsyncObserver = client.aobserve(prefix + "async-leader")
    async for now in observed:
        seen: Optional[Holder] = now
        assert seen is not None and seen.value == b"b"
        break
    await observed.aclose()
    await leadership.arelease()
    async with client.aobserve(prefix + "async-leader") as leaders:
        async for nobody in leaders:
            assert nobody is None
            break
    assert leaders.cancelled


async def async_client(url: str, prefix: str) -> None:
    async with Client(url) as client:
        await async_part(client, prefix)
    other = Client(url)
    await other.aclose()


def main(argv: List[str]) -> int:
    url = argv[1] if len(argv) > 1 else "redis://127.0.0.1:6379"
    prefix = "typed-example/"
    v: str = version()
    path: str = library_path
    limits: Tuple[int, int, int] = (MAX_NAME_BYTES, MAX_OWNER_BYTES, MAX_VALUE_BYTES)
    print("dlock", dlock.__version__, "library", v, path, limits)
    try:
        with Client(url) as client:
            sync_part(client, prefix)
        asyncio.run(async_client(url, prefix))
    except dlock.ConnectionError as e:
        print("cannot reach", url, ":", e, file=sys.stderr)
        return 2
    except ERRORS as e:
        print("dlock error:", e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
