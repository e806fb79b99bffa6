"""Codec throughput, side by side in one run: ours vs kio 0.6 (pure-Python writer, native Rust
reader) vs kafka-python 3 where it covers the message.

Method: every variant encodes/decodes the *same bytes* (checked before timing: kio's and
kafka-python's encodings must equal ours byte for byte, and each decoder must consume the whole
buffer). Variants are timed round-robin, ``--rounds`` rounds of ``--seconds`` each per variant,
and the median rate per variant is reported with the min-max spread. Ratios are ours divided by
kio in the same run, so machine noise affects both sides alike.

For our own new messages (CommitBatches, FindDisklessBatches, FindCoordinator v7) kio has no
class of its own, so kio runs on our generated per-version classes, which follow kio's entity
conventions (that is what its native reader is designed for).

"ours dec" is the decoder the server runs: the native ``_cdecode`` extension executing the
programs codegen emits (when built; see ``kafka_rpc.protocol.primitives.NATIVE_DECODER``). The
"pure-Python dec ratio" column times the generated Python readers (the fallback when no C
compiler was available at install) against the same kio run.

Usage: ``python bench/codec.py [--seconds 0.3] [--rounds 5] [--json out.json]``
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.serial import entity_reader, entity_writer

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.frames import parse_request_header, response_header_bytes


def _commit_batches():
    m = codec.module("CommitBatchesRequest")
    topics = []
    for t in range(5):
        parts = tuple(
            m.CommitBatchesTopicPartition(
                partition_index=p,
                object_key="wal/2026/11/21/broker-1/0000000000001234.obj",
                byte_offset=(t * 20 + p) * 16384,
                size=16384,
                base_offset=0,
                last_offset=99,
                batch_max_timestamp=1_763_700_000_000 + p,
                message_timestamp_type=0,
                producer_id=1000 + p,
                producer_epoch=0,
                base_sequence=p * 100,
                last_sequence=p * 100 + 99,
            )
            for p in range(20)
        )
        topics.append(m.CommitBatchesTopic(topic_id=uuid.UUID(int=t + 7), partitions=parts))
    return "CommitBatchesRequest", 0, m.CommitBatchesRequest(
        broker_id=1, batches=(m.Batches(topics=tuple(topics)),)
    )


def _find_diskless_batches():
    name = "FindDisklessBatchesResponse"
    m = codec.module(name)
    entries = tuple(
        m.FindDisklessBatchTopicPartitionResult(
            partition_index=i % 50,
            error_code=0,
            log_start_offset=0,
            high_watermark=100_000,
            object_key="wal/2026/11/21/broker-1/0000000000001234.obj",
            byte_offset=i * 16384,
            size=16384,
            base_offset=i * 100,
            last_offset=i * 100 + 99,
            batch_max_timestamp=1_763_700_000_000 + i,
            message_timestamp_type=0,
            producer_id=1000 + i,
            producer_epoch=3,
            base_sequence=0,
            last_sequence=99,
        )
        for i in range(100)
    )
    topic = m.FindDisklessBatchTopicResult(topic_id=uuid.UUID(int=9), partitions=entries)
    return name, 0, m.FindDisklessBatchesResponse(responses=(topic,))


def _metadata_v12():
    m = codec.module("MetadataResponse")
    brokers = tuple(
        m.MetadataResponseBroker(node_id=i, host=f"broker-{i}.kafka.local", port=9092, rack=None)
        for i in range(3)
    )
    topics = tuple(
        m.MetadataResponseTopic(
            error_code=0,
            name=f"topic-{t:04d}",
            topic_id=uuid.UUID(int=t + 1),
            is_internal=False,
            partitions=tuple(
                m.MetadataResponsePartition(
                    error_code=0,
                    partition_index=p,
                    leader_id=p % 3,
                    leader_epoch=5,
                    replica_nodes=(0, 1, 2),
                    isr_nodes=(0, 1, 2),
                    offline_replicas=(),
                )
                for p in range(10)
            ),
            topic_authorized_operations=-2147483648,
        )
        for t in range(100)
    )
    return "MetadataResponse", 12, m.MetadataResponse(
        throttle_time_ms=0, brokers=brokers, cluster_id="kafka-rpc-cluster", controller_id=1,
        topics=topics,
    )  # fmt: skip


def _find_coordinator_v7():
    m = codec.module("FindCoordinatorRequest")
    keys = tuple(f"write:{'AAAAAAAAAAAAAAAAAAAAA' + chr(65 + i)}:{i}" for i in range(10))
    return "FindCoordinatorRequest", 7, m.FindCoordinatorRequest(key_type=3, coordinator_keys=keys)


def _api_versions_v3():
    m = codec.module("ApiVersionsResponse")
    keys = tuple(m.ApiVersion(api_key=k, min_version=0, max_version=k % 13) for k in range(60))
    return "ApiVersionsResponse", 3, m.ApiVersionsResponse(error_code=0, api_keys=keys)


def _kio_class(name, version):
    from codegen.model import load_file
    from tests.protocol.test_roundtrip import _kio_class as find  # reuse the test's lookup

    spec = load_file(Path(__file__).resolve().parents[1] / "message_specs" / f"{name}.json")
    return find(spec, version) or codec.module(name).VERSION_CLASSES[version]


def _kafka_python(name, version):
    try:
        if name == "MetadataResponse":
            from kafka.protocol.metadata import MetadataResponse as C
        elif name == "ApiVersionsResponse":
            from kafka.protocol.metadata import ApiVersionsResponse as C
        else:
            return None
    except ImportError:
        return None
    return C


def _rate(fn, seconds):
    n = 0
    batch = 1
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(batch):
            fn()
        n += batch
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - t0)
        if batch < 4096:
            batch *= 2


def bench_case(label, name, version, msg, seconds, rounds):
    ours_w = codec.writer(name, version)
    ours_r = codec.reader(name, version)
    data = codec.encode(msg, version)
    kio_cls = _kio_class(name, version)
    kio_read = entity_reader(kio_cls)
    kio_msg, used = kio_read(data, 0)
    assert used == len(data)
    kio_write = entity_writer(kio_cls)
    out = io.BytesIO()
    kio_write(out, kio_msg)
    assert out.getvalue() == data, f"{label}: kio bytes differ"
    back, end = ours_r(data, 0)
    assert end == len(data) and back == msg
    py_r = codec.module(name).PY_READERS[version]  # the generated Python fallback
    assert py_r(data, 0) == (back, end)

    def ours_encode():
        w = bytearray()
        ours_w(msg, w)
        return bytes(w)

    def ours_decode():
        return ours_r(data, 0)

    def py_decode():
        return py_r(data, 0)

    def kio_encode():
        o = io.BytesIO()
        kio_write(o, kio_msg)
        return o.getvalue()

    def kio_decode():
        return kio_read(data, 0)

    variants = {
        "ours_enc": ours_encode,
        "ours_dec": ours_decode,
        "kio_enc": kio_encode,
        "kio_dec": kio_decode,
        "py_dec": py_decode,
    }
    kp = _kafka_python(name, version)
    if kp is not None:
        kp_obj = kp.decode(data, version=version)
        kp_bytes = kp_obj.encode()  # encode(version=) fails on decoded objects (pitfall)
        if kp_bytes == data:
            variants["kp3_enc"] = kp_obj.encode
            variants["kp3_dec"] = lambda: kp.decode(data, version=version)
    results = {k: [] for k in variants}
    for r in range(rounds):
        order = list(variants.items())
        order = order[r % len(order):] + order[: r % len(order)]
        for k, fn in order:
            results[k].append(_rate(fn, seconds))
    med = {k: statistics.median(v) for k, v in results.items()}
    spread = {k: (min(v), max(v)) for k, v in results.items()}
    return {"label": label, "bytes": len(data), "median": med, "spread": spread}


def bench_turn(seconds, rounds):
    """Codec time of one small request/response turn: frame header + AllocateProducerIds v0
    request decoded, response built and encoded with its header (no I/O)."""
    req_m = codec.module("AllocateProducerIdsRequest")
    resp_cls = codec.message_class("AllocateProducerIdsResponse")
    hdr = bytearray()
    header_cls = codec.message_class("RequestHeader")
    header = header_cls(request_api_key=67, request_api_version=0, correlation_id=7,
                        client_id="broker-1")  # fmt: skip
    codec.encode_into(header, 2, hdr)
    frame = bytes(hdr) + codec.encode(req_m.AllocateProducerIdsRequest(broker_id=1,
                                                                        broker_epoch=5), 0)
    read_req = codec.reader("AllocateProducerIdsRequest", 0)
    write_resp = codec.writer("AllocateProducerIdsResponse", 0)

    def turn():
        api_key, api_version, corr, _client, pos = parse_request_header(frame, 0)
        req, _ = read_req(frame, pos)
        resp = resp_cls(producer_id_start=req.broker_id * 1000, producer_id_len=1000)
        w = bytearray(response_header_bytes(api_key, api_version, corr))
        write_resp(resp, w)
        return w

    prebuilt = resp_cls(producer_id_start=1000, producer_id_len=1000)

    def codec_only():
        # The same turn without building the response object (handler work, not codec work).
        api_key, api_version, corr, _client, pos = parse_request_header(frame, 0)
        read_req(frame, pos)
        w = bytearray(response_header_bytes(api_key, api_version, corr))
        write_resp(prebuilt, w)
        return w

    total, codec_t = [], []
    for _ in range(rounds):
        total.append(_rate(turn, seconds))
        codec_t.append(_rate(codec_only, seconds))
    med, medc = statistics.median(total), statistics.median(codec_t)
    return {"turns_per_s": med, "us_per_turn": 1e6 / med, "codec_us_per_turn": 1e6 / medc}


CASES = [
    ("CommitBatches request, 100 batches", _commit_batches),
    ("FindDisklessBatches response, 100 batches", _find_diskless_batches),
    ("Metadata v12 response, 100 topics x 10 partitions", _metadata_v12),
    ("FindCoordinator v7 request, 10 keys", _find_coordinator_v7),
    ("ApiVersions v3 response, 60 keys", _api_versions_v3),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for label, make in CASES:
        name, version, msg = make()
        rows.append(bench_case(label, name, version, msg, args.seconds, args.rounds))
    turn = bench_turn(args.seconds, args.rounds)
    print(f"codec bench: median of {args.rounds} round-robin rounds x {args.seconds}s "
          "per variant\n")  # fmt: skip
    print("| message (bytes) | ours enc/s | kio enc/s | enc ratio | ours dec/s | kio dec/s |"
          " dec ratio | pure-Python dec ratio | kafka-python 3 enc / dec ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["median"]
        kp = ""
        if "kp3_enc" in m:
            kp = f"{m['ours_enc'] / m['kp3_enc']:.1f}x / {m['ours_dec'] / m['kp3_dec']:.2f}x"
        print(f"| {r['label']} ({r['bytes']}) | {m['ours_enc']:,.0f} | {m['kio_enc']:,.0f} | "
              f"{m['ours_enc'] / m['kio_enc']:.1f}x | {m['ours_dec']:,.0f} | {m['kio_dec']:,.0f} | "
              f"{m['ours_dec'] / m['kio_dec']:.2f}x | {m['py_dec'] / m['kio_dec']:.2f}x | "
              f"{kp or 'n/a'} |")  # fmt: skip
    print(f"\nsmall turn (request header + AllocateProducerIds v0 request decoded, response header "
          f"+ response encoded): codec time {turn['codec_us_per_turn']:.2f} us/turn; with the "
          f"response object built by the handler {turn['us_per_turn']:.2f} us/turn")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cases": rows, "turn": turn}, indent=2))
    return rows, turn


if __name__ == "__main__":
    main()
