"""Prometheus metrics of `dlsched server`: GET /metrics, in Prometheus's text exposition format.

Each Server has a CollectorRegistry of its own, never prometheus_client's global one: two servers
in one process keep their series apart, and nothing else the process registers globally gets into
the scrape. The series, by where their truth is:

State, read from the server's live objects when Prometheus scrapes (`LiveState`, a custom
collector: nothing to keep in step, so a value cannot drift from what the API answers):

    dlsched_queue_length                    jobs waiting in the scheduler's queue (queued, also
                                            after a preemption, or placed in part: what a round orders)
    dlsched_running_jobs                    jobs the scheduler has running
    dlsched_jobs{state}                     jobs in the store per state, as GET /jobs lists them
                                            (every state of store.ACTIVE and store.FINAL, 0 too)
    dlsched_gpus_capacity                   GPUs of the nodes that are up (not `_total`: in
                                            Prometheus's naming rules that suffix is for
                                            counters only, and `promtool check metrics`
                                            rejects it on a gauge)
    dlsched_gpus_free                       free GPU capacity of the nodes that are up (what
                                            GET /nodes sums; fractions where jobs share a GPU)
    dlsched_gpus_allocated                  GPUs holding at least one task (one k tasks share
                                            counts once)
    dlsched_gpus_shared                     GPUs holding more than one task (GET /nodes:
                                            `gpu_load` above 1)

Per queue, read at each scrape as GET /queues answers it (`QueueState`; dlsched.runtime.queues_api):
one series per queue of the tree (`--queues FILE`), leaves and inner queues alike (an inner
queue's used, borrowed, running and pending are its subtree's: sum over leaves only); without a
tree, the one queue `default`:

    dlsched_queue_gpus_used{queue}          GPUs its jobs hold
    dlsched_queue_gpus_nominal{queue}       its nominal GPU quota (0 without one)
    dlsched_queue_gpus_borrowed{queue}      GPUs held above its subtree's nominal quotas
    dlsched_queue_jobs_pending{queue}       its jobs waiting
    dlsched_queue_jobs_running{queue}       its jobs holding GPUs
    dlsched_queue_preemptions_total{queue,reason}   its jobs suspended by the tenancy (reclaim,
                                            fair-share, priority, ...: the victims' part), per
                                            leaf; none without a tree

Events, counted where they happen (the hooks are set by `Metrics`):

    dlsched_job_transitions_total{state}    states jobs entered (Store.on_state: every change of
                                            a job's state goes through the store, whichever
                                            thread makes it; a state written again is no entry)
    dlsched_switch_seconds{kind}            histogram: seconds each suspend, resume, migrate and
                                            resize took to carry out (RayBackend.on_switch); its
                                            _count is the number of switches of each kind

Latencies the server keeps anyway, observed at scrape time (`Backlog`: the entries added since
the last scrape), so the scheduler's loop pays nothing for them:

    dlsched_round_seconds                   histogram: wall seconds of each scheduling round
                                            (Scheduler.rounds; /metrics/scheduler lists the last)
    dlsched_decision_latency_seconds        histogram: from an event to the decision it led to
                                            (RayBackend.latencies)

Counters start at zero with each server process (Prometheus's rate() and increase() take a reset
in their stride). A policy's modelled switch cost (the `cost` of a decision in the event log) is
not exported: on the runtime the real cost is paid, and measured here.
"""
from __future__ import annotations

import threading
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dlsched.core.types import GPU
from dlsched.runtime.store import ACTIVE, FINAL

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

SWITCHES = ("suspend", "resume", "migrate", "resize")
ROUND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SWITCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """One server's registry, and the hooks on its store and backend that feed it."""

    def __init__(self, store, backend, scheduler):
        self.registry = CollectorRegistry()
        self.transitions = Counter("dlsched_job_transitions", "Job states entered, by state",
                                   ["state"], registry=self.registry)
        self.switch_s = Histogram("dlsched_switch_seconds", "Seconds each suspend, resume, migrate "
                                  "and resize took to carry out, by kind", ["kind"],
                                  buckets=SWITCH_BUCKETS, registry=self.registry)
        for state in ACTIVE + FINAL:          # every series from the first scrape on, at 0
            self.transitions.labels(state)
        for kind in SWITCHES:
            self.switch_s.labels(kind)
        self.registry.register(LiveState(store, backend, scheduler))
        self.registry.register(QueueState(scheduler))
        self.registry.register(Backlog(
            Histogram("dlsched_round_seconds", "Wall seconds of each scheduling round",
                      buckets=ROUND_BUCKETS, registry=None),
            lambda: scheduler.rounds, lambda r: r[1]))
        self.registry.register(Backlog(
            Histogram("dlsched_decision_latency_seconds", "Seconds from an event to the decision it led to",
                      buckets=ROUND_BUCKETS, registry=None),
            lambda: backend.latencies, float))
        store.on_state = self.entered
        backend.on_switch = self.switched

    def entered(self, state: str) -> None:
        self.transitions.labels(state).inc()

    def switched(self, kind: str, seconds: float) -> None:
        self.switch_s.labels(kind).observe(seconds)

    def exposition(self) -> bytes:
        """The scrape: every series, in the text format of CONTENT_TYPE_LATEST."""
        return generate_latest(self.registry)


