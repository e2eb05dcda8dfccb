"""A contender for test_dlock.TwoProcesses: N times, under the lock, reads "value token" from a
file, checks that its own fencing token is greater than the last writer's, and writes
"value+1 own_token". Exits 1 on a fencing violation. One Lock object serves every round (waiting
without limit, the default), so a round that ran unlocked would show as a lost count."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dlock  # noqa: E402

url, name, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with dlock.Client(url) as client:
    lock = client.lock(name, lease=10)  # one lock object, reused: every `with` acquires it
    for _ in range(n):
        with lock:
            with open(path) as f:
                value, last_token = (int(x) for x in f.read().split())
            if lock.fencing_token <= last_token:
                print(f"fencing violation: {lock.fencing_token} <= {last_token}", file=sys.stderr)
                sys.exit(1)
            with open(path + ".tmp", "w") as f:
                f.write(f"{value + 1} {lock.fencing_token}")
            os.replace(path + ".tmp", path)
