#!/usr/bin/env python3
"""The fault-injection suite: worker processes increment a counter in a fenced store under one
lock while faults are injected into the lock server, the network and the workers.

    tests/faults/run.py --worker build/tests/faults/fault_worker [--full] [--only NAME...]

Each scenario starts its own servers on free loopback ports (always stopped by pid), runs 3
workers (tests/faults/fault_worker.c) for a bounded time, injects its fault a few times, and
checks what a user would:
  - acknowledged increments == the store's final counter (no lost update);
  - fencing tokens unique across all acquisitions, and strictly rising across accepted writes;
  - stale writes accepted == 0 (the store refuses tokens below the highest seen);
  - every loss the store proved was reported by the library (callback, is_valid or
    DLOCK_NOT_HELD) before the worker's next write;
  - the system recovers after each heal within the scenario's stated bound;
  - no worker crashes or hangs.
The control scenario switches the store's fencing off and pauses a holder between its read and
its write past its lease: it must show lost updates, or the suite could not fail.
The last line reads `faults: N passed, N failed`; a Markdown table of figures precedes it.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEASE_MS = 1000
HOLD_MS = 1500  # each holder works up to this long (past its lease, renewed by heartbeats), so
# that faults find locks held and heartbeats running
DYNALITE_CLI = os.path.join(ROOT, "tests", "dynamodb", "node_modules", "dynalite", "cli.js")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listen_loopback():
    """A listening socket on a free loopback port, polled every 0.1 s by accept_loop."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.1)
    return sock


def accept_loop(owner, handle):
    """Calls handle(conn) for each connection to owner.sock until owner.stop is set."""
    while not owner.stop:
        try:
            conn, _ = owner.sock.accept()
        except socket.timeout:
            continue
        handle(conn)


def wait_port(port, limit=10.0):
    until = time.monotonic() + limit
    while time.monotonic() < until:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


# ----- the fenced store ---------------------------------------------------------------------


class Store:
    """A counter behind a socket that refuses reads and writes with a token below the highest
    it has seen (when fenced). Records every write it accepts."""

    def __init__(self, fenced=True):
        self.fenced = fenced
        self.counter = 0
        self.max_token = 0
        self.accepted = []  # tokens of accepted writes, in order
        self.stale_rejected = 0
        self.stale_accepted = 0
        self.mu = threading.Lock()
        self.sock = listen_loopback()
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=accept_loop, args=(self, self.serve), daemon=True)
        self.thread.start()

    def serve(self, conn):
        with conn:
            conn.settimeout(2)
            try:
                line = conn.makefile().readline().split()
                conn.sendall(self.handle(line).encode())
            except OSError:
                pass

    def handle(self, words):
        with self.mu:
            token = int(words[1])
            stale = token < self.max_token
            if stale and self.fenced:
                self.stale_rejected += 1
                return "STALE\n"
            if words[0] == "READ":
                self.max_token = max(self.max_token, token)
                return "VALUE %d\n" % self.counter
            if stale:
                self.stale_accepted += 1
            self.max_token = max(self.max_token, token)
            self.counter = int(words[2])
            self.accepted.append(token)
            return "OK\n"

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


# ----- servers --------------------------------------------------------------------------------


class Process:
    """A child process, always stopped by pid."""

    def __init__(self, argv, log, env=None):
        self.argv, self.log, self.env = argv, log, env
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env)

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        if self.proc:
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Server(Process):
    """A server on a free loopback port; restart() kills it and starts it again at once on the
    same port (Redis: with no data, as without persistence; dynalite: on its data folder, as
    real DynamoDB keeps its data)."""

    def __init__(self, argv_for_port, log):
        self.port = free_port()
        super().__init__(argv_for_port(self.port), log)
        if not wait_port(self.port):
            raise RuntimeError("%s did not start (see %s)" % (self.argv[0], log))

    def restart(self):
        self.kill()
        self.start()
        wait_port(self.port)


class Redis(Server):
    def __init__(self, work):
        super().__init__(lambda port: ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", work], os.path.join(work, "redis.log"))

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True, timeout=10).stdout.strip()


