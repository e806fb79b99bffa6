"""No tracked file refers to a file outside the repository.

A comment, docstring or page that says where a rule comes from must name something a reader of
this repository can open: a page of docs/, message_specs/README.md, a Kafka class or method, or a
KIP. So no tracked text file may mention ``DESIGN.md`` (or "DESIGN section N"), a ``../shared``
path, the notes under ``reference/`` or ``seeds/``, or any ``*.md`` name that is not a tracked
Markdown file. Exempt: the generated ``kafka_rpc/protocol/messages/`` (fix the spec's ``about``
text in message_specs/ instead and regenerate) and the reader of Apache Kafka's spec corpus, which
takes ``../shared/kafka-specs`` as optional test data.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: files that may name ``../shared/kafka-specs``: they read it as test data, skipping without it
KAFKA_SPECS_READERS = frozenset({"tests/protocol/test_corpus_codegen.py"})

FORBIDDEN = [
    (re.compile(r"\bDESIGN(\.md\b|\s+sections?\b)"), "the design notes outside the repository"),
    (re.compile(r"\.\./shared|\bshared/(reference|seeds|kafka-specs)\b"), "a path outside it"),
    (re.compile(r"(?<![\w/.-])(reference|seeds)/[\w.-]+"), "the notes outside the repository"),
    (re.compile(r"§\s*\d|\bseed 00\d\b"), "a section or file of the notes outside the repository"),
]
KAFKA_SPECS = re.compile(r"\.\./shared/kafka-specs\b|\bshared/kafka-specs\b")
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\.?/)*[\w./-]*[\w-]\.md)\b")


@functools.cache
def _tracked_text_files() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    files = {}
    for raw in names:
        name = raw.decode()
        if not name or name == SELF or name.startswith("kafka_rpc/protocol/messages/"):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            files[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return files


def _problems(name: str, text: str, markdown: frozenset[str]) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        checked = KAFKA_SPECS.sub("", line) if name in KAFKA_SPECS_READERS else line
        for pattern, what in FORBIDDEN:
            for match in pattern.finditer(checked):
                found.append(f"{name}:{number}: {match.group(0)!r} names {what}")
        for match in MD_NAME.finditer(checked):
            target = re.sub(r"^(\.\.?/)+", "", match.group(1))
            if not any(md == target or md.endswith("/" + target) for md in markdown):
                found.append(f"{name}:{number}: {match.group(1)!r} is no tracked Markdown file")
    return found


def test_no_file_refers_outside_the_repository():
    files = _tracked_text_files()
    markdown = frozenset(name for name in files if name.endswith(".md"))
    problems = []
    for name, text in sorted(files.items()):
        problems += _problems(name, text, markdown)
    assert not problems, "\n".join(problems)


def test_the_checks_catch_each_kind():
    markdown = frozenset({"docs/features.md", "message_specs/README.md"})
    for line in [
        "(DESIGN.md section 9)",
        "(DESIGN section 11, Placement)",
        "``reference/kraft.md`` 1.4",
        "(`shared/reference/kafka-protocol.md` A.12)",
        "the seed KIPs (`../../shared/seeds/`)",
        "reference ``kafka-protocol.md`` section B",
        "kraft.md 1.9",
        "(``QuorumController`` §2.5)",
        "(KIP-1114, seed 001)",
    ]:
        assert _problems("x.py", line, markdown), line
    for line in [
        "docs/features.md, 'Registration'",
        "see [features](features.md) and ../message_specs/README.md",
        "Kafka's ``KafkaRaftClient.handleFetchRequest``",
        "the seed's key 94",
    ]:
        assert not _problems("x.py", line, markdown), line
    assert _problems("x.py", "../shared/kafka-specs", markdown)
    assert not _problems(next(iter(KAFKA_SPECS_READERS)), "../shared/kafka-specs", markdown)
