"""The KIP-1164 Batch Coordinator: domain API, implementations, and selection by URL.

``create_coordinator(url, **options)`` returns an unstarted coordinator (``await c.start()``, or
``async with``):

* ``memory://`` -> ``InMemoryBatchCoordinator`` (reference implementation, nothing persisted);
* ``sqlite:///abs/path.db`` or ``sqlite://relative/path.db`` -> ``SqliteBatchCoordinator`` (the
  path is everything after ``sqlite://``); query parameters (``?synchronous=NORMAL&
  max_group_size=32&inline_read_max_partitions=0``) become options, explicit ``options`` win;
* ``package.module:ClassName`` -> a third-party ``BatchCoordinator`` subclass, called with
  ``**options``.
"""

from __future__ import annotations

import importlib
import re
from typing import Any
from urllib.parse import parse_qsl

from .api import BatchCoordinator

__all__ = ["BatchCoordinator", "create_coordinator"]

_DOTTED = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_INT_OPTIONS = {"max_group_size", "producer_id_expiration_ms", "inline_read_max_partitions"}


def create_coordinator(url: str, **options: Any) -> BatchCoordinator:
    """Build the coordinator named by ``url`` (see the module docstring). Raises ``ValueError``
    for an unknown scheme and ``TypeError`` if a dotted class is not a ``BatchCoordinator``."""
    if url.startswith("memory://"):
        from .memory import InMemoryBatchCoordinator

        return InMemoryBatchCoordinator(**options)
    if url.startswith("sqlite://"):
        from .sqlite import SqliteBatchCoordinator

        path, _, query = url[len("sqlite://") :].partition("?")
        if not path:
            raise ValueError(f"no database path in {url!r}")
        params: dict[str, Any] = {}
        for k, v in parse_qsl(query, strict_parsing=bool(query)):
            params[k] = int(v) if k in _INT_OPTIONS else v
        params.update(options)
        return SqliteBatchCoordinator(path, **params)
    if _DOTTED.match(url):
        module_name, _, class_name = url.partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(cls, type) and issubclass(cls, BatchCoordinator)):
            raise TypeError(f"{url} is not a BatchCoordinator subclass")
        return cls(**options)
    raise ValueError(f"unknown coordinator URL {url!r} (memory://, sqlite:///path, module:Class)")
