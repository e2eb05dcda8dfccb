#!/usr/bin/env python3
"""The fault-injection suite: worker processes increment a counter in a fenced store under one
lock while faults are injected into the lock server, the network and the workers.

    tests/faults/run.py --worker build/tests/faults/fault_worker [--full] [--only NAME...]

Each scenario starts its own servers on free loopback ports (always stopped by pid), runs 3 (or 4)
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

Two scenarios fail a master over, each fault a SIGKILL of the master, a wait until a replica is
promoted, the killed node started again at once on its port, and a wait until all is settled
(so that the next fault finds a replica in sync to promote):
  - cluster: a real Redis Cluster (3 masters, 3 replicas, cluster-node-timeout 1000 ms), the
    workers on redis-cluster://; the master killed is the one serving the lock's slot, and it
    rejoins on its nodes.conf, empty, as the new master's replica (within ~0.1 s);
  - sentinel: a master, two replicas and three sentinels (quorum 2, down-after 1500 ms), the
    workers on redis-sentinel://; the old master comes back empty and a master, as a crashed
    master restarted on its own configuration would, until the sentinels demote it (~10 s).
Their recovery counts from the promotion being observed (every node, or every sentinel, names
the new master): the outage before it is the servers' failure detection.

etcd runs 3 members (heartbeat 50 ms, election timeout 500 ms, as tests/support/etcd_cluster.cc),
the workers on etcd://. Its faults: the leader SIGKILLed, a wait until the other two name a new
leader (recovery counts from there), the killed member started again at once on its data dir
(it rejoins as a follower); a holder paused past its lease; the leader SIGSTOPped for 2 leases
(the others elect a new leader meanwhile; healed at the SIGCONT, when it steps down).

PostgreSQL runs a primary and a hot standby (pg_basebackup -R), the workers on both hosts with
target_session_attrs=read-write. Its faults: a holder paused past its lease; the primary
SIGSTOPped (every process of it) for 2 leases; the primary killed and restarted on its data;
the primary SIGKILLed, the standby promoted (pg_ctl promote; recovery counts from there), and
the killed node copied again from it as the new standby.

The last line reads `faults: N passed, N failed`; a Markdown table of figures precedes it. A
failed scenario's directory is kept: the servers' logs, each worker's events (workerN.events,
s from the workers' start) and, for the failovers, faults.timeline.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

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


def free_ports(n):
    """n distinct free loopback ports (each held open until all are chosen)."""
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


# ----- a minimal Redis client, for the harness's own questions -----------------------------
# The cluster and sentinel scenarios poll many nodes every 50 ms while the workers run: one
# redis-cli process per question would load the 2 shared cores the timings depend on.


class ReplyError(str):
    """An error reply, or why there was no reply: returned, not raised, so that a poll loop
    treats an unreachable node like one that answers the wrong thing."""


def redis_calls(port, commands, timeout=1.0):
    """Sends commands to 127.0.0.1:port on one fresh connection; their replies (str, int, None,
    list, ReplyError). Raises OSError when the server cannot be reached or does not answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        out = b""
        for args in commands:
            words = [str(a).encode() for a in args]
            out += b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
        sock.sendall(out)
        reader = sock.makefile("rb")
        return [read_reply(reader) for _ in commands]


def read_reply(reader):
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("connection closed before a whole reply")
    kind, rest = line[:1], line[1:-2].decode(errors="replace")
    if kind == b"+":
        return rest
    if kind == b"-":
        return ReplyError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        if int(rest) < 0:
            return None
        data = reader.read(int(rest) + 2)
        if len(data) != int(rest) + 2:
            raise OSError("connection closed before a whole reply")
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        return None if int(rest) < 0 else [read_reply(reader) for _ in range(int(rest))]
    raise OSError("not RESP: %r" % line[:80])


def ask(port, *args, timeout=1.0):
    """One command's reply; a ReplyError when the server could not be reached."""
    try:
        return redis_calls(port, [args], timeout)[0]
    except OSError as e:
        return ReplyError("no answer from port %d: %s" % (port, e))


def info_fields(text):
    """INFO's "name:value" lines as a dict ({} for an error reply)."""
    if not isinstance(text, str) or isinstance(text, ReplyError):
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def pairs(flat):
    """A flat [key, value, key, value...] reply (SENTINEL MASTER and the like) as a dict."""
    return dict(zip(flat[::2], flat[1::2])) if isinstance(flat, list) else {}


def poll(what, check, limit):
    """Calls check() every 50 ms until it returns "" (all is well); then the monotonic time it
    did. Raises RuntimeError with its last answer (what is still wrong) after limit seconds."""
    until = time.monotonic() + limit
    while True:
        problem = check()
        if not problem:
            return time.monotonic()
        if time.monotonic() > until:
            raise RuntimeError("%s not within %.0f s: %s" % (what, limit, problem))
        time.sleep(0.05)


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
        self.refusals = []  # (monotonic time, READ or WRITE, token refused, highest token seen)
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
                self.refusals.append((time.monotonic(), words[0], token, self.max_token))
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

    def __init__(self, argv_for_port, log, port=None):
        self.port = port or free_port()
        super().__init__(argv_for_port(self.port), log)
        if not wait_port(self.port):
            raise RuntimeError("%s did not start (see %s)" % (self.argv[0], log))

    def restart(self):
        self.kill()
        self.start()
        wait_port(self.port)


