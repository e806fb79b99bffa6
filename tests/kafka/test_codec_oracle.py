"""Apache Kafka's generated codec as the byte oracle of ours, for both pinned releases.

For every spec we share with Kafka (requests, responses, headers, metadata records and the Raft
control / quorum-state messages; our own APIs and records live at keys >= 10000, which Kafka
does not define) and every version both define, hypothesis draws full messages
(``tests/protocol/strategies.py``) and one oracle round trip checks each:

1. Kafka's generated class reads the bytes we encode, consuming every byte, and writes back the
   very same bytes;
2. Kafka's JSON converter's view of what it read equals ours (``kafka_rpc.protocol.json_view``)
   field by field;
3. Kafka builds the message from our JSON view (``<Name>JsonConverter.read``) and writes it; our
   decoder reads those bytes back to the message we started from;
4. metadata records also go through Kafka's ``MetadataRecordSerde`` framed as we frame them;
5. damaged encodings are accepted and rejected alike, and read alike
   (``test_malformed_bytes_are_read_as_kafka_reads_them``).

``KAFKA_RPC_ORACLE_EXAMPLES`` sets the examples per (spec, version) (default 5).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from codegen.model import load_dir
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.json_view import to_kafka_json
from tests.kafka import kafka_specs
from tests.protocol.strategies import message_strategy

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
#: our own API keys and record types start here (message_specs/README.md)
PRIVATE_BASE = 10000
EXAMPLES = int(os.environ.get("KAFKA_RPC_ORACLE_EXAMPLES", "5"))

SPECS = {s.name: s for s in load_dir(ROOT / "message_specs") if not s.removed}
SHARED = sorted(
    name
    for name, s in SPECS.items()
    if s.type in ("data", "header") or (s.api_key is not None and s.api_key < PRIVATE_BASE)
)
RELEASES = ("newest", "oldest")


def oracle_for(request, release: str):
    return request.getfixturevalue(f"kafka_oracle_{release}")


def kafka_class(spec) -> str:
    """The name of Kafka's generated class for ``spec``."""
    if spec.type in ("request", "response", "header"):
        return spec.name + "Data"
    return spec.name


def target(spec) -> dict:
    """How the oracle finds Kafka's class: by api key for APIs and metadata records (as Kafka's
    ApiMessageType / MetadataRecordType do), by class name otherwise."""
    if spec.type in ("request", "response", "metadata"):
        return {"kind": spec.type, "key": spec.api_key}
    return {"kind": "data", "name": kafka_class(spec)}


def json_diff(ours, theirs, path: str = "$") -> list[str]:
    """Every path where two JSON trees differ (keys missing on either side included)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = []
        for k in sorted(set(ours) | set(theirs)):
            if k not in theirs:
                out.append(f"{path}.{k}: ours={ours[k]!r}, Kafka writes no such field")
            elif k not in ours:
                out.append(f"{path}.{k}: Kafka={theirs[k]!r}, our view has no such field")
            else:
                out += json_diff(ours[k], theirs[k], f"{path}.{k}")
        return out
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} elements in ours, {len(theirs)} in Kafka's"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs))
                for d in json_diff(a, b, f"{path}[{i}]")]  # fmt: skip
    if ours != theirs or type(ours) is not type(theirs) and not (
        isinstance(ours, (int, float)) and isinstance(theirs, (int, float))
        and not isinstance(ours, bool) and not isinstance(theirs, bool)
    ):  # fmt: skip
        return [f"{path}: ours={ours!r} Kafka={theirs!r}"]
    return []


def first_difference(a: bytes, b: bytes) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"first difference at byte {n} (ours {len(a)} bytes, Kafka's {len(b)}): "
            f"ours ...{a[n:n + 16].hex()} Kafka ...{b[n:n + 16].hex()}")  # fmt: skip


def check_against_kafka(oracle, spec, version: int, msg, *, defaults: bool = False) -> None:
    """One oracle round trip: checks 1-4 of the module docstring for ``msg`` at ``version``;
    with ``defaults`` (``msg`` must then be our all-defaults message) also that Kafka's
    default-constructed message is the same bytes (the spec defaults agree)."""
    ours = codec.encode(msg, version)
    req = {"op": "check", "version": version, "hex": ours.hex(), "default": defaults,
           "json": to_kafka_json(msg, version, records="base64"), **target(spec)}  # fmt: skip
    if spec.type == "metadata":
        req["frame"] = codec.encode_record(msg, version).hex()
    answer = oracle.ok(req)
    where = f"{spec.name} v{version} (Kafka {oracle.version})"
    if defaults:
        kafka_default = answer["default"]
        assert kafka_default["ok"], f"{where}: {kafka_default['error']}"
        theirs = bytes.fromhex(kafka_default["hex"])
        diffs = json_diff(to_kafka_json(msg, version), kafka_default["json"])
        assert theirs == ours and not diffs, (
            f"{where}: Kafka's defaults differ from ours: {first_difference(ours, theirs)}\n  "
            + "\n  ".join(diffs)
        )
    read = answer["read"]
    assert read["ok"], f"{where}: Kafka cannot read our bytes {ours.hex()}: {read['error']}"
    assert read["name"] == kafka_class(spec), f"{where}: Kafka's class is {read['name']}"
    kafka = bytes.fromhex(read["hex"])
    assert kafka == ours, f"{where}: Kafka writes back other bytes: {first_difference(ours, kafka)}"
    diffs = json_diff(to_kafka_json(msg, version), read["json"])
    assert not diffs, f"{where}: JSON views differ:\n  " + "\n  ".join(diffs)
    written = answer["write"]
    assert written["ok"], f"{where}: Kafka cannot build it from our JSON: {written['error']}"
    data = bytes.fromhex(written["hex"])
    back, end = codec.decode_from(spec.name, version, data)
    assert end == len(data), f"{where}: {len(data) - end} byte(s) of Kafka's left undecoded"
    assert back == msg, f"{where}: Kafka-written bytes decode to another message"
    if spec.type == "metadata":
        frame = answer["frame"]
        assert frame["ok"], f"{where}: MetadataRecordSerde rejects our frame: {frame['error']}"
        assert (frame["key"], frame["version"]) == (spec.api_key, version)
        assert frame["hex"] == req["frame"], f"{where}: Kafka frames it differently"


def shared_versions(spec, release_version: str) -> list[int]:
    """Versions of ``spec`` both we and Kafka ``release_version`` define. Fails when Kafka has
    no spec of that name or gives it another api key: a number below PRIVATE_BASE is Kafka's."""
    theirs = kafka_specs.jar_specs(release_version).get(spec.name)
    assert theirs is not None, (
        f"{spec.name} (key {spec.api_key}) is not in Kafka {release_version}: our own messages "
        f"take keys from {PRIVATE_BASE} on (message_specs/README.md)"
    )
    assert theirs.get("apiKey") == spec.api_key, (
        f"{spec.name}: our key {spec.api_key}, Kafka {release_version}'s {theirs.get('apiKey')}"
    )
    rng = kafka_specs.version_range(theirs.get("validVersions"))
    if rng is None:
        return []
    return [v for v in spec.valid_versions if rng[0] <= v <= rng[1]]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", SHARED)
