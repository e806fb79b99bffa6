"""The KIP-1164 Batch Coordinator: the domain API (:mod:`kafka_rpc.coordinator.api`) and its
implementations (``memory``, ``sqlite``, ``postgres``, ``replicated``, ``assigned``), chosen by
URL with :func:`kafka_rpc.coordinator.factory.create_coordinator`.

The package imports none of its implementations: they import from ``api`` and from each other,
and ``factory`` imports them when a URL names one."""

from __future__ import annotations

from .api import BatchCoordinator

__all__ = ["BatchCoordinator"]
