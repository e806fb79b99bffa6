"""Who may run the netns scenarios: root with the tools; anyone else fails with a message saying
so, or skips with the explicit opt-out ``KAFKA_RPC_SKIP_NETNS=1``. (Runs as any user.)"""

from __future__ import annotations

import pytest

from kafka_rpc.testbed import netns
from tests.netns.conftest import netns_gate


def test_not_root_fails_with_a_message(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match="need root.*KAFKA_RPC_SKIP_NETNS=1"):
        netns_gate({})


def test_not_root_skips_only_when_opted_out(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="need root"):
        netns_gate({"KAFKA_RPC_SKIP_NETNS": "1"})
    with pytest.raises(pytest.fail.Exception):
        netns_gate({"KAFKA_RPC_SKIP_NETNS": "0"})


def test_a_missing_toxiproxy_fails(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    monkeypatch.setattr(netns, "toxiproxy_binary", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="toxiproxy-server v2.5.0"):
        netns_gate({})


def test_partition_pairs():
    assert netns.partition_pairs([[1], [2, 3]]) == {(1, 2), (2, 1), (1, 3), (3, 1)}
    # a bridge: 1 and 3 cut, 2 in no group sees both
    assert netns.partition_pairs([[1], [3]]) == {(1, 3), (3, 1)}