def test_codec_agrees_with_kafka(request, release, name):
    oracle = oracle_for(request, release)
    spec = SPECS[name]
    versions = shared_versions(spec, oracle.version)
    if not versions:
        pytest.skip(f"Kafka {oracle.version} defines no version of {name} (removed upstream)")
    mod = codec.module(name)
    for version in versions:
        run_examples(oracle, spec, version, mod)
        # the all-defaults message too (hypothesis need not draw it), against Kafka's defaults
        check_against_kafka(oracle, spec, version, mod.MESSAGE(), defaults=True)


def run_examples(oracle, spec, version: int, mod) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)  # fmt: skip
    @given(message_strategy(spec, version, mod))
    def check(msg):
        check_against_kafka(oracle, spec, version, msg)

    check()


def test_every_shared_spec_is_kafkas_under_its_number(kafka_newest):
    """The keys below PRIVATE_BASE name Kafka's messages; every spec of ours above it is ours
    alone (Kafka defines no message of that name)."""
    theirs = kafka_specs.jar_specs(kafka_newest)
    for name, spec in SPECS.items():
        if name in SHARED:
            continue
        assert spec.api_key >= PRIVATE_BASE, name
        assert name not in theirs, f"{name} is Kafka's: compare it, keep Kafka's key"


# ------------------------------------------------------------------------- malformed input

#: our decoder refuses invalid UTF-8 where Kafka's substitutes U+FFFD (message_specs/README.md,
#: "Kafka's codec as the oracle")
_UTF8_REFUSED = "is not valid UTF-8"


def mutations(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    """``n`` copies of ``data`` with 1-3 bytes replaced, some of them cut short."""
    out = []
    for _ in range(n):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.3:
            b = b[: rng.randrange(len(b))]
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("name", SHARED)
def test_malformed_bytes_are_read_as_kafka_reads_them(request, name):
    """Damaged encodings (bytes replaced, tails cut): Kafka's class and our decoder accept the
    same ones and read them to the same message (what Kafka writes back decodes, with ours, to
    what we read), and reject the rest; at the newest shared version, against the newest
    release."""
    oracle = oracle_for(request, "newest")
    spec = SPECS[name]
    versions = shared_versions(spec, oracle.version)
    if not versions:
        pytest.skip(f"Kafka {oracle.version} defines no version of {name}")
    version = versions[-1]
    rng = random.Random(name)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)  # fmt: skip
    @given(message_strategy(spec, version, codec.module(name)))
    def check(msg):
        data = codec.encode(msg, version)
        if not data:
            return
        damaged = mutations(data, rng, 8)
        answers = oracle.many([{"op": "read", "version": version, "hex": d.hex(), **target(spec)}
                               for d in damaged])  # fmt: skip
        for d, answer in zip(damaged, answers):
            try:
                ours, end = codec.decode_from(name, version, d)
                error = None if end == len(d) else f"{len(d) - end} trailing byte(s)"
            except DecodeError as exc:
                error = str(exc)
            where = f"{name} v{version} bytes {d.hex()}"
            if not answer["ok"]:
                assert error is not None, f"{where}: we read what Kafka rejects: {answer['error']}"
            elif error is not None:
                kafka_bytes = bytes.fromhex(answer["hex"])
                assert _UTF8_REFUSED in error and b"\xef\xbf\xbd" in kafka_bytes, (
                    f"{where}: Kafka reads it, we do not: {error}"
                )
            else:
                theirs = codec.decode(name, version, bytes.fromhex(answer["hex"]))
                assert theirs == ours, f"{where}: Kafka reads another message than we do"

    check()
