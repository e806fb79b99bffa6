"""``kafka-rpc metadata-quorum describe (--status | --replication)``: Kafka's
``kafka-metadata-quorum.sh``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.tools import secured


def _quorum_status_lines(cluster_id: str, p, nodes) -> list[str]:
    """Kafka's ``kafka-metadata-quorum describe --status`` lines for DescribeQuorum partition
    data ``p`` (MaxFollowerLag = high watermark - the smallest voter log end offset, and its
    time lag from the leader's last caught-up time, as ``MetadataQuorumCommand``)."""
    import json

    endpoints = {n.node_id: [f"{li.name}://{li.host}:{li.port}" for li in n.listeners]
                 for n in nodes}  # fmt: skip

    def replicas(states, with_endpoints: bool) -> str:
        out = []
        for r in states:
            d = {"id": r.replica_id, "directoryId": uuid_text(r.replica_directory_id)}
            if with_endpoints and r.replica_id in endpoints:
                d["endpoints"] = endpoints[r.replica_id]
            out.append(json.dumps(d))
        return "[" + ", ".join(out) + "]"

    leader = next((r for r in p.current_voters if r.replica_id == p.leader_id), None)
    laggard = min(p.current_voters, key=lambda r: r.log_end_offset, default=None)
    lag = p.high_watermark - laggard.log_end_offset if laggard is not None else 0
    if laggard is None or laggard is leader:
        lag_ms = 0
    elif leader is not None and leader.last_caught_up_timestamp >= 0 <= (
        laggard.last_caught_up_timestamp
    ):
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    rows = [
        ("ClusterId:", cluster_id),
        ("LeaderId:", p.leader_id),
        ("LeaderEpoch:", p.leader_epoch),
        ("HighWatermark:", p.high_watermark),
        ("MaxFollowerLag:", lag),
        ("MaxFollowerLagTimeMs:", lag_ms),
        ("CurrentVoters:", replicas(p.current_voters, True)),
        ("CurrentObservers:", replicas(p.observers, False)),
    ]
    return [f"{k:<24}{v}" for k, v in rows]


def _quorum_replication_lines(p) -> list[str]:
    """Kafka's ``describe --replication`` table (Lag = high watermark - log end offset)."""
    header = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status")  # fmt: skip
    rows = [header]
    for states, kind in ((p.current_voters, "Follower"), (p.observers, "Observer")):
        for r in states:
            status = "Leader" if r.replica_id == p.leader_id else kind
            lag = max(0, p.high_watermark - r.log_end_offset)
            rows.append((str(r.replica_id), uuid_text(r.replica_directory_id),
                         str(r.log_end_offset), str(lag), str(r.last_fetch_timestamp),
                         str(r.last_caught_up_timestamp), status))  # fmt: skip
    leader_first = rows[:1] + sorted(rows[1:], key=lambda r: r[6] != "Leader")
    widths = [max(len(r[i]) for r in leader_first) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in leader_first]  # fmt: skip


def _cmd_metadata_quorum(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-metadata-quorum.sh describe --status | --replication``: one
    DescribeQuorum for ``__cluster_metadata-0``. The cluster id comes from DescribeCluster, as
    Kafka's tool gets it from ``Admin.describeCluster`` (EndpointType 2 on a controller listener,
    1 on a broker listener); ``unknown`` when the endpoint answers neither it nor Metadata."""
    from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
    from kafka_rpc.protocol import codec
    from kafka_rpc.protocol.errors import ErrorCode, KafkaError
    from kafka_rpc.raft.api import METADATA_TOPIC_NAME

    mod = codec.module("DescribeQuorumRequest")
    topic = mod.TopicData(topic_name=METADATA_TOPIC_NAME,
                          partitions=(mod.PartitionData(partition_index=0),))  # fmt: skip
    req = mod.DescribeQuorumRequest(topics=(topic,))

    async def ask(address: str) -> tuple[Any, str]:
        client = await secured(KafkaRpcClient.connect, args)(
            address, client_id="kafka-rpc-metadata-quorum",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        try:
            resp = await client.request(req)
            cluster_id = None
            if 60 in client.versions:  # DescribeCluster
                dc = await client.request(codec.message_class("DescribeClusterRequest")(
                    endpoint_type=2 if args.bootstrap_controller else 1))  # fmt: skip
                cluster_id = dc.cluster_id if not dc.error_code else None
            if cluster_id is None and 3 in client.versions:
                md = await client.request(codec.message_class("MetadataRequest")(topics=()))
                cluster_id = md.cluster_id
            return resp, cluster_id or "unknown"
        finally:
            await client.close()

    async def run() -> int:
        # Kafka's admin client sends DescribeQuorum to the active controller: a controller
        # that is not the leader names it (and, from v2, every voter's endpoints), so follow.
        address = args.bootstrap_controller or args.bootstrap_server
        for _hop in range(3):
            try:
                resp, cluster_id = await ask(address)
            except (KafkaError, KafkaConnectionError, TimeoutError, OSError, ValueError) as e:
                print(f"kafka-rpc: DescribeQuorum failed: {e}", file=sys.stderr)
                return 1
            code = resp.error_code
            p = resp.topics[0].partitions[0] if resp.topics and resp.topics[0].partitions else None
            if not code and p is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not code:
                assert p is not None  # without it, code is UNKNOWN_TOPIC_OR_PARTITION
                code = p.error_code
            leader = next((n for n in resp.nodes if p is not None and n.node_id == p.leader_id
                           and n.listeners), None)  # fmt: skip
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and leader is not None:
                address = f"{leader.listeners[0].host}:{leader.listeners[0].port}"
                continue
            break
        if code:
            name = ErrorCode.for_code(code).name
            hint = f" (leader: {p.leader_id}, epoch {p.leader_epoch})" if p is not None else ""
            print(f"kafka-rpc: DescribeQuorum failed: {name}{hint}", file=sys.stderr)
            return 1
        if args.status:
            lines = _quorum_status_lines(cluster_id, p, resp.nodes)
        else:
            lines = _quorum_replication_lines(p)
        print("\n".join(lines))
        return 0

    return asyncio.run(run())
