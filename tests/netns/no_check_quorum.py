"""A ``kafka-rpc`` node whose Raft leaders never resign on check quorum: the mutation that
``test_network_faults.test_leader_isolation_catches_a_leader_without_check_quorum`` runs the
leader-isolation scenario against (the scenario's assertion must fail).

Test-only, and nothing in the package reads it: ``python -m tests.netns.no_check_quorum <kafka-rpc
arguments>`` patches ``RaftCore._poll_leader`` in this process (the check-quorum deadline is
cleared before every leader poll, so Kafka's "no fetch from a majority for 1.5 x fetch timeout"
rule never fires) and then runs ``kafka_rpc.cli`` as ``kafka-rpc`` would
(``KAFKA_RPC_NO_REEXEC=1``: a re-exec would lose the patch)."""

from __future__ import annotations

import os
import sys

from kafka_rpc.raft import core

_poll_leader = core.RaftCore._poll_leader


def _poll_leader_without_check_quorum(self: core.RaftCore, now: int) -> None:
    self._check_quorum_deadline = None
    _poll_leader(self, now)


core.RaftCore._poll_leader = _poll_leader_without_check_quorum

if __name__ == "__main__":
    os.environ["KAFKA_RPC_NO_REEXEC"] = "1"
    from kafka_rpc.cli import main

    sys.exit(main())
