"""The controller's gauges for the node's Prometheus endpoint (``metrics.port``;
docs/operations.md): read from the :class:`~kafka_rpc.controller.quorum_controller.
QuorumController` at each scrape (a prometheus-client custom collector), so they cost nothing
between scrapes.

* ``kafka_rpc_diskless_metadata_missing_brokers``: on the active controller, how many more
  brokers running our Batch Coordinator must be registered and unfenced before it can create
  ``__diskless-metadata`` with ``diskless.metadata.topic.replication.factor`` replicas
  (:attr:`~kafka_rpc.controller.quorum_controller.QuorumController.
  diskless_metadata_missing_brokers`); 0 once it exists, and on every other node. Named as
  Kafka's ``kafka.controller`` gauges are by a Prometheus exporter, under our prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["ControllerCollector", "register_controller_metrics"]

MISSING_BROKERS = "kafka_rpc_diskless_metadata_missing_brokers"


class ControllerCollector:
    """A prometheus-client collector of ``controller``'s gauges (module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily(
            MISSING_BROKERS,
            "Brokers running the Batch Coordinator still missing before the active controller "
            "can create __diskless-metadata (0: it exists, or this is not the active controller)",
            value=self.controller.diskless_metadata_missing_brokers,
        )

    def describe(self) -> list[Any]:
        return list(self.collect())


def register_controller_metrics(registry: Any, controller: Any) -> ControllerCollector:
    """Register ``controller``'s gauges in the prometheus-client ``registry`` (the node's
    ``metrics_registry``); returns the collector (``registry.unregister`` takes it)."""
    collector = ControllerCollector(controller)
    registry.register(collector)
    return collector
