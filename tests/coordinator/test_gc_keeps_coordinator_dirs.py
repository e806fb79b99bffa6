"""The metadata publisher's garbage collection of partition directories
(``kafka_rpc.broker.metadata_publisher``: a deleted topic id's directories, and at the reconcile
every directory whose id the image lacks) never removes a directory the Batch Coordinator keeps
its state in.

Real pieces: a QuorumController fed a harness cluster's records (as in
tests/broker/test_metadata_publisher.py), real partition directories, and a started coordinator
of each URL kind that keeps files in a log dir: a static ``raft://<log dir>?node_id=1`` replica
(its ``__diskless-metadata-0`` names a topic id of its own, which no image has) and one whose
topic id is the image's ``__diskless-metadata`` until a RemoveTopicRecord of it is committed;
a ``sqlite://`` URL whose database lies in a ``<name>-<n>`` directory with a
``partition.metadata``."""

from __future__ import annotations

import logging
import uuid

from kafka_rpc.broker.metadata_publisher import coordinator_paths
from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.storage import partition_metadata as pm
from tests.broker.test_metadata_publisher import (
    DISKLESS,
    Node,
    R,
    idle,
    partition_dir,
    publisher,
    reregister,
)
from tests.controller.harness import topic


async def _writes(c) -> None:
    req = CreateTopicAndPartitionsRequest(uuid.uuid4(), "w", 1)
    assert await c.create_topic_and_partitions([req]) == [0]


async def test_the_reconcile_keeps_a_static_raft_coordinator_s_directory(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "kafka_rpc.broker.metadata_publisher")
    data = tmp_path / "data"
    data.mkdir()
    coord = create_coordinator(f"raft://{data}?node_id=1&synchronous=OFF")
    await coord.start()
    node = Node()
    pub = publisher(coord, data, node)
    try:
        own = coord.directory
        assert own == data / "__diskless-metadata-0" and pm.read_topic_id(own) == coord.topic_id
        assert own.resolve() in coordinator_paths(coord)
        ghost = partition_dir(data, "ghost-0", uuid.uuid4())  # an id no image ever had
        pub.start(node.qc)
        node.c.create(topic("d", configs=DISKLESS))
        node.commit()
        await idle(pub)
        assert coord.topic_id not in node.qc.image.topics
        reregister(node.c, uuid.uuid4())  # caught up: the full reconcile
        node.commit()
        await idle(pub)
        assert pub.is_caught_up
        assert not ghost.exists()  # the collection runs
        assert own.is_dir() and (own / "coordinator.db").exists()
        # kept, and said so at DEBUG only: a coordinator's own directory is the normal case
        kept = [r for r in caplog.records if "__diskless-metadata-0 alone" in r.getMessage()]
        assert kept and all(r.levelno == logging.DEBUG for r in kept)
        await _writes(coord)  # the coordinator still works on its files
    finally:
        await pub.stop()
        await coord.close()


async def test_a_removed_diskless_metadata_topic_keeps_its_replica_s_directory(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    node = Node()
    node.c.create(topic("__diskless-metadata"))
    node.commit()
    meta_id = node.tid("__diskless-metadata")
    coord = create_coordinator(f"raft://{data}?node_id=1&topic_id={meta_id}&synchronous=OFF")
    await coord.start()
    pub = publisher(coord, data, node)
    try:
        pub.start(node.qc)
        await idle(pub)
        # the id leaves the image: our controller refuses to delete __diskless-metadata
        # (POLICY_VIOLATION), so the RemoveTopicRecord is one another controller wrote (a Kafka
        # controller of a mixed quorum knows no such rule)
        node.c.apply([R("RemoveTopicRecord")(topic_id=meta_id)])
        node.commit()
        await idle(pub)
        assert meta_id not in node.qc.image.topics
        assert coord.directory.is_dir() and (coord.directory / "coordinator.db").exists()
        await _writes(coord)
    finally:
        await pub.stop()
        await coord.close()


async def test_a_sqlite_coordinator_s_directory_is_kept(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    # a directory named like a partition, with a partition.metadata of an id no image has, that
    # the sqlite:// URL points into
    home = partition_dir(data, "coordinator-0", uuid.uuid4())
    coord = create_coordinator(f"sqlite://{home / 'coordinator.db'}")
    await coord.start()
    node = Node()
    pub = publisher(coord, data, node)
    try:
        pub.start(node.qc)
        node.c.create(topic("d", configs=DISKLESS))
        reregister(node.c, uuid.uuid4())
        node.commit()
        await idle(pub)
        assert pub.is_caught_up
        assert home.is_dir() and (home / "coordinator.db").exists()
        await _writes(coord)
    finally:
        await pub.stop()
        await coord.close()
