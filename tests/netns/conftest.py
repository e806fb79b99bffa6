"""The network-namespace scenarios (``docs/network-faults.md``): root only.

Run as another user (or with ``ip``, ``nft`` or Toxiproxy missing) they FAIL with a message saying
so, unless ``KAFKA_RPC_SKIP_NETNS=1`` (a developer's explicit opt-out; ``.ci/run`` unsets it):
then they skip. Before the first of them, the namespaces that earlier runs left behind (their
process gone) are removed, and again after the last."""

from __future__ import annotations

import os

import pytest

from kafka_rpc.testbed.netns import NetnsUnavailable, cleanup_stale, require_root

SKIP_ENV = "KAFKA_RPC_SKIP_NETNS"


def netns_gate(environ=os.environ) -> None:
    """Return when the test bed can run here; else ``pytest.fail`` with the reason, or
    ``pytest.skip`` when ``KAFKA_RPC_SKIP_NETNS=1``."""
    try:
        require_root()
    except NetnsUnavailable as exc:
        if environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{exc} ({SKIP_ENV}=1)")
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def netns_ready():
    netns_gate()
    cleanup_stale()
    yield
    cleanup_stale()
