"""DescribeLogDirs (key 35): the log directories of this broker and the partition replicas each
one holds on disk (``kafka-log-dirs --describe``; ``kafka-reassign-partitions`` asks it for the
current replicas' directories before it moves partitions, and again in ``--verify``).

API: v1-5 on the broker listener (Kafka 4.4's range; Kafka 4.0 removed v0).
Behavior: as Kafka's ``KafkaApis.handleDescribeLogDirsRequest`` and ``ReplicaManager.
describeLogDirs``: one result per directory of ``log.dirs`` (duplicates once, in the configured
order), LogDir its absolute path, ErrorCode 0, from v4 TotalBytes and UsableBytes the size of its
volume and the bytes a non-root user may still write there (``shutil.disk_usage`` total / free,
Kafka's ``FileStore.getTotalSpace`` / ``getUsableSpace``; -1 below v4, where the fields do not
exist), IsCordoned false (v5; this node cordons no directory). Its Topics are the partition
replicas found in that directory whose (topic, partition) the request names (Topics null: all
of them), topics without such a partition left out:

- a kafka-rpc broker holds no classic partition data (diskless topics live in the Batch
  Coordinator; other topics' replicas are placed by the controller but nothing is written), so
  the only replicas on disk are the ``__diskless-metadata-<p>`` directories of the Raft groups of
  the topic-based Batch Coordinator: PartitionSize the bytes of their log segment files
  (``%020d.log``, as Kafka's ``UnifiedLog.size``; snapshots and checkpoints not counted),
  OffsetLag 0 (a Raft replica has no future log to lag behind, and Kafka measures a current
  log's lag against its own high watermark, which a follower reaches only by fetching), IsFutureKey
  false;
- a partition this broker holds nothing of is left out, as Kafka does for a partition not in its
  ``LogManager`` (the admin client then reports no current directory for that replica, and
  ``kafka-reassign-partitions`` writes ``"any"``); the metadata log (``__cluster_metadata-0``)
  is not a partition of the log directories in Kafka either (its ``KafkaRaftManager`` owns it)
  and is left out too. Directories of ``__diskless-metadata`` partitions kept outside
  ``log.dirs`` (a ``raft://`` coordinator URL naming another directory) are not reported.

Authorization (``API_RULES``): DESCRIBE on the cluster; without it the answer is
CLUSTER_AUTHORIZATION_FAILED with no results (the top-level ErrorCode exists from v3; v1-2
answers just the empty results, as Kafka).
Errors: KAFKA_STORAGE_ERROR (56) for a directory that cannot be read (Kafka's offline log dir),
with no topics and the sizes -1.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from kafka_rpc.api.registry import handles
from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = ["describe_log_dirs", "log_dir_results"]

log = logging.getLogger("kafka_rpc.handlers.log_dirs")

_m = codec.module("DescribeLogDirsResponse")
_PARTITION_DIR = re.compile(re.escape(DISKLESS_METADATA_TOPIC_NAME) + r"-(0|[1-9][0-9]{0,9})")
_SEGMENT = re.compile(r"[0-9]{20}\.log")


def _segments_bytes(directory: Path) -> int:
    """Bytes of the log segment files (``%020d.log``) directly in ``directory``."""
    total = 0
    with os.scandir(directory) as it:
        for entry in it:
            if _SEGMENT.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _replicas(log_dir: Path, wanted: set[tuple[str, int]] | None) -> list:
    """The ``DescribeLogDirsTopic`` entries of the ``__diskless-metadata-<p>`` directories in
    ``log_dir`` that ``wanted`` names (None: all), partitions by index."""
    parts = []
    with os.scandir(log_dir) as it:
        for entry in it:
            m = _PARTITION_DIR.fullmatch(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            index = int(m.group(1))
            if index > 0x7FFFFFFF:
                continue
            if wanted is not None and (DISKLESS_METADATA_TOPIC_NAME, index) not in wanted:
                continue
            parts.append(_m.DescribeLogDirsPartition(
                partition_index=index, partition_size=_segments_bytes(Path(entry.path)),
                offset_lag=0, is_future_key=False,
            ))  # fmt: skip
    if not parts:
        return []
    parts.sort(key=lambda p: p.partition_index)
    return [_m.DescribeLogDirsTopic(name=DISKLESS_METADATA_TOPIC_NAME, partitions=tuple(parts))]


def log_dir_results(log_dirs, wanted: set[tuple[str, int]] | None, version: int) -> tuple:
    """The ``DescribeLogDirsResult`` of each directory of ``log_dirs`` (module docstring) for
    the (topic, partition) pairs ``wanted`` (None: every partition) at ``version``."""
    out = []
    seen: set[str] = set()
    for d in log_dirs:
        path = os.path.abspath(d)
        if path in seen:
            continue
        seen.add(path)
        try:
            topics = _replicas(Path(path), wanted)
            total = usable = -1
            if version >= 4:
                usage = shutil.disk_usage(path)
                total, usable = usage.total, usage.free
        except OSError as e:
            log.warning("cannot describe log directory %s: %s", path, e)
            out.append(_m.DescribeLogDirsResult(
                error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=path,
            ))  # fmt: skip
            continue
        out.append(_m.DescribeLogDirsResult(
            error_code=0, log_dir=path, topics=tuple(topics),
            total_bytes=total, usable_bytes=usable, is_cordoned=False,
        ))  # fmt: skip
    return tuple(out)


@handles("DescribeLogDirsRequest")
def describe_log_dirs(ctx, request):
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    return _m.DescribeLogDirsResponse(
        error_code=0,
        results=log_dir_results(ctx.services.config.log_dirs, wanted, ctx.api_version),
    )
