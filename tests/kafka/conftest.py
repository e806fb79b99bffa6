"""Fixtures for the tests that run Apache Kafka beside us (marker ``kafka``).

The releases are resolved once per session (``tests/kafka/peer.py``). Without Java 17+ or Maven
these tests fail with a message saying how to install them; ``KAFKA_RPC_SKIP_KAFKA=1`` turns
that into a skip for a developer who opts out (CI never does)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.kafka import peer


def _libs_or_fail(version: str):
    try:
        peer.java_binary()
        return peer.resolve(version)
    except peer.KafkaUnavailable as exc:
        if os.environ.get("KAFKA_RPC_SKIP_KAFKA") == "1":
            pytest.skip(f"KAFKA_RPC_SKIP_KAFKA=1: {exc}")
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def kafka_newest() -> str:
    """The newest pinned Apache Kafka release, resolved (its version string)."""
    _libs_or_fail(peer.NEWEST)
    return peer.NEWEST


@pytest.fixture(scope="session")
def kafka_oldest() -> str:
    """The oldest pinned 4.x line's release, resolved (its version string)."""
    _libs_or_fail(peer.OLDEST)
    return peer.OLDEST


def _oracle(version: str, tmp_path_factory):
    from tests.kafka.oracle import KafkaOracle

    oracle = KafkaOracle.start_for(version, tmp_path_factory.mktemp(f"oracle-{version}"))
    try:
        yield oracle
    finally:
        oracle.kill()


@pytest.fixture(scope="session")
def kafka_oracle_newest(kafka_newest, tmp_path_factory):
    """Kafka's generated codec of the newest release as one JVM for the whole session
    (``tests/kafka/oracle.py``); killed at the end of the session."""
    yield from _oracle(kafka_newest, tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_oracle_oldest(kafka_oldest, tmp_path_factory):
    """As ``kafka_oracle_newest``, for the oldest pinned release."""
    yield from _oracle(kafka_oldest, tmp_path_factory)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def procs(request):
    """A list to append every started :class:`peer.ManagedProcess` to: each is killed (process
    group) at teardown, and when the test failed the tail of each one's log is printed."""
    started: list[peer.ManagedProcess] = []
    yield started
    rep = getattr(request.node, "rep_call", None)
    failed = rep is None or rep.failed
    for p in started:
        if failed:
            print(f"\n----- {p.name} log tail -----\n{p.tail()}", file=sys.stderr)
        p.kill()
