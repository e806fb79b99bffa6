"""`kafka-rpc serve` and `kafka-rpc api-versions` as subprocesses."""

import os
import re
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.integration

TIMEOUT = 15
START_TIMEOUT = 60  # s, to "cluster id": a node alone starts its coordinator first


class ServeProcess:
    """`kafka-rpc serve` on ephemeral ports; waits on its printed lines, never sleeps."""

    def __init__(self, tmp_path, *extra, default_data_dir=False):
        args = [
            sys.executable,
            "-m",
            "kafka_rpc.cli",
            "serve",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            *([] if default_data_dir else ["--override", f"log.dirs={tmp_path / 'data'}"]),
            *extra,
        ]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ), cwd=tmp_path,
        )  # fmt: skip
        self.lines = []
        self.ports = {}
        done = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.match(r"listening (\w+) \((\w+)\) on ([\d.]+):(\d+)", line)
                if m:
                    self.ports[m.group(1)] = int(m.group(4))
                if line.startswith("cluster id"):
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(START_TIMEOUT) or "PLAINTEXT" not in self.ports:
            self.stop()
            raise AssertionError(f"server did not start: {self.lines} {self.proc.stderr.read()}")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(TIMEOUT)


def test_serve_then_api_versions(tmp_path):
    srv = ServeProcess(tmp_path)
    try:
        assert any(line.startswith("data directory") for line in srv.lines)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "kafka_rpc.cli",
                "api-versions",
                "--bootstrap-server",
                srv.bootstrap,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        ).stdout
        assert "ApiVersions(18): 0 to 4 [usable: 4]" in out
        assert "FindCoordinator(10): 0 to 7 [usable: 7]" in out
        assert "Metadata(3): 0 to 14 [usable: 14]" in out
    finally:
        assert srv.stop() == 0  # SIGTERM is a graceful, clean exit
    # the cluster id is persisted in meta.properties and reused
    meta = (tmp_path / "data" / "meta.properties").read_text()
    cid = re.search(r"cluster.id=(\S+)", meta).group(1)
    srv2 = ServeProcess(tmp_path)
    srv2.stop()
    assert any(cid in line for line in srv2.lines)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--override", "no.such.key=1"], "no.such.key"),
        (["--override", "node.id=abc"], "node.id"),
        (["--override", "listeners=nonsense"], "listeners"),
    ],
)
def test_bad_config_exits_2(args, needle):
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 2
    assert needle in r.stderr


def test_bad_config_file_exits_2(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text("# comment\n! also\nnode.id: 2\nsocket.request.max.bytes=lots\n")
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 2
    assert "socket.request.max.bytes" in r.stderr


def test_serve_on_the_default_relative_data_dir(tmp_path):
    # The README's first command: no log.dirs, so ./data relative to the working directory
    # holds meta.properties and the topic-based coordinator's partition (regression: the
    # coordinator URL used to turn ./data into /data); a node alone is ready once it runs.
    srv = ServeProcess(tmp_path, default_data_dir=True)
    try:
        assert f"data directory {tmp_path / 'data'}\n" in srv.lines
        assert (tmp_path / "data" / "__diskless-metadata-0" / "coordinator.db").exists()
        assert not (tmp_path / "data" / "coordinator.db").exists()
        assert (tmp_path / "data" / "meta.properties").exists()
    finally:
        assert srv.stop() == 0
