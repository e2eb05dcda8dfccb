"""dlock's metrics in prometheus_client: a custom collector over Client.metrics().

    import prometheus_client
    import dlock, dlock.prometheus

    client = dlock.Client("redis://127.0.0.1:6379")
    dlock.prometheus.register(client)        # in prometheus_client's default REGISTRY
    prometheus_client.start_http_server(9100)  # /metrics now has dlock_acquires_total, ...

prometheus_client is imported only here, and only when a collector is registered or collected:
dlock itself never needs it (pip install prometheus-client; on Debian, apt-get install
python3-prometheus-client).

Each scrape reads each registered client's metrics (a few microseconds per C client: no round
trip) and yields CounterMetricFamily, GaugeMetricFamily and HistogramMetricFamily objects, the
samples exactly as the library counts them (docs/metrics.md); a counter family is named without
its _total, which prometheus_client adds back.

Several clients: each register() names its client with label= (the value of a `client` label
on every sample), and the clients of one registry must all have distinct labels: a second
client is refused while either has none, because two unlabelled clients would write the same
series twice. Sum them in PromQL (sum without (client) (...)) if you want one number. A client
stays registered until unregister(), or until it is garbage collected (the registry holds it
weakly); after its close() it reports its final counts.
"""

import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from . import Client

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = ["register", "unregister", "Collector"]

LABEL = "client"  # the label that tells the clients of one collector apart


def _prometheus_client() -> Any:
    try:
        import prometheus_client.core
    except ImportError as e:
        raise ImportError(
            "dlock.prometheus needs prometheus_client, which is not installed (pip install "
            "prometheus-client; on Debian: apt-get install python3-prometheus-client); "
            "Client.metrics() and Client.metrics_text() need no library") from e
    return prometheus_client.core


class Collector:
    """A prometheus_client collector of one or more dlock Clients: register it in a registry
    (register() below makes one per registry and adds clients to it). collect() yields the
    families of every client added, each client's samples labelled client="LABEL" when it was
    added with a label."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        # (weak reference to the Client, its label): in the order added
        self._clients: List[Tuple["weakref.ref[Client]", Optional[str]]] = []

    def add(self, client: Client, label: Optional[str] = None) -> None:
        """Adds client, its samples labelled client=label (none when label is None). ValueError
        if it is here already, or if its label does not tell it apart from the clients here:
        every client of a collector with more than one needs a label, each a different one."""
        if not isinstance(client, Client):
            raise TypeError(f"client must be a dlock.Client, not {type(client).__name__}")
        if label is not None and not isinstance(label, str):
            raise TypeError(f"label must be a str, not {type(label).__name__}")
        with self._mu:
            live = self._live()
            for other, other_label in live:
                if other is client:
                    raise ValueError(f"{client!r} is registered already")
            for other, other_label in live:
                if label is None or other_label is None:
                    raise ValueError(
                        f"{client!r} and {other!r} would write the same series: give each "
                        "client a distinct label (register(client, label=\"orders\")), which "
                        f"becomes a {LABEL}=\"...\" label on its samples")
                if other_label == label:
                    raise ValueError(f"label {label!r} is taken by {other!r}: give each client "
                                     "its own")
            self._clients.append((weakref.ref(client), label))

    def remove(self, client: Client) -> None:
        """Removes client; KeyError if it is not here."""
        with self._mu:
            for i, (ref, _) in enumerate(self._clients):
                if ref() is client:
                    del self._clients[i]
                    return
        raise KeyError(f"{client!r} is not registered")

    def _live(self) -> List[Tuple[Client, Optional[str]]]:
        """Under _mu: the clients still alive (the collected ones are dropped)."""
        live = []
        kept = []
        for ref, label in self._clients:
            client = ref()
            if client is not None:
                live.append((client, label))
                kept.append((ref, label))
        self._clients = kept
        return live

    def clients(self) -> List[Tuple[Client, Optional[str]]]:
        """The clients added and alive, with their labels."""
        with self._mu:
            return self._live()

    def collect(self) -> Iterator["Metric"]:
        """The families of every client (prometheus_client calls it at each scrape). A client
        of a process this one was forked from is left out: its counts are that process's."""
        core = _prometheus_client()
        makers = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily,
                  "histogram": core.HistogramMetricFamily}
        families: Dict[str, Any] = {}
        for client, label in self.clients():
            if client._forked():
                continue
            for family in client.metrics():
                out = families.get(family.name)
                if out is None:
                    make = makers.get(family.type)
                    if make is None:  # a type newer than this binding: as it is
                        out = core.Metric(family.name, family.help, "unknown")
                    elif family.type == "counter" and family.name.endswith("_total"):
                        out = make(family.name[:-len("_total")], family.help)
                    else:
                        out = make(family.name, family.help)
                    families[family.name] = out
                for s in family.samples:
                    labels = s.labels if label is None else {LABEL: label, **s.labels}
                    out.add_sample(s.name, labels, s.value)
        yield from families.values()


_collectors: "weakref.WeakKeyDictionary[Any, Collector]" = weakref.WeakKeyDictionary()
_collectors_mu = threading.Lock()


def register(client: Client, registry: Optional["CollectorRegistry"] = None, *,
             label: Optional[str] = None) -> Collector:
    """Exports client's metrics through registry (default: prometheus_client.REGISTRY), and
    returns the registry's dlock Collector. One Collector per registry holds every client
    registered there; label (a str) becomes a client="label" label on each of this client's
    samples, and is needed, distinct, as soon as a registry has two clients (ValueError
    otherwise, and for a client registered twice). ImportError when prometheus_client is not
    installed."""
    core = _prometheus_client()
    # Any: a Collector is prometheus_client's Collector by its collect() only (no subclass, so
    # that importing this module needs no prometheus_client)
    reg: Any = core.REGISTRY if registry is None else registry
    with _collectors_mu:
        collector = _collectors.get(reg)
        fresh = collector is None
        if collector is None:
            collector = Collector()
        collector.add(client, label)
        if fresh:
            try:
                reg.register(collector)  # the default registry reads its names: collect()
            except BaseException:
                collector.remove(client)
                raise
            _collectors[reg] = collector
    return collector


def unregister(client: Client, registry: Optional["CollectorRegistry"] = None) -> None:
    """Stops exporting client through registry (default: prometheus_client.REGISTRY); the
    collector leaves the registry with its last client. KeyError if it is not registered
    there."""
    core = _prometheus_client()
    reg: Any = core.REGISTRY if registry is None else registry
    with _collectors_mu:
        collector = _collectors.get(reg)
        if collector is None:
            raise KeyError(f"{client!r} is not registered")
        collector.remove(client)
        if not collector.clients():
            reg.unregister(collector)
            del _collectors[reg]