class Redis(Server):
    """redis-server with no persistence (a restart comes back empty), its files in directory."""

    def __init__(self, directory, extra_args=(), port=None):
        os.makedirs(directory, exist_ok=True)
        super().__init__(lambda port: ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", directory, *extra_args],
                         os.path.join(directory, "redis.log"), port)

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True, timeout=10).stdout.strip()

    def call(self, *args, timeout=1.0):
        return ask(self.port, *args, timeout=timeout)

    def start_again(self):
        """Starts the killed server again on its port, with the same arguments."""
        self.start()
        if not wait_port(self.port):
            raise RuntimeError("redis-server on port %d did not start again (see %s)" % (self.port, self.log))


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
        self.thread = threading.Thread(target=accept_loop, args=(self, self.connect), daemon=True)
        self.thread.start()

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
        self.thread.join()  # as Store.close: closing the socket under accept() raised EBADF there
        for c in self.conns:
            c.close()
        self.sock.close()


# ----- Redis Cluster and Sentinel: a master SIGKILLed, its replica promoted ----------------------

LOCK_KEY = "dlock:{faults}"  # fault_worker's lock is "faults"; its owner key with the default prefix
# As tests/support/redis_cluster.cc: a killed master's replica is promoted within ~2-3 s.
CLUSTER_NODE_TIMEOUT_MS = 1000
SENTINEL_MASTER_NAME = "faults-master"
# As tests/support/redis_sentinel.h: down-after-milliseconds must stay well above 1000 (Sentinel
# reconnects at most once a second; 1000 once flagged a freshly switched master down at once).
SENTINEL_DOWN_AFTER_MS = 1500
SENTINEL_FAILOVER_TIMEOUT_MS = 3000
# A replica that never finished its first sync is not promoted: sync at once (by default a
# master waits 5 s for more replicas before streaming).
SYNC_AT_ONCE = ("--repl-diskless-sync-delay", "0")


def is_master(role_reply):
    return isinstance(role_reply, list) and bool(role_reply) and role_reply[0] == "master"


def scripts_run(node):
    """How many EVALSHA and EVAL calls node ran without an error (INFO commandstats)."""
    stats = info_fields(node.call("INFO", "commandstats"))
    total = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        fields = dict(kv.split("=", 1) for kv in stats.get(name, "").split(",") if "=" in kv)
        total += int(fields.get("calls", 0)) - int(fields.get("failed_calls", 0))
    return total


class Sentinel(Server):
    """redis-server --sentinel on its config file (which it rewrites: its state)."""

    def __init__(self, conf, port, log):
        super().__init__(lambda _: ["redis-server", conf, "--sentinel"], log, port)

    def call(self, *args):
        return ask(self.port, *args)


class Deployment:
    """Several servers, all stopped by pid by stop(), also when starting them failed half-way.
    Subclasses define start(work), url(params), master() (the data node serving the lock as
    master, and "", else None and why) and unsettled() ("" once the next fault would find a
    replica in sync to promote, else what is still wrong); serving(node) says whether the node
    named master serves as one (Redis: ROLE), and each node has kill() and start_again()."""

    def __init__(self, work):
        self.servers = []
        self.failover_s = []  # from each kill to its promotion being observed
        self.settle_s = []  # from each restart of the killed node to all settled
        self.timeline = []  # (monotonic time, what happened), for the record
        try:
            self.start(work)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for server in self.servers:
            server.stop()

    def note(self):
        if not self.failover_s:
            return ""
        return "kill to promotion %.1f-%.1f s, restart to settled %.1f-%.1f s" % (
            min(self.failover_s), max(self.failover_s), min(self.settle_s), max(self.settle_s))

    def watch_restarted(self, node):
        """Called at each poll between the killed node's restart and all settled."""

    def fail_over(self):
        """SIGKILLs the master, waits until another node is named master and answers ROLE
        master, starts the killed node again at once (same port and arguments) and waits until
        all is settled. Returns the time the promotion was observed: recovery counts from
        there, as the outage before it is the servers' failure detection (node timeout,
        down-after), which no client can shorten."""
        old, problem = self.master()
        if problem:
            raise RuntimeError(problem)

        def promoted():
            master, problem = self.master()
            if problem or master is old:
                return problem or "the killed node is still named the master"
            return self.serving(master)

        def settled():
            self.watch_restarted(old)
            return self.unsettled()

        killed = time.monotonic()
        old.kill()
        at = poll("a replica promoted", promoted, 30)
        restarted = time.monotonic()  # when the process is spawned: it may serve before wait_port sees it
        old.start_again()
        done = poll("settled after the restart", settled, 40)
        self.failover_s.append(at - killed)
        self.settle_s.append(done - restarted)
        self.timeline += [(killed, "killed port %d" % old.port), (at, "promotion seen"),
                          (restarted, "port %d being started again" % old.port), (done, "settled")]
        return at

    def serving(self, node):
        """"" when node, named the master, answers as one; else what it answers."""
        return "" if is_master(node.call("ROLE")) else "port %d is not a master yet" % node.port


