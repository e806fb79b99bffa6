"""Shared test configuration: deterministic Hypothesis profile for CI; parallel lanes for xdist."""

import os
import signal
import threading

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
settings.register_profile(
    "dev",
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


# --- Parallel runs (pytest-xdist: ``-n 4 --dist loadscope`` in pyproject.toml) -----------------
#
# Every test file is one scheduling unit (its module- and session-scoped servers are started once,
# on one worker), except the heavy ones, which share a lane so that a lane's files run one after
# another on one worker: at most one set of Kafka JVMs per lane and one namespace cluster run at a
# time on a 2-core machine, while the light files fill the other workers.  Lanes start first, since
# they are the longest units.  (xdist's own ``loadgroup`` marks are not used: with pytest 9 they no
# longer reach the scheduler, so the scheduler below groups by path itself.)
_LANES = (
    # Kafka's generated classes as the byte oracle: one oracle JVM per release per worker session.
    ("kafka-oracle", ("tests/kafka/test_codec_oracle.py", "tests/kafka/test_record_batch_oracle.py",
                      "tests/kafka/test_oracle_bites.py", "tests/kafka/test_oracle_process.py",
                      "tests/kafka/test_testbed.py")),
    # Kafka controllers and brokers started from the jars, in two lanes.
    # (the mixed-quorum failover's two configurations, 20 leader kills each, in different lanes)
    ("kafka-a", ("tests/kafka/test_kafka_broker", "tests/kafka/test_kafka_tools",
                 "tests/kafka/test_storage_interop", "tests/kafka/test_features_tools",
                 "tests/kafka/test_mixed_quorum_failover.py::test_leader_killed_again_and_again"
                 "_with_a_broker_attached[2kafka-1ours]")),
    ("kafka-b", ("tests/kafka/test_kafka_", "tests/kafka/test_mixed")),
    ("netns", ("tests/netns/",)),
)


# The longest single files (a minute or more beside other tests) start right after the lanes, so
# that none of them is the run's tail.
_EARLY = (
    "tests/integration/test_controller_cluster.py", "tests/bench/test_diskless_load.py",
    "tests/bench/test_controller_bench.py", "tests/bench/test_raft_bench.py",
    "tests/protocol/test_native.py", "tests/integration/test_crash.py",
    "tests/integration/test_broker_fencing_cluster.py", "tests/integration/test_raft_cluster.py",
)


def _lane(nodeid: str) -> str | None:
    """The lane of a test id (a prefix of a path, or of a whole test id), or None."""
    for name, prefixes in _LANES:
        if nodeid.startswith(prefixes):
            return name
    return None


def _scope(nodeid: str) -> str:
    return _lane(nodeid) or nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Put the lanes' tests first, then the longest files (xdist hands out scopes in
    collection order)."""
    rank = {name: i for i, (name, _) in enumerate(_LANES)}
    rank.update({path: len(_LANES) + i for i, path in enumerate(_EARLY)})
    last = len(rank)
    keyed = []
    for index, item in enumerate(items):
        path = item.nodeid.split("::", 1)[0]
        keyed.append((rank.get(_lane(item.nodeid) or path, last), index, item))
    items[:] = [item for _, _, item in sorted(keyed, key=lambda k: k[:2])]


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with our scopes: a lane, else the test's file."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return LaneScheduling(config, log)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    """SIGTERM (a killed CI job, a stopped xdist worker) unwinds like Ctrl-C: the ``finally``
    blocks of fixtures and tests kill the process groups they started (Kafka JVMs, our servers,
    namespaces)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