class Dynalite(Server):
    def __init__(self, work):
        data = os.path.join(work, "dynalite-data")
        os.makedirs(data, exist_ok=True)
        super().__init__(lambda port: ["node", DYNALITE_CLI, "--port", str(port), "--host", "127.0.0.1",
                                       "--path", data, "--createTableMs", "0"],
                         os.path.join(work, "dynalite.log"))


class Proxy:
    """TCP proxy to a server, for the faults a real server cannot make on its own: in mode
    'garbage' it sends bytes that are not RESP, in 'trickle' one byte every 50 ms, in 'silent'
    nothing; 'pass' forwards faithfully. New modes apply to every connection at once."""

    def __init__(self, target_port):
        self.target = target_port
        self.mode = "pass"
        self.sock = listen_loopback()
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.conns = []
        threading.Thread(target=accept_loop, args=(self, self.connect), daemon=True).start()

    def connect(self, client):
        try:
            server = socket.create_connection(("127.0.0.1", self.target), timeout=2)
        except OSError:
            client.close()
            return
        self.conns += [client, server]
        threading.Thread(target=self.pump, args=(client, server, False), daemon=True).start()
        threading.Thread(target=self.pump, args=(server, client, True), daemon=True).start()

    def pump(self, src, dst, to_client):
        src.settimeout(0.1)
        while not self.stop:
            try:
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            mode = self.mode
            try:
                if not to_client or mode == "pass":
                    dst.sendall(data)
                elif mode == "garbage":
                    dst.sendall(b"@@ not RESP @@\r\n")
                elif mode == "trickle":
                    for i in range(len(data)):
                        if self.stop or self.mode != "trickle":
                            dst.sendall(data[i:])
                            break
                        dst.sendall(data[i:i + 1])
                        time.sleep(0.05)
                # silent: dropped
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


# ----- workers --------------------------------------------------------------------------------


def faketime_env(offset_file):
    """A wall clock that the harness moves: libfaketime re-reads the offset file. The monotonic
    clock stays real (FAKETIME_DONT_FAKE_MONOTONIC): the point is a wall-clock jump under a
    library that must not care."""
    env = dict(os.environ)
    env.update(LD_PRELOAD=FAKETIME_LIB, FAKETIME_TIMESTAMP_FILE=offset_file, FAKETIME_NO_CACHE="1",
               FAKETIME_DONT_FAKE_MONOTONIC="1")
    return env


