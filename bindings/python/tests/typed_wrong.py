"""Wrong calls that mypy --strict must reject: suite.sh's self-test of the type check.

Each line marked `# error: CODE` must be reported by mypy at that line with that error code,
and nothing else may be: if dlock's annotations were lost (or py.typed were missing from the
installed package), these would pass silently or fail differently. Never run.
"""

import dlock
import dlock.prometheus


def wrong(client: dlock.Client, lock: dlock.Lock) -> None:
    lock.acquire(timeout="5")  # error: arg-type
    client.lock("jobs", lease="10")  # error: arg-type
    client.lock("jobs", kind="both")  # error: arg-type
    client.lock("jobs", max_hold="60")  # error: arg-type
    client.lock("jobs", min_hold="60")  # error: arg-type
    client.lock("jobs", lock_delay_ms=1.5)  # error: arg-type
    client.lock("jobs", reentrant=7)  # error: arg-type
    client.lock("jobs", permits=4, take="2")  # error: arg-type
    client.inspect(42)  # error: arg-type
    client.break_lock("jobs", reason=5)  # error: arg-type
    client.request_release("jobs", reason=5)  # error: arg-type
    client.lock("jobs", on_release_requested=lock.release)  # error: arg-type
    client.acquire("jobs", lease="10")  # error: arg-type
    client.acquire("jobs", wait=5)  # error: call-arg
    client.alock("jobs", kind="both")  # error: arg-type
    client.lock_many(["a", "b"], lease="10")  # error: arg-type
    client.lock_many(["a", "b"], on_release_requested=lock.release)  # error: call-arg
    client.alock_many(["a", "b"], kind="both")  # error: arg-type
    first: str = client.lock_many(["a", "b"])[0]  # error: assignment
    token: str = lock.fencing_token  # error: assignment
    held: str = lock.owned()  # error: assignment
    lock.release(True)  # error: call-arg
    lock.set_value(5)  # error: arg-type
    client.campaign("jobs", shared=True)  # error: call-arg
    client.campaign("jobs", take=2)  # error: call-arg
    leader: dlock.Holder = client.leader("jobs")  # error: assignment
    client.observe("jobs", 5)  # error: arg-type
    cause: int = lock.lost_cause  # error: assignment
    client.metrics().value("dlock_acquires_total", kind=1)  # error: arg-type
    dlock.prometheus.register(client, label=5)  # error: arg-type
    client.on_event(lock.set_value)  # error: arg-type
    dlock.log_events(client, levels={"lost": "ERROR"})  # error: dict-item
    print(token, held, leader, cause, dlock.MAX_NAME_BYTES + "")  # error: operator
