"""Apache Kafka's generated codec as a byte oracle: one JVM per release per test session.

``tests/kafka/oracle/Oracle.java`` is compiled with ``javac`` against a release's jars into the
cache (``<cache>/<version>/oracle-<hash>``, keyed by the source's hash and the release, so it
compiles once) and runs as one long-lived process speaking JSON lines over stdin/stdout (the
protocol is described at the top of the Java file). :class:`KafkaOracle` sends one request per
line and waits for its answer with a deadline: a JVM that hangs or dies fails the calling test
with the tail of its stderr, never hangs the suite. The process runs in a session of its own and
is killed (process group) at teardown and at interpreter exit (``peer``'s registry).

Usage (the session fixtures ``kafka_oracle_newest`` / ``kafka_oracle_oldest`` do this)::

    with KafkaOracle.start(peer.NEWEST) as oracle:
        answer = oracle.call({"op": "read", "kind": "request", "key": 18, "version": 3,
                              "hex": data.hex()})
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.kafka import peer

SOURCE = Path(__file__).resolve().parent / "oracle" / "Oracle.java"
# Kafka 4.4 moved the record classes into an ``internal`` package.
_NEW_RECORDS = "org.apache.kafka.common.record.internal."
_OLD_RECORDS = "org.apache.kafka.common.record."
JVM_OPTS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss4m")


class OracleError(AssertionError):
    """The oracle JVM failed to start, hung, died or answered garbage (message: its stderr)."""


def _source_for(version: str) -> str:
    text = SOURCE.read_text()
    if f"{_NEW_RECORDS}MemoryRecords" not in peer._classes(version):
        text = text.replace(_NEW_RECORDS, _OLD_RECORDS)
    return text


def compile_oracle(version: str) -> Path:
    """The directory holding ``Oracle.class`` for ``version``, compiled on first use (javac,
    bounded to 300 s). Raises :class:`peer.KafkaUnavailable` without a JDK or the release, and
    :class:`OracleError` when javac fails (with its output)."""
    text = _source_for(version)
    digest = hashlib.sha256(f"{version}\n{text}".encode()).hexdigest()[:16]
    root = peer.cache_root() / version
    out = root / f"oracle-{digest}"
    if (out / "Oracle.class").exists():
        return out
    javac = peer.javac_binary()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="oracle-build-", dir=root))
    try:
        (staging / "Oracle.java").write_text(text)
        proc = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-cp", peer.classpath(version),
             "-d", str(staging), str(staging / "Oracle.java")],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise OracleError(f"javac Oracle.java for Kafka {version} failed:\n"
                              f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")  # fmt: skip
        try:
            staging.rename(out)
        except OSError:  # a concurrent session compiled it first
            if not (out / "Oracle.class").exists():
                raise
        return out
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class KafkaOracle(peer.ManagedProcess):
    """The oracle JVM of one Kafka release. :meth:`call` sends one request and returns the
    answer (a dict); :meth:`ok` also requires ``"ok": true``."""

    def __init__(self, version: str, workdir: Path, *, timeout: float = 60.0) -> None:
        self.version = version
        self.name = f"kafka-oracle-{version}"
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.stderr"
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self._buf = b""
        self.calls = 0

    @classmethod
    def start_for(cls, version: str, workdir: Path | None = None) -> KafkaOracle:
        """Compile if needed, start, and wait for the JVM's ready line (bounded)."""
        workdir = Path(workdir or tempfile.mkdtemp(prefix="kafka-oracle-"))
        oracle = cls(version, workdir)
        oracle.start()
        return oracle

    def start(self) -> KafkaOracle:
        classes = compile_oracle(self.version)
        cmd = [peer.java_binary(), *JVM_OPTS, "-cp",
               f"{classes}{os.pathsep}{peer.classpath(self.version)}", "Oracle"]  # fmt: skip
        err = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                cwd=self.workdir, start_new_session=True,
            )  # fmt: skip
        finally:
            err.close()
        peer._LIVE.add(self)
        try:
            hello = self._read_line(self.timeout)
        except BaseException:
            self.kill()
            raise
        if not hello.get("ready"):
            self.kill()
            raise OracleError(f"{self.name}: unexpected first line {hello!r}\n{self.tail()}")
        return self

    def _fail(self, why: str) -> OracleError:
        self.kill()
        return OracleError(f"{self.name}: {why}\n----- stderr tail -----\n{self.tail(40)}")

    def _read_line(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"no answer within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._fail(f"exited ({self.proc.poll()}) without answering")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            raise self._fail(f"answered a line that is not JSON: {line[:200]!r}") from None

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send ``request`` (one JSON line) and return the answer, within ``timeout`` seconds
        (default: the oracle's). Raises :class:`OracleError` if the JVM hangs or dies."""
        if not self.alive():
            raise self._fail("is not running")
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request, separators=(",", ":")).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._fail(f"stdin closed ({exc})") from None
        self.calls += 1
        return self._read_line(timeout or self.timeout)

    def ok(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """:meth:`call`, asserting the answer has ``"ok": true``."""
        answer = self.call(request, timeout)
        if not answer.get("ok"):
            raise AssertionError(f"Kafka {self.version} refused {request.get('op')}: "
                                 f"{answer.get('error')}")  # fmt: skip
        return answer

    def many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several requests in one line (one JVM round trip); their answers in order."""
        return self.ok({"op": "many", "requests": requests})["results"]

    def kill(self) -> None:
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        super().kill()