class Worker:
    def __init__(self, binary, url, store, seconds, pause_flag, log, faketime_file=None):
        env = faketime_env(faketime_file) if faketime_file else dict(os.environ)
        self.events = []  # (monotonic time, words)
        self.proc = subprocess.Popen([binary, url, "faults", str(store.port), str(seconds), str(LEASE_MS),
                                      pause_flag, str(HOLD_MS)], stdout=subprocess.PIPE, stderr=open(log, "ab"),
                                     stdin=subprocess.DEVNULL, env=env, text=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            self.events.append((time.monotonic(), line.split()))

    def finish(self, limit):
        try:
            rc = self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
            rc = "hung"
        self.reader.join(5)
        return rc


# ----- scenarios ----------------------------------------------------------------------------


class Scenario:
    def __init__(self, name, backend, fault, bound_s, fenced=True, expect_lost_updates=False):
        self.name, self.backend, self.fault, self.bound_s = name, backend, fault, bound_s
        self.fenced, self.expect_lost_updates = fenced, expect_lost_updates


def run_scenario(sc, args, work):
    seconds = 24 if args.full else 9
    faults = 6 if args.full else 2
    store = Store(fenced=sc.fenced)
    server = Redis(work) if sc.backend == "redis" else Dynalite(work)
    proxy = Proxy(server.port) if sc.fault.startswith("proxy") else None
    if sc.backend == "redis":
        port = proxy.port if proxy else server.port
        url = "redis://127.0.0.1:%d?timeout_ms=500&connect_timeout_ms=500" % port
    else:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "faults")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "faults")
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
        url = ("dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:%d&timeout_ms=500"
               "&connect_timeout_ms=500" % server.port)
        subprocess.run([args.worker, "--prepare", url], check=True, timeout=30)
    pause_flag = os.path.join(work, "pause")
    faketime_file = None
    if sc.fault == "clock_jump":
        faketime_file = os.path.join(work, "faketime")
        with open(faketime_file, "w") as f:
            f.write("+0\n")
    workers = [Worker(args.worker, url, store, seconds, pause_flag, os.path.join(work, "worker%d.log" % i),
                      faketime_file if i == 0 else None) for i in range(3)]
    heals = []  # monotonic times at which a fault was healed
    injected = 0
    start = time.monotonic()
    time.sleep(1.5)
    gap = (seconds - 3.0) / faults
    for k in range(faults):
        t0 = time.monotonic()
        if sc.fault == "holder_stop":
            open(pause_flag, "w").close()
            pid = None
            until = time.monotonic() + 4
            while pid is None and time.monotonic() < until:  # the next holder at its write
                for f in os.listdir(work):
                    if f.startswith("pause."):
                        pid = int(f.split(".")[1])
                        os.rename(os.path.join(work, f), os.path.join(work, "paused.%d.%d" % (pid, k)))
                time.sleep(0.01)
            if pid is not None:
                injected += 1
                heals.append(time.monotonic())  # the others go on once its lease ran out
                time.sleep(2.5 * LEASE_MS / 1000)  # well past its lease
                os.kill(pid, signal.SIGCONT)
        elif sc.fault == "server_restart":
            server.restart()
            injected += 1
            heals.append(time.monotonic())
        elif sc.fault == "client_pause":
            server.cli("CLIENT", "PAUSE", str(2 * LEASE_MS), "ALL")
            injected += 1
            time.sleep(2 * LEASE_MS / 1000)
            heals.append(time.monotonic())
        elif sc.fault == "server_stop":
            server.signal(signal.SIGSTOP)
            injected += 1
            time.sleep(2 * LEASE_MS / 1000)
            server.signal(signal.SIGCONT)
            heals.append(time.monotonic())
        elif sc.fault == "clock_jump":
            jump = 30 if k % 2 == 0 else -30
            with open(faketime_file, "w") as f:
                f.write("%+ds\n" % jump)
            # The worker's clock must really have moved, or the scenario proves nothing.
            faked = subprocess.run(["date", "+%s"], env=faketime_env(faketime_file), capture_output=True,
                                   text=True, timeout=10).stdout.strip()
            if not faked or abs(int(faked) - time.time() - jump) > 5:
                raise RuntimeError("libfaketime did not move the wall clock by %+d s (date said %r)"
                                   % (jump, faked))
            injected += 1
            heals.append(time.monotonic())
        elif sc.fault.startswith("proxy_"):
            proxy.mode = sc.fault[len("proxy_"):]
            injected += 1
            time.sleep(1.5)
            proxy.mode = "pass"
            heals.append(time.monotonic())
        elif sc.fault == "restart":
            server.restart()
            injected += 1
            heals.append(time.monotonic())
        rest = gap - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
    codes = [w.finish(seconds + 30) for w in workers]
    elapsed = time.monotonic() - start
    if proxy:
        proxy.close()
    server.stop()
    store.close()

    # ----- what a user checks
    events = sorted((t, w) for wk in workers for t, w in wk.events)
    acks = [int(w[1]) for _, w in events if w[0] == "ACK"]
    acq_tokens = [int(w[1]) for _, w in events if w[0] == "ACQ"]
    unreported = sum(1 for _, w in events if w[0] == "UNREPORTED")
    # Losses the library reported: the callback, or is_valid found 0 before the write.
    reported = len({w[1] for _, w in events if w[0] in ("LOST_CB", "INVALID")})
    # Recovered: some worker acquires the lock again after the heal (a holder paused past its
    # lease: after the pause began).
    acq_times = [t for t, w in events if w[0] == "ACQ"]
    recoveries = []
    for h in heals:
        after = [t - h for t in acq_times if t >= h]
        recoveries.append(after[0] if after else float("inf"))
    rising = all(a < b for a, b in zip(store.accepted, store.accepted[1:]))
    r = {
        "scenario": sc.name, "faults": injected, "acquisitions": len(acq_tokens), "acked": len(acks),
        "final": store.counter, "lost_updates": len(acks) - store.counter,
        "stale_rejected": store.stale_rejected, "stale_accepted": store.stale_accepted,
        "unreported": unreported, "reported": reported, "recovery_max_s": max(recoveries) if recoveries else 0.0,
        "bound_s": sc.bound_s, "elapsed_s": elapsed,
    }
    problems = []
    if any(c != 0 for c in codes):
        problems.append("workers exited %s" % codes)
    if injected == 0:
        problems.append("no fault was injected")
    if sc.expect_lost_updates:
        if r["lost_updates"] <= 0 and r["stale_accepted"] <= 0:
            problems.append("the control run showed no lost update: the suite could not fail")
    else:
        if r["lost_updates"] != 0:
            problems.append("%d lost updates" % r["lost_updates"])
        if r["stale_accepted"] != 0:
            problems.append("%d stale writes accepted" % r["stale_accepted"])
        if len(set(acq_tokens)) != len(acq_tokens):
            problems.append("a fencing token was issued twice")
        if not rising:
            problems.append("accepted tokens did not rise strictly")
        if unreported:
            problems.append("%d losses the store proved were never reported" % unreported)
        if r["recovery_max_s"] > sc.bound_s:
            problems.append("recovery took %.2f s, bound %.1f s" % (r["recovery_max_s"], sc.bound_s))
        if len(acks) == 0:
            problems.append("no increment was acknowledged at all")
    r["problems"] = problems
    return r


