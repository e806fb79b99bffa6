"""The starts of a node's ``__diskless-metadata`` replicas (``AssignedBatchCoordinator``): how
often each partition's replica was tried and failed, the backoff before its next try, and those
numbers as Prometheus metrics on the node's ``/metrics`` endpoint (``metrics.port``).

A replica that fails to start (a ``partition.metadata`` naming another topic id, an unwritable
or full directory, a damaged log...) is tried again after ``initial_s`` (1 s), the wait doubling
up to ``max_s`` (30 s), for as long as its partition is assigned here and the coordinator is open
(``AssignedBatchCoordinator._start_slot``); a start that succeeds resets the wait. A failure is
logged at ERROR the first time its error (type and message) occurs for that partition, then at
DEBUG while it repeats.

Metrics (:class:`ReplicaStartsCollector`, read when ``/metrics`` is scraped):

* ``kafka_rpc_diskless_metadata_replica_start_attempts_total{partition}`` (counter): starts tried;
* ``kafka_rpc_diskless_metadata_replica_start_failures_total{partition}`` (counter): starts that
  raised;
* ``kafka_rpc_diskless_metadata_replicas_running`` (gauge): replicas of this node running now.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

__all__ = ["ReplicaStarts", "ReplicaStartsCollector", "register_metrics"]

#: The wait before the first retry of a failed replica start (s), and its cap (s).
START_RETRY_INITIAL_S = 1.0
START_RETRY_MAX_S = 30.0


class ReplicaStarts:
    """Per coordinator partition: starts tried (``attempts``) and failed (``failures``), both
    ``collections.Counter`` by partition, and the backoff of the next retry (``initial_s``
    doubling to ``max_s``, seconds). Event loop only (the collector reads copies)."""

    def __init__(
        self, initial_s: float = START_RETRY_INITIAL_S, max_s: float = START_RETRY_MAX_S
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.attempts: collections.Counter[int] = collections.Counter()
        self.failures: collections.Counter[int] = collections.Counter()
        self._delay: dict[int, float] = {}  # partition -> the wait before its next retry (s)
        self._errors: dict[int, set[str]] = {}  # partition -> errors logged since its last start
        self._failed_since: collections.Counter[int] = collections.Counter()

    def attempt(self, partition: int) -> int:
        """A start of ``partition``'s replica begins; returns its attempt number (from 1)."""
        self.attempts[partition] += 1
        return self.attempts[partition]

    def failed(self, partition: int, exc: BaseException) -> tuple[float, bool]:
        """The start raised ``exc``: ``(seconds to wait before the next try, whether this error
        is new for the partition since its last successful start -- log it loudly)``."""
        self.failures[partition] += 1
        self._failed_since[partition] += 1
        delay = self._delay.get(partition, self.initial_s)
        self._delay[partition] = min(delay * 2, self.max_s)
        seen = self._errors.setdefault(partition, set())
        key = f"{type(exc).__qualname__}: {exc}"
        new = key not in seen
        seen.add(key)
        return min(delay, self.max_s), new

    def succeeded(self, partition: int) -> int:
        """The start succeeded: the backoff and the errors seen are forgotten; returns how many
        starts had failed since the last success."""
        self._delay.pop(partition, None)
        self._errors.pop(partition, None)
        return self._failed_since.pop(partition, 0)


class ReplicaStartsCollector:
    """A prometheus-client collector of ``coordinator``'s replica starts (an
    ``AssignedBatchCoordinator``: its ``replica_starts`` and ``replicas_running``); see the
    module docstring for the metrics. Called on the metrics server's thread: it reads copies."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        starts: ReplicaStarts = self.coordinator.replica_starts
        attempts = CounterMetricFamily(
            "kafka_rpc_diskless_metadata_replica_start_attempts",
            "Starts tried of this node's __diskless-metadata replicas",
            labels=["partition"],
        )
        failures = CounterMetricFamily(
            "kafka_rpc_diskless_metadata_replica_start_failures",
            "Starts of this node's __diskless-metadata replicas that failed (retried with backoff)",
            labels=["partition"],
        )
        tried = dict(starts.attempts)
        failed = dict(starts.failures)
        for p in sorted(tried):
            attempts.add_metric([str(p)], tried[p])
            failures.add_metric([str(p)], failed.get(p, 0))
        yield attempts
        yield failures
        running = GaugeMetricFamily(
            "kafka_rpc_diskless_metadata_replicas_running",
            "This node's __diskless-metadata replicas running now",
        )
        try:
            running.add_metric([], len(self.coordinator.replicas_running))
        except RuntimeError:  # its slots changed while read (another thread): no sample
            pass
        yield running


def register_metrics(registry: Any, coordinator: Any) -> bool:
    """Add ``coordinator``'s replica-start metrics to the prometheus-client ``registry`` (the
    node's ``/metrics``) when it has any (an ``AssignedBatchCoordinator``); returns whether it
    did."""
    if registry is None or not isinstance(getattr(coordinator, "replica_starts", None),
                                          ReplicaStarts):  # fmt: skip
        return False
    registry.register(ReplicaStartsCollector(coordinator))
    return True
