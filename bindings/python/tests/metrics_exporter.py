"""The exporter of test_metrics.py's Prometheus scrape test (not a test module itself).

    python3 metrics_exporter.py REDIS_URL PORT N

Acquires and releases one lock N times, registers the client with dlock.prometheus in
prometheus_client's default registry, serves it with prometheus_client's start_http_server on
127.0.0.1:PORT, prints N, and serves until its standard input closes (60 s at most), so it
stops by itself whatever happens to the test.
"""

import sys
import threading

import prometheus_client

import dlock
import dlock.prometheus


def main() -> int:
    url, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with dlock.Client(url) as client:
        lock = client.lock(f"metrics-exporter-{port}", timeout=10)
        for _ in range(n):
            with lock:
                pass
        dlock.prometheus.register(client)
        prometheus_client.start_http_server(port, addr="127.0.0.1")
        print(n, flush=True)
        stdin_closed = threading.Event()

        def wait_for_eof() -> None:
            sys.stdin.read()
            stdin_closed.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
        stdin_closed.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