SCENARIOS = [
    # name, backend, fault, recovery bound in s. Expected: within lease + C + T = 2 s (a holder
    # paused, or every holder lost, must first be timed out); the bound adds generous slack.
    Scenario("redis: holder SIGSTOPped past its lease", "redis", "holder_stop", 4.0),
    Scenario("redis: server killed, restarted empty", "redis", "server_restart", 4.0),
    Scenario("redis: CLIENT PAUSE 2 leases", "redis", "client_pause", 4.0),
    Scenario("redis: server SIGSTOPped 2 leases", "redis", "server_stop", 4.0),
    Scenario("redis: a worker's wall clock jumps +-30 s", "redis", "clock_jump", 4.0),
    Scenario("redis: server answers garbage 1.5 s", "redis", "proxy_garbage", 4.0),
    Scenario("redis: server trickles bytes 1.5 s", "redis", "proxy_trickle", 4.0),
    Scenario("redis: server falls silent 1.5 s", "redis", "proxy_silent", 4.0),
    Scenario("dynamodb: holder SIGSTOPped past its lease", "dynamodb", "holder_stop", 6.0),
    Scenario("dynamodb: dynalite SIGSTOPped 2 leases", "dynamodb", "server_stop", 6.0),
    Scenario("dynamodb: dynalite killed, restarted on its data", "dynamodb", "restart", 6.0),
    Scenario("control: fencing off, holder paused between read and write", "redis", "holder_stop", 99.0,
             fenced=False, expect_lost_updates=True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--full", action="store_true", help="longer runs, more faults each")
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    scenarios = [s for s in SCENARIOS if not args.only or any(o in s.name for o in args.only)]
    if not os.path.exists(FAKETIME_LIB):
        print("faults: %s missing (apt-get install libfaketime)" % FAKETIME_LIB)
        return 1
    results = []
    for sc in scenarios:
        work = tempfile.mkdtemp(prefix="dlock-faults-")
        try:
            r = run_scenario(sc, args, work)
        except Exception as e:  # a harness failure fails the scenario, loudly
            r = {"scenario": sc.name, "problems": ["harness: %r" % e]}
        if r.get("problems"):
            print("FAIL %s: %s (logs in %s)" % (sc.name, "; ".join(r["problems"]), work), flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
            print("ok   %s (%.1f s)" % (sc.name, r["elapsed_s"]), flush=True)
        results.append(r)

    print()
    print("| scenario | faults | acquisitions | acked increments | final counter | lost updates | "
          "stale writes rejected | stale accepted | losses reported | unreported losses | recovery, worst (bound) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "acked" not in r:
            print("| %s | harness failed | | | | | | | | | |" % r["scenario"])
            continue
        bound = "—" if r["bound_s"] >= 99 else "%.1f s" % r["bound_s"]
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %.2f s (%s) |" % (
            r["scenario"], r["faults"], r["acquisitions"], r["acked"], r["final"], r["lost_updates"],
            r["stale_rejected"], r["stale_accepted"], r["reported"], r["unreported"], r["recovery_max_s"],
            bound))
    failed = sum(1 for r in results if r.get("problems"))
    print("faults: %d passed, %d failed" % (len(results) - failed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