class LiveState(Collector):
    """The gauges, read from the scheduler, the backend's ledger and the store at each scrape
    (from an API thread: the ledger's arrays are copied first, as GET /nodes does)."""

    def __init__(self, store, backend, scheduler):
        self.store, self.backend, self.scheduler = store, backend, scheduler

    def collect(self):
        yield GaugeMetricFamily("dlsched_queue_length", "Jobs waiting in the scheduler's queue",
                                value=len(self.scheduler.queue))
        yield GaugeMetricFamily("dlsched_running_jobs", "Jobs running", value=len(self.scheduler.running))
        jobs = GaugeMetricFamily("dlsched_jobs", "Jobs in the store, by state", labels=["state"])
        counts = self.store.state_counts()
        for state in ACTIVE + FINAL:
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs
        st = self.backend.state
        up, free, load = st.up.copy(), st.free[:, GPU].copy(), st.gpu_load.copy()
        cap = self.backend.cluster.capacity[:, GPU]
        for name, doc, value in (
                ("capacity", "GPUs of the nodes that are up", cap[up].sum()),
                ("free", "Free GPU capacity of the nodes that are up", free[up].sum()),
                ("allocated", "GPUs holding at least one task", (load > 0).sum()),
                ("shared", "GPUs holding more than one task", (load > 1).sum())):
            yield GaugeMetricFamily(f"dlsched_gpus_{name}", doc, value=float(value))


class QueueState(Collector):
    """The per-queue gauges and the preemption counter, from the scheduler's tenancy (or the
    one `default` queue) at each scrape."""

    def __init__(self, scheduler):
        from dlsched.tenancy import default_tree
        self.scheduler, self.tree = scheduler, default_tree()

    def collect(self):
        from dlsched.runtime.queues_api import queues_of
        rows = queues_of(self.scheduler, self.tree)["queues"]
        for name, doc, value in (
                ("gpus_used", "GPUs the queue's jobs hold", lambda q: q["usage"].get("gpu", 0.0)),
                ("gpus_nominal", "The queue's nominal GPU quota",
                 lambda q: (q["quotas"].get("gpu") or {}).get("nominal") or 0.0),
                ("gpus_borrowed", "GPUs the queue holds above its subtree's nominal quotas",
                 lambda q: q["borrowed_gpus"] or 0.0),
                ("jobs_pending", "The queue's jobs waiting", lambda q: q["pending"]),
                ("jobs_running", "The queue's jobs holding GPUs", lambda q: q["running"])):
            g = GaugeMetricFamily(f"dlsched_queue_{name}", doc, labels=["queue"])
            for q in rows:
                g.add_metric([q["name"]], float(value(q)))
            yield g
        c = CounterMetricFamily("dlsched_queue_preemptions", "Jobs of the queue suspended by the "
                                "tenancy, by reason", labels=["queue", "reason"])
        ten = self.scheduler.tenancy
        counts = {k: dict(v) for k, v in list(ten.accounts.preempt.items())} if ten is not None else {}
        for leaf, by_reason in sorted(counts.items()):
            for reason, n in sorted(by_reason.items()):
                c.add_metric([leaf, reason], float(n))
        yield c


class Backlog(Collector):
    """A histogram of a list the server appends to and never shortens: each scrape observes the
    entries added since the last one (`value` of each), then reports the histogram."""

    def __init__(self, hist: Histogram, entries: Callable[[], list], value: Callable):
        self.hist, self.entries, self.value = hist, entries, value
        self.seen = 0
        self.lock = threading.Lock()          # two scrapes at once observe each entry once

    def collect(self):
        with self.lock:
            new = self.entries()[self.seen:]
            self.seen += len(new)
            for e in new:
                self.hist.observe(self.value(e))
        return self.hist.collect()