class RedisClusterDeployment(Deployment):
    """3 masters and 3 replicas (redis-cli --cluster create --cluster-replicas 1), each node in
    its own directory: a node started again reads its nodes.conf there and rejoins, empty, as a
    replica of the master that replaced it."""

    def start(self, work):
        ports = free_ports(12)
        for i in range(6):
            # The bus port is given, not port + 10000: free ports are often above 55535.
            self.servers.append(Redis(os.path.join(work, "node%d" % i), (
                "--cluster-enabled", "yes", "--cluster-port", str(ports[6 + i]),
                "--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS), *SYNC_AT_ONCE), port=ports[i]))
        with open(os.path.join(work, "cluster-create.log"), "wb") as log:
            subprocess.run(["redis-cli", "--cluster", "create", *["127.0.0.1:%d" % n.port for n in self.servers],
                            "--cluster-replicas", "1", "--cluster-yes"], stdout=log, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=60, check=True)
        self.slot = self.servers[0].call("CLUSTER", "KEYSLOT", LOCK_KEY)
        if not isinstance(self.slot, int):
            raise RuntimeError("CLUSTER KEYSLOT answered %r" % self.slot)
        poll("the new cluster ready", self.unsettled, 30)

    def url(self, params):
        return "redis-cluster://%s?%s" % (",".join("127.0.0.1:%d" % n.port for n in self.servers), params)

    def slot_master(self):
        """The port of the master serving the lock's slot as every running node's CLUSTER SLOTS
        says, and ""; else None and what disagrees."""
        seen = {}
        for node in self.servers:
            if node.proc.poll() is not None:
                continue
            ranges = node.call("CLUSTER", "SLOTS")
            if not isinstance(ranges, list):
                return None, "node on port %d: CLUSTER SLOTS answered %r" % (node.port, ranges)
            seen[node.port] = next((r[2][1] for r in ranges if r[0] <= self.slot <= r[1]), None)
        if len(set(seen.values())) != 1 or None in seen.values():
            return None, "the nodes disagree on slot %d's master: %s" % (self.slot, seen)
        return seen.popitem()[1], ""

    def unsettled(self):
        """"" once every node says cluster_state:ok, every replica is in sync with its master and
        all name one master for the lock's slot, which answers ROLE master and has a replica in
        sync (one to promote at the next fault); else what is still wrong."""
        for node in self.servers:
            state = info_fields(node.call("CLUSTER", "INFO")).get("cluster_state")
            if state != "ok":
                return "node on port %d: cluster_state %s" % (node.port, state)
            replication = info_fields(node.call("INFO", "replication"))
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return "replica on port %d not in sync with its master yet" % node.port
            # A node flagged failing (fail, or pfail: "fail?") until every node saw it back.
            lines = str(node.call("CLUSTER", "NODES")).splitlines()
            failing = [line for line in lines if len(line.split()) > 2 and "fail" in line.split()[2]]
            if failing:
                return "node on port %d still flags %s" % (node.port, failing)
        master, problem = self.slot_master()
        if problem:
            return problem
        role = ask(master, "ROLE")
        if not is_master(role) or not role[2]:
            return "slot %d's master (port %d) answers ROLE %r" % (self.slot, master, role)
        return ""

    def master(self):
        port, problem = self.slot_master()
        return next((n for n in self.servers if n.port == port), None), problem


class SentinelDeployment(Deployment):
    """One master and two replicas (no persistence) watched by three sentinels, quorum 2
    (`redis-server sentinel.conf --sentinel`: Debian ships no redis-sentinel binary). Each
    sentinel's config names its peers, so none waits for hello messages (every 2 s) to find
    them."""

    def start(self, work):
        self.old_master_scripts = []
        self.data = [Redis(os.path.join(work, "data%d" % i), SYNC_AT_ONCE) for i in range(3)]
        self.servers += self.data
        # REPLICAOF at run time, not --replicaof: a node started again comes back a master, as a
        # crashed master started again on its own configuration would.
        for replica in self.data[1:]:
            answer = replica.call("REPLICAOF", "127.0.0.1", self.data[0].port)
            if answer != "OK":
                raise RuntimeError("REPLICAOF answered %r" % answer)
        ports = free_ports(3)
        ids = ["%040x" % random.getrandbits(160) for _ in ports]
        self.sentinels = []
        for s, port in enumerate(ports):
            directory = os.path.join(work, "sentinel%d" % s)
            os.makedirs(directory)
            conf = os.path.join(directory, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(self.sentinel_config(port, directory, ids[s],
                                             [(p, i) for p, i in zip(ports, ids) if p != port]))
            sentinel = Sentinel(conf, port, os.path.join(directory, "sentinel.log"))
            self.sentinels.append(sentinel)
            self.servers.append(sentinel)
        poll("the sentinels ready", self.unsettled, 30)

    def sentinel_config(self, port, directory, my_id, peers):
        name = SENTINEL_MASTER_NAME
        lines = ["port %d" % port, "bind 127.0.0.1", "protected-mode no", "daemonize no", "dir %s" % directory,
                 "sentinel announce-ip 127.0.0.1",
                 "sentinel monitor %s 127.0.0.1 %d 2" % (name, self.data[0].port),
                 "sentinel down-after-milliseconds %s %d" % (name, SENTINEL_DOWN_AFTER_MS),
                 "sentinel failover-timeout %s %d" % (name, SENTINEL_FAILOVER_TIMEOUT_MS),
                 "sentinel parallel-syncs %s 1" % name, "sentinel myid %s" % my_id]
        lines += ["sentinel known-sentinel %s 127.0.0.1 %d %s" % (name, p, i) for p, i in peers]
        return "\n".join(lines) + "\n"

    def url(self, params):
        return "redis-sentinel://%s/%s?%s" % (",".join("127.0.0.1:%d" % s.port for s in self.sentinels),
                                             SENTINEL_MASTER_NAME, params)

    def master(self):
        """The data node every sentinel names as the master, and ""; else None and why."""
        named = {}
        for sentinel in self.sentinels:
            answer = sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER_NAME)
            named[sentinel.port] = int(answer[1]) if isinstance(answer, list) and len(answer) == 2 else answer
        node = next((d for d in self.data if d.port in named.values()), None)
        if len(set(named.values())) != 1 or node is None:
            return None, "the sentinels name %s" % named
        return node, ""

    def sentinel_problem(self, sentinel, master):
        """What sentinel still sees wrong, with master as the master: a failover in progress, a
        replica down or missing, a peer down; "" when nothing."""
        m = pairs(sentinel.call("SENTINEL", "MASTER", SENTINEL_MASTER_NAME))
        if m.get("port") != str(master.port) or m.get("flags") != "master":
            return "sentinel %d: master port %s, flags %s" % (sentinel.port, m.get("port"), m.get("flags"))
        answer = sentinel.call("SENTINEL", "REPLICAS", SENTINEL_MASTER_NAME)
        replicas = {r.get("port"): r.get("flags") for r in map(pairs, answer if isinstance(answer, list) else [])}
        for d in self.data:
            if d is not master and replicas.get(str(d.port)) != "slave":
                return "sentinel %d: replica %d has flags %s" % (sentinel.port, d.port, replicas.get(str(d.port)))
        answer = sentinel.call("SENTINEL", "SENTINELS", SENTINEL_MASTER_NAME)
        peers = {p.get("port"): p.get("flags", "") for p in map(pairs, answer if isinstance(answer, list) else [])}
        for other in self.sentinels:
            flags = peers.get(str(other.port), "unknown") if other is not sentinel else ""
            if "unknown" in flags or "s_down" in flags or "disconnected" in flags:
                return "sentinel %d: peer %d is %s" % (sentinel.port, other.port, flags)
        return ""

    def unsettled(self):
        """"" once every sentinel names one master, with no failover in progress and every other
        data node an up replica, and those replicas have acknowledged a write on it; else what
        is still wrong."""
        master, problem = self.master()
        if problem:
            return problem
        if not is_master(master.call("ROLE")):
            return "the named master (port %d) is not a master" % master.port
        for sentinel in self.sentinels:
            problem = self.sentinel_problem(sentinel, master)
            if problem:
                return problem
        for d in self.data:
            replication = info_fields(d.call("INFO", "replication"))
            if d is not master and (replication.get("master_port") != str(master.port)
                                    or replication.get("master_link_status") != "up"):
                return "data node %d is not a replica of %d in sync yet" % (d.port, master.port)
        # master_link_status:up is not enough: after a diskless sync a master streams writes to
        # a replica only once it acknowledged the RDB. A write both replicas acknowledge is.
        try:
            acked = redis_calls(master.port, [("PUBLISH", "faults:probe", "1"), ("WAIT", 2, 500)], 2.0)[1]
        except OSError as e:
            return "the master (port %d): %s" % (master.port, e)
        return "" if acked == 2 else "%r of 2 replicas acknowledged a write" % acked

    def fail_over(self):
        # The killed master comes back at once as a plain master, empty (no persistence): the
        # harshest case, as a supervisor restarting a crashed master on its own configuration.
        # The sentinels convert it into the new master's replica about 10 s later
        # (+convert-to-slave), and no client may be granted a lock on it meanwhile.
        self.old_master_scripts.append(0)
        return super().fail_over()

    def watch_restarted(self, node):
        # Evidence, should a loss show: lock scripts the restarted old master ran while it was
        # still a master (sampled at every poll until the sentinels demote it).
        if is_master(node.call("ROLE")):
            self.old_master_scripts[-1] = scripts_run(node)

    def note(self):
        base = super().note()
        return base and base + "; lock scripts the restarted old master ran before its demotion: %s" % (
            self.old_master_scripts)


# ----- etcd: a 3-member Raft cluster, its leader SIGKILLed or SIGSTOPped ----------------------

# As tests/support/etcd_cluster.cc: a new leader 0.35 to 1.5 s after the leader dies (mostly 0.5
# to 0.7 s). With these timings etcd's minimum lease TTL is 1 s, so a lock of LEASE_MS = 1000 hangs
# on an etcd lease of TTL 2 s (src/etcd/lock_protocol.h: ceil(lease) + 1 s).
ETCD_HEARTBEAT_MS = 50
ETCD_ELECTION_TIMEOUT_MS = 500
# The library asks its watches for progress notifications; the tests' interval (default 10 min).
ETCD_PROGRESS_NOTIFY = "2s"
# A member's JSON gateway holds requests until it is ready (up to ~2.5 s after its start).
ETCD_STATUS_TIMEOUT_S = 1.0
# No proxy from the environment for the harness's own loopback requests.
NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def etcd_status(port):
    """POST /v3/maintenance/status to the member on 127.0.0.1:port: (its member id, the leader
    it names), ints, and ""; else None and why."""
    request = urllib.request.Request("http://127.0.0.1:%d/v3/maintenance/status" % port, data=b"{}",
                                     headers={"Content-Type": "application/json"})
    try:
        with NO_PROXY_OPENER.open(request, timeout=ETCD_STATUS_TIMEOUT_S) as answer:
            body = json.loads(answer.read())
        # The gateway prints 64-bit integers as strings, and leaves out the ones that are 0.
        return (int(body["header"]["member_id"]), int(body.get("leader", 0))), ""
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
        return None, "port %d: %s" % (port, e)


class EtcdMember(Process):
    """One etcd member, its data dir and log in directory. start_again() starts it on the same
    data dir and ports as a member of the existing cluster, as a crashed member restarted."""

    def __init__(self, name, directory, client_port, peer_port, initial_cluster, token):
        os.makedirs(directory, exist_ok=True)
        self.name, self.port, self.peer_port = name, client_port, peer_port
        self.initial_cluster, self.token = initial_cluster, token
        self.data_dir = os.path.join(directory, "data")
        self.stopped = False  # SIGSTOPped: not asked anything until SIGCONTed
        super().__init__(self.argv_for("new"), os.path.join(directory, "etcd.log"))

    def argv_for(self, state):
        client, peer = "http://127.0.0.1:%d" % self.port, "http://127.0.0.1:%d" % self.peer_port
        return ["etcd", "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", self.initial_cluster, "--initial-cluster-state", state,
                "--initial-cluster-token", self.token,
                "--heartbeat-interval", str(ETCD_HEARTBEAT_MS), "--election-timeout", str(ETCD_ELECTION_TIMEOUT_MS),
                "--experimental-watch-progress-notify-interval", ETCD_PROGRESS_NOTIFY,
                "--logger", "zap", "--log-outputs", "stderr"]

    def start_again(self):
        self.argv = self.argv_for("existing")
        self.start()

    def running(self):
        return self.proc is not None and self.proc.poll() is None and not self.stopped


class EtcdDeployment(Deployment):
    """3 etcd members on free loopback ports, the workers on etcd://. A failover SIGKILLs the
    leader, waits until the other two name a new one, and starts the killed member again on its
    data dir (it rejoins as a follower); stop_leader() SIGSTOPs the leader for a while."""

    def start(self, work):
        ports = free_ports(6)
        peers = ",".join("n%d=http://127.0.0.1:%d" % (i, ports[3 + i]) for i in range(3))
        token = "faults-%x" % random.getrandbits(48)  # a new cluster id: never one mistaken for another
        for i in range(3):
            self.servers.append(EtcdMember("n%d" % i, os.path.join(work, "etcd%d" % i), ports[i], ports[3 + i],
                                           peers, token))
        try:
            poll("the new etcd cluster ready", self.unsettled, 30)
        except RuntimeError as e:
            exited = ["%s %s" % (m.name, m.log) for m in self.servers if m.proc.poll() is not None]
            raise RuntimeError("%s%s" % (e, "; exited: %s" % exited if exited else ""))

    def url(self, params):
        return "etcd://%s?%s" % (",".join("127.0.0.1:%d" % m.port for m in self.servers), params)

    def master(self):
        """The leader every running member (not killed, not stopped) names, and ""; else None and
        what disagrees."""
        statuses = {}
        for m in self.servers:
            if not m.running():
                continue
            status, problem = etcd_status(m.port)
            if problem:
                return None, problem
            statuses[m] = status
        by_id = {member_id: m for m, (member_id, _) in statuses.items()}
        named = {m.port: leader for m, (_, leader) in statuses.items()}
        leaders = set(named.values())
        if len(leaders) != 1 or next(iter(leaders)) not in by_id:
            return None, "the members (by client port) name leaders %s; their ids %s" % (
                named, {m.port: member_id for m, (member_id, _) in statuses.items()})
        return by_id[leaders.pop()], ""

    def serving(self, node):
        return ""  # a member every other names the leader, and that answers, is one

    def unsettled(self):
        """"" once all 3 members run, answer, and name one leader; else what is still wrong."""
        down = [m.port for m in self.servers if not m.running()]
        if down:
            return "members not running: %s" % down
        return self.master()[1]

    def stop_leader(self, seconds):
        """SIGSTOPs the leader for seconds, then SIGCONTs it; returns when (the heal). Records
        when the other two were seen to name a new leader, and waits (after the heal) until all 3
        name one leader again, so that the next fault finds one."""
        poll("a leader before the stop", self.unsettled, 30)
        old, problem = self.master()
        if problem:
            raise RuntimeError(problem)
        stopped = time.monotonic()
        old.signal(signal.SIGSTOP)
        old.stopped = True
        elected = None
        while time.monotonic() < stopped + seconds:
            if elected is None:
                leader, problem = self.master()
                if not problem and leader is not old:
                    elected = time.monotonic()
            time.sleep(0.05)
        old.signal(signal.SIGCONT)
        old.stopped = False
        healed = time.monotonic()
        done = poll("settled after the SIGCONT", self.unsettled, 40)
        if elected is not None:
            self.failover_s.append(elected - stopped)
        self.settle_s.append(done - healed)
        self.timeline += [(stopped, "SIGSTOPped the leader (port %d)" % old.port)]
        self.timeline += [(elected, "new leader seen")] if elected is not None else []
        self.timeline += [(healed, "SIGCONTed port %d" % old.port), (done, "settled")]
        return healed

    def note(self):
        if not self.settle_s:
            return ""
        words = ("kill", "restart") if any("killed" in what for _, what in self.timeline) else ("stop", "SIGCONT")
        elected = ("%.1f-%.1f s" % (min(self.failover_s), max(self.failover_s))) if self.failover_s else "never"
        missed = len(self.settle_s) - len(self.failover_s)
        return "%s to new leader seen %s%s, %s to settled %.1f-%.1f s" % (
            words[0], elected, " (%d times not within the stop)" % missed if missed and self.failover_s else "",
            words[1], min(self.settle_s), max(self.settle_s))


def pg_bin():
    """PostgreSQL's bin dir: the newest /usr/lib/postgresql/<major>/bin, or None."""
    majors = sorted((int(d) for d in os.listdir("/usr/lib/postgresql") if d.isdigit()), reverse=True) \
        if os.path.isdir("/usr/lib/postgresql") else []
    for major in majors:
        path = "/usr/lib/postgresql/%d/bin" % major
        if os.path.exists(os.path.join(path, "postgres")):
            return path
    return None


def as_postgres(argv):
    """argv run as the `postgres` user when we are root (PostgreSQL refuses to run as root;
    setpriv execs, so the pid is the program's own)."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] + argv


class PostgresNode(Process):
    """One PostgreSQL server on a free loopback port, its data and log in directory: a primary
    (initdb) or a hot standby streaming from one (pg_basebackup -R). signal() reaches the
    postmaster and every backend it forked (each client's connection is a process of its own)."""

    def __init__(self, directory, port, primary_port=None):
        self.directory, self.port, self.bin = directory, port, pg_bin()
        self.data = os.path.join(directory, "data")
        self.prepare(primary_port)
        super().__init__(as_postgres([os.path.join(self.bin, "postgres"), "-D", self.data, "-p", str(port),
                                      "-k", directory, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                      "-c", "wal_keep_size=256MB", "-c", "log_min_messages=warning"]),
                         os.path.join(directory, "server.log"))
        poll("postgres on port %d ready" % port, self.unready, 30)

    def prepare(self, primary_port):
        shutil.rmtree(self.directory, ignore_errors=True)
        os.makedirs(self.directory)
        if os.geteuid() == 0:  # the server's user reaches its folder through the work dir
            os.chmod(os.path.dirname(self.directory), 0o711)
            shutil.chown(self.directory, "postgres", "postgres")
        if primary_port is None:
            argv = [os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "dlock", "--auth=trust",
                    "--encoding=UTF8", "--locale=C", "--no-sync"]
        else:
            argv = [os.path.join(self.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary_port),
                    "-U", "dlock", "-D", self.data, "-R", "-X", "stream", "--no-sync", "--checkpoint=fast"]
        r = subprocess.run(as_postgres(argv), capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (os.path.basename(argv[0]), (r.stderr or r.stdout).strip()[-500:]))

    def sql(self, query, database="postgres"):
        """psql's answer (unaligned, no headers), or None when it failed."""
        r = subprocess.run(as_postgres([os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t", "-h", "127.0.0.1",
                                        "-p", str(self.port), "-U", "dlock", "-d", database, "-c", query]),
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None

    def unready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("postgres on port %d exited (see %s)" % (self.port, self.log))
        return "" if self.sql("SELECT 1") == "1" else "not answering yet"

    def signal(self, sig):
        if not self.proc or self.proc.poll() is not None:
            return
        pids = [self.proc.pid]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/stat" % entry) as f:
                        stat = f.read()
                    if int(stat[stat.rfind(")") + 2:].split()[1]) == self.proc.pid:
                        pids.append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def kill(self):
        self.signal(signal.SIGCONT)
        super().kill()

    def standby(self):
        return self.sql("SELECT pg_is_in_recovery()") == "t"


class PostgresDeployment(Deployment):
    """A primary and a hot standby streaming from it, the workers on the two-host URL with
    target_session_attrs=read-write (libpq skips the standby). A failover SIGKILLs the primary,
    promotes the standby (pg_ctl promote), and makes the killed node a new standby of it (its
    data copied again, on the same port), so that the next fault fails over the other way.
    Replication is asynchronous: a promotion may lose the last commits, which the tokens' clock
    floor covers (docs/postgres.md)."""

    def start(self, work):
        self.work = work
        ports = free_ports(2)
        self.servers.append(PostgresNode(os.path.join(work, "pg0"), ports[0]))
        if self.servers[0].sql("CREATE DATABASE dlock") is None:
            raise RuntimeError("CREATE DATABASE failed")
        self.servers.append(PostgresNode(os.path.join(work, "pg1"), ports[1], primary_port=ports[0]))
        poll("the standby streaming", self.unsettled, 30)

    def url(self, params):
        return "postgres://dlock@%s/dlock?target_session_attrs=read-write&%s" % (
            ",".join("127.0.0.1:%d" % n.port for n in self.servers), params)

    def master(self):
        primaries = [n for n in self.servers if n.proc.poll() is None and n.sql("SELECT pg_is_in_recovery()") == "f"]
        if len(primaries) != 1:
            return None, "%d primaries answer" % len(primaries)
        return primaries[0], ""

    def unsettled(self):
        primary, problem = self.master()
        if problem:
            return problem
        streaming = primary.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        return "" if streaming == "1" else "the standby is not streaming yet (%s)" % streaming

    def signal(self, sig):
        """SIGSTOP to the primary (every process of it), SIGCONT to the one stopped."""
        if sig == signal.SIGSTOP:
            self.stopped = self.master()[0]
        self.stopped.signal(sig)

    def restart(self):
        """The primary SIGKILLed and started again at once on its data (crash recovery)."""
        primary, problem = self.master()
        if problem:
            raise RuntimeError(problem)
        primary.kill()
        until = time.monotonic() + 20
        while True:  # its killed backends hold its shared memory for a moment
            primary.start()
            try:
                poll("postgres back", primary.unready, 10)
                return
            except RuntimeError:
                if time.monotonic() > until:
                    raise
                time.sleep(0.2)

    def fail_over(self):
        old, problem = self.master()
        if problem:
            raise RuntimeError(problem)
        new = next(n for n in self.servers if n is not old)
        killed = time.monotonic()
        old.kill()
        subprocess.run(as_postgres([os.path.join(new.bin, "pg_ctl"), "promote", "-D", new.data, "-w", "-t", "30"]),
                       check=True, capture_output=True, timeout=40)
        at = poll("the standby promoted", lambda: "" if new.sql("SELECT pg_is_in_recovery()") == "f" else "not yet", 30)
        restarted = time.monotonic()
        old.prepare(new.port)  # a standby of the new primary, on the old port
        old.start()
        poll("the old primary back as a standby", old.unready, 30)
        done = poll("settled", self.unsettled, 40)
        self.failover_s.append(at - killed)
        self.settle_s.append(done - restarted)
        self.timeline += [(killed, "killed port %d" % old.port), (at, "port %d promoted" % new.port),
                          (restarted, "port %d being made a standby" % old.port), (done, "settled")]
        return at


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
    def __init__(self, binary, url, store, seconds, pause_flag, stop_flag, log, faketime_file=None):
        env = faketime_env(faketime_file) if faketime_file else dict(os.environ)
        self.events = []  # (monotonic time, words)
        self.proc = subprocess.Popen([binary, url, "faults", str(store.port), str(seconds), str(LEASE_MS),
                                      pause_flag, str(HOLD_MS), stop_flag], stdout=subprocess.PIPE, stderr=open(log, "ab"),
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

    def kill(self):
        """Stops a worker still running (the harness failed): by pid, paused or not."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


# ----- scenarios ----------------------------------------------------------------------------


class Scenario:
    # (seconds the workers run, faults injected): the default set, then --full.
    TIMING = ((9, 2), (24, 6))

    def __init__(self, name, backend, fault, bound_s, fenced=True, expect_lost_updates=False, timing=TIMING,
                 workers=3):
        self.name, self.backend, self.fault, self.bound_s = name, backend, fault, bound_s
        self.fenced, self.expect_lost_updates, self.timing = fenced, expect_lost_updates, timing
        self.workers = workers


REDIS_PARAMS = "timeout_ms=500&connect_timeout_ms=500"


def start_servers(sc, args, work):
    """The scenario's servers (one object with stop()), its proxy or None, and the workers' URL."""
    if sc.backend == "redis-cluster":
        server = RedisClusterDeployment(work)
        return server, None, server.url(REDIS_PARAMS)
    if sc.backend == "redis-sentinel":
        server = SentinelDeployment(work)
        return server, None, server.url(REDIS_PARAMS)
    if sc.backend == "etcd":
        server = EtcdDeployment(work)
        return server, None, server.url(REDIS_PARAMS)  # the same timeouts as on Redis
    if sc.backend == "postgres":
        server = PostgresDeployment(work)
        url = server.url(REDIS_PARAMS)
        try:
            subprocess.run([args.worker, "--prepare", url], check=True, timeout=30)
        except BaseException:
            server.stop()
            raise
        return server, None, url
    server = Redis(work) if sc.backend == "redis" else Dynalite(work)
    proxy = Proxy(server.port) if sc.fault.startswith("proxy") else None
    if sc.backend == "redis":
        port = proxy.port if proxy else server.port
        return server, proxy, "redis://127.0.0.1:%d?%s" % (port, REDIS_PARAMS)
    url = ("dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:%d&timeout_ms=500"
           "&connect_timeout_ms=500" % server.port)
    try:
        subprocess.run([args.worker, "--prepare", url], check=True, timeout=30)
    except BaseException:
        server.stop()
        raise
    return server, proxy, url


def run_scenario(sc, args, work):
    seconds, faults = sc.timing[1 if args.full else 0]
    store = Store(fenced=sc.fenced)
    server = proxy = None
    workers = []
    try:  # whatever fails, every process is stopped by pid
        server, proxy, url = start_servers(sc, args, work)
        pause_flag = os.path.join(work, "pause")
        faketime_file = None
        if sc.fault == "clock_jump":
            faketime_file = os.path.join(work, "faketime")
            with open(faketime_file, "w") as f:
                f.write("+0\n")
        stop_flag = os.path.join(work, "stop")
        workers = [Worker(args.worker, url, store, seconds, pause_flag, stop_flag,
                          os.path.join(work, "worker%d.log" % i), faketime_file if i == 0 else None)
                   for i in range(sc.workers)]
        start = time.monotonic()
        heals, injected = inject_faults(sc, work, server, proxy, seconds, faults, pause_flag, faketime_file)
        await_recovery(workers, heals, sc.bound_s)
        open(stop_flag, "w").close()  # the workers end their run (not before `seconds`)
        codes = [w.finish(seconds + 30) for w in workers]
        elapsed = time.monotonic() - start
    finally:
        for w in workers:
            w.kill()
        if proxy:
            proxy.close()
        if server:
            server.stop()
        store.close()
    save_events(workers, start, work)
    if isinstance(server, Deployment):
        with open(os.path.join(work, "faults.timeline"), "w") as f:
            f.writelines("%.3f %s\n" % (t - start, what) for t, what in server.timeline)
    r = judge(sc, store, workers, codes, heals, injected, start)
    r["elapsed_s"] = elapsed
    r["note"] = server.note() if isinstance(server, Deployment) else ""
    return r


def await_recovery(workers, heals, bound_s):
    """Waits until a worker acquired the lock after the last heal (so after every heal), or the
    scenario's recovery bound (and a second) passed: the workers run until then, so that the
    end of their run never cuts a recovery short on a slow machine."""
    if not heals:
        return
    last = heals[-1]
    while time.monotonic() < last + bound_s + 1:
        if any(t >= last and w and w[0] == "ACQ" for wk in workers for t, w in list(wk.events)):
            return
        time.sleep(0.05)


def inject_faults(sc, work, server, proxy, seconds, faults, pause_flag, faketime_file):
    """Injects the scenario's fault `faults` times, one every (seconds - 3) / faults s; returns
    the monotonic times at which each was healed, and how many were injected."""
    heals = []  # monotonic times at which a fault was healed
    injected = 0
    time.sleep(1.5)
    gap = (seconds - 3.0) / faults
    for k in range(faults):
        t0 = time.monotonic()
        if sc.fault == "holder_stop":
            open(pause_flag, "w").close()
            pid = None
            until = time.monotonic() + 15
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
        elif sc.fault == "failover":  # Cluster, Sentinel, etcd: healed once the promotion is seen
            heals.append(server.fail_over())
            injected += 1
        elif sc.fault == "leader_stop":  # etcd: healed at the SIGCONT
            heals.append(server.stop_leader(2 * LEASE_MS / 1000))
            injected += 1
        rest = gap - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
    return heals, injected


def judge(sc, store, workers, codes, heals, injected, start):
    """The scenario's figures, and its "problems": whatever a user would call a failure."""
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
        "bound_s": sc.bound_s,
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
            problems.append("%d losses the store proved were never reported (%s)"
                            % (unreported, unreported_evidence(store, workers, heals, start)))
        if r["recovery_max_s"] > sc.bound_s:
            problems.append("recovery took %.2f s, bound %.1f s" % (r["recovery_max_s"], sc.bound_s))
        if len(acks) == 0:
            problems.append("no increment was acknowledged at all")
    r["problems"] = problems
    return r


def unreported_evidence(store, workers, heals, start):
    """Each unreported loss: its worker and token, when the store refused it and which newer
    token (acquired by whom, when) it had seen, and the latest heal before (s from the start)."""
    acquired = {w[1]: (i, t) for i, wk in enumerate(workers) for t, w in wk.events if w[0] == "ACQ"}
    out = []
    for i, wk in enumerate(workers):
        for t, w in wk.events:
            if w[0] != "UNREPORTED":
                continue
            healed = [h - start for h in heals if h <= t]
            text = "worker%d token %s (acquired at %.2f s)" % (i, w[1], acquired.get(w[1], (0, start))[1] - start)
            for at, op, token, newer in store.refusals:
                if str(token) == w[1]:
                    by, when = acquired.get(str(newer), (-1, start))
                    text += ", its %s refused at %.2f s: the store had seen token %d (worker%d, acquired at %.2f s)" % (
                        op, at - start, newer, by, when - start)
            out.append(text + ", last heal %s" % ("%.2f s" % healed[-1] if healed else "none"))
    return "; ".join(out)


def save_events(workers, start, work):
    """Each worker's events, s from the start, in work/workerN.events: evidence for a failure."""
    for i, wk in enumerate(workers):
        with open(os.path.join(work, "worker%d.events" % i), "w") as f:
            f.writelines("%.3f %s\n" % (t - start, " ".join(w)) for t, w in wk.events)


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
    # A master SIGKILLed, its replica promoted, the killed node started again on its port. The
    # bound counts from the promotion being observed (every node, or every sentinel, names the
    # new master), as the outage before it is the servers' failure detection: the lock's lease
    # (1 s) has run out by then, so lease + C + T = 2 s again, with slack. A cluster fault takes
    # ~3 s (promotion ~2-2.6 s, the node back as a replica in ~0.1 s); a Sentinel fault ~13 s
    # (promotion ~2.9 s, then ~10 s until the sentinels convert the empty restarted master: an
    # 8 s wait in Sentinel, then its next 10-second INFO): one in the default set, six in --full.
    Scenario("cluster: the lock's master SIGKILLed, replica promoted, old master rejoins", "redis-cluster",
             "failover", 5.0, timing=((12, 2), (30, 6))),
    Scenario("sentinel: the master SIGKILLed, replica promoted, old master back empty", "redis-sentinel",
             "failover", 5.0, timing=((16, 1), (90, 6))),
    # etcd holds a lock on a lease of whole seconds: ceil(1 s) + 1 = TTL 2 s (src/etcd/
    # lock_protocol.h), kept alive by the holder's heartbeats. A holder paused (or a release lost)
    # leaves its key until the TTL runs out, etcd's lessor notices (it looks every 500 ms) and the
    # revoke commits: up to about 2.6 s, measured 1.9-2.4 s after the pause began. A new leader
    # first extends every lease by an election timeout (500 ms): a key whose release failed in
    # the election (its one background retry too) goes about 3 s after the new leader, measured
    # 2.6 s. The bounds (5 s) add about 2 s of slack to those. A failover takes ~0.6-1.2 s (new
    # leader 0.5-1.2 s after the kill, the killed member back in ~0.1 s), a leader stop 2 s and
    # ~0.1 s to settle: 2 faults in 12 s, so that the second's recovery ends well within the run.
    Scenario("etcd: the leader SIGKILLed, a new one elected, the old rejoins", "etcd", "failover", 5.0,
             timing=((12, 2), (30, 6))),
    Scenario("etcd: holder SIGSTOPped past its lease", "etcd", "holder_stop", 5.0, timing=((12, 2), (30, 6))),
    Scenario("etcd: the leader SIGSTOPped 2 leases", "etcd", "leader_stop", 5.0, timing=((12, 2), (30, 6))),
    # PostgreSQL: a primary and a streaming standby, the workers on both with
    # target_session_attrs=read-write. A lease ends on the server's clock: a paused holder's
    # row expires 1 s on, and the next acquire drops it: lease + C + T = 2 s again, bounds with
    # slack. A failover: the primary SIGKILLed, the standby promoted (pg_ctl promote, ~0.5 s),
    # the killed node copied again as the new standby (~2 s): 2 faults in 14 s.
    Scenario("postgres: holder SIGSTOPped past its lease", "postgres", "holder_stop", 4.0),
    Scenario("postgres: the primary SIGSTOPped 2 leases", "postgres", "server_stop", 4.0),
    Scenario("postgres: the primary killed, restarted on its data", "postgres", "restart", 4.0),
    Scenario("postgres: the primary SIGKILLed, the standby promoted, the old one copied again (4 workers)",
             "postgres", "failover", 5.0, timing=((14, 2), (36, 6)), workers=4),
    Scenario("control: fencing off, holder paused between read and write", "redis", "holder_stop", 99.0,
             fenced=False, expect_lost_updates=True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--full", action="store_true", help="longer runs, more faults each")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at once")
    args = parser.parse_args()
    scenarios = [s for s in SCENARIOS if not args.only or any(o in s.name for o in args.only)]
    if not os.path.exists(FAKETIME_LIB):
        print("faults: %s missing (apt-get install libfaketime)" % FAKETIME_LIB)
        return 1
    if any(s.backend == "postgres" for s in scenarios) and not pg_bin():
        print("faults: PostgreSQL missing from /usr/lib/postgresql (apt-get install postgresql)")
        return 1
    if any(s.backend == "etcd" for s in scenarios) and not shutil.which("etcd"):
        print("faults: etcd not on PATH (apt-get install etcd-server)")
        return 1
    # dynalite's workers' credentials, set once before scenarios run side by side.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "faults")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "faults")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

    def run_one(sc):
        work = tempfile.mkdtemp(prefix="dlock-faults-")
        try:
            r = run_scenario(sc, args, work)
        except Exception as e:  # a harness failure fails the scenario, loudly
            r = {"scenario": sc.name, "problems": ["harness: %r" % e]}
        if r.get("problems"):
            print("FAIL %s: %s (logs in %s%s)" % (sc.name, "; ".join(r["problems"]), work,
                                                  "; " + r["note"] if r.get("note") else ""), flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
            print("ok   %s (%.1f s%s)" % (sc.name, r["elapsed_s"], "; " + r["note"] if r.get("note") else ""),
                  flush=True)
        return r

    # Scenarios share nothing (their own servers, ports, work dirs), so --jobs of them can run
    # at once; the table keeps the scenarios' order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(run_one, scenarios))

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
