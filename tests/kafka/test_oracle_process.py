"""The oracle JVM never hangs the suite: a JVM that stops answering or dies fails the call with
its stderr, and its process group is gone afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from tests.kafka.oracle import KafkaOracle, OracleError

pytestmark = pytest.mark.kafka


def test_a_hung_oracle_fails_the_call_within_its_timeout(kafka_newest, tmp_path):
    oracle = KafkaOracle.start_for(kafka_newest, tmp_path)
    try:
        assert oracle.ok({"op": "describe"})["apis"]
        os.killpg(oracle.pid, signal.SIGSTOP)
        with pytest.raises(OracleError, match="no answer within 2 s"):
            oracle.call({"op": "describe"}, timeout=2)
        assert not oracle.alive()
        with pytest.raises(ProcessLookupError):
            os.killpg(oracle.pid, 0)
    finally:
        oracle.kill()


def test_a_dead_oracle_fails_the_call_with_its_stderr(kafka_newest, tmp_path):
    oracle = KafkaOracle.start_for(kafka_newest, tmp_path)
    try:
        oracle.log_path.write_text("the JVM's last words\n")
        os.killpg(oracle.pid, signal.SIGKILL)
        with pytest.raises(OracleError, match="(?s)(exited|stdin closed|not running).*last words"):
            oracle.call({"op": "describe"}, timeout=10)
    finally:
        oracle.kill()
