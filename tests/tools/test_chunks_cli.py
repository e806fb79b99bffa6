"""``kafka-rpc chunks``: the KIP-1114 JSON files, exactly as the KIP prints them, and the usage
errors. The requests themselves run against a real server in tests/integration/test_chunks.py."""

import io

import pytest

from kafka_rpc.cli import build_parser
from kafka_rpc.tools.chunks import ChunkCommandError, parse_alter_file, parse_create_file, run

# the KIP's two examples, verbatim
KIP_CREATE = """{
"partitions": [{
"topic": "topic1",
"partition": 0,
"replicas": [1, 2, 3]
}, {
"topic": "topic2",
"partition": 2,
"replicas": [2, 9, 12]
}]
}"""
KIP_ALTER = """{
"chunks": [{
"topic": "topic1",
"partition": 0,
"startOffset": 289818,
"replicas": [4, 5, 6]
}, {
"topic": "topic1",
"partition": 0,
"startOffset": 27784,
"replicas": [1, 2, 3]
}]
}"""


def test_kip_example_files(tmp_path):
    c = tmp_path / "c.json"
    c.write_text(KIP_CREATE)
    assert parse_create_file(str(c)) == [("topic1", 0, (1, 2, 3)), ("topic2", 2, (2, 9, 12))]
    a = tmp_path / "a.json"
    a.write_text(KIP_ALTER)
    assert parse_alter_file(str(a)) == [
        ("topic1", 0, 289818, -1, (4, 5, 6)),
        ("topic1", 0, 27784, -1, (1, 2, 3)),
    ]


@pytest.mark.parametrize(
    "text, words",
    [
        ("{", "not valid JSON"),
        ("[]", '"partitions" list'),
        ('{"partitions": [1]}', "not an object"),
        ('{"partitions": [{"partition": 0, "replicas": []}]}', '"topic"'),
        ('{"partitions": [{"topic": "t", "partition": "0", "replicas": []}]}', '"partition"'),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [true]}]}', '"replicas"'),
        ('{"partitions": [{"topic": "t", "partition": 0}]}', '"replicas"'),
    ],
)
def test_malformed_create_files(tmp_path, text, words):
    f = tmp_path / "c.json"
    f.write_text(text)
    with pytest.raises(ChunkCommandError, match=words):
        parse_create_file(str(f))


def test_malformed_alter_file_and_missing_file(tmp_path):
    f = tmp_path / "a.json"
    f.write_text('{"chunks": [{"topic": "t", "partition": 0, "replicas": [1]}]}')
    with pytest.raises(ChunkCommandError, match='"startOffset"'):
        parse_alter_file(str(f))
    with pytest.raises(ChunkCommandError, match="cannot read"):
        parse_alter_file(str(tmp_path / "missing.json"))


async def test_usage_errors_and_unreadable_file_exit_1(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["chunks", "create", "--bootstrap-server", "127.0.0.1:1"])
    out, err = io.StringIO(), io.StringIO()
    assert await run(args, out=out, err=err) == 1 and "--create-chunk-json-file" in err.getvalue()
    args = parser.parse_args(["chunks", "alter", "--bootstrap-server", "127.0.0.1:1",
                              "--alter-chunk-json-file", str(tmp_path / "nope.json")])  # fmt: skip
    out = io.StringIO()
    assert await run(args, out=out, err=io.StringIO()) == 1
    assert out.getvalue().startswith("Error while executing chunk command : cannot read")
    with pytest.raises(SystemExit):
        parser.parse_args(["chunks", "move", "--bootstrap-server", "h:1"])
