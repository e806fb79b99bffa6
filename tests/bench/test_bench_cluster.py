"""``kafka-rpc bench --cluster``'s launcher (``kafka_rpc.testbed.bench_cluster.run_load``) with a
stand-in for the Spark job: a small Python program that, like bench/diskless_load.py, writes
``load_started`` and then runs until the launcher's events show the restarted node (bounded).

* the coordinator leader is SIGKILLed after ``kill_at``, another node is named leader, the killed
  node restarts and comes up; the load's exit code is returned; no process is left running in the
  cluster's directory afterwards;
* SIGINT (Ctrl-C) to the launcher while the load runs: the launcher exits, and neither the load
  (its own process group) nor any node is left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_rpc.testbed.bench_cluster import EVENTS, LOAD_STARTED, read_events
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

#: argv: bootstrap, controllers, events file, out dir, pid file, seconds to wait at most
FAKE_LOAD = """
import os, sys, time
from pathlib import Path
bootstrap, controllers, events, out, pid_file, wait = sys.argv[1:7]
Path(pid_file).write_text(str(os.getpid()))
assert len(bootstrap.split(",")) == 3 and len(controllers.split(",")) == 3, (bootstrap, controllers)
Path(out, "load_started.tmp").write_text(f"{time.time()}\\n")
os.replace(Path(out, "load_started.tmp"), Path(out, "load_started"))
end = time.time() + float(wait)
while time.time() < end:
    p = Path(events)
    if p.exists() and '"event": "restarted"' in p.read_text():
        sys.exit(0)
    time.sleep(0.1)
sys.exit(7)
"""


def _running_in(root: Path) -> list[int]:
    """Pids of the live processes whose working directory is under ``root`` (the nodes run in
    their node directories)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cwd = os.readlink(d / "cwd")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == str(root) or cwd.startswith(str(root) + os.sep)):
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _launcher(tmp_path: Path, kill_at: str, wait_s: str) -> list[str]:
    """A Python command running ``run_load`` with :data:`FAKE_LOAD` (3 nodes)."""
    (tmp_path / "load.py").write_text(FAKE_LOAD)
    code = f"""
import os, sys
from pathlib import Path
from kafka_rpc.testbed.bench_cluster import run_load
out = Path({str(tmp_path / "out")!r})
cmd = lambda b, c, e: [sys.executable, {str(tmp_path / "load.py")!r}, b, c, e, str(out),
                       {str(tmp_path / "load.pid")!r}, {wait_s!r}]
sys.exit(run_load(cmd, dict(os.environ), out, n=3, kill_at={kill_at}, restart_after=1.0))
"""
    return [sys.executable, "-c", code]


def test_run_load_kills_restarts_and_cleans_up(tmp_path):
    proc = subprocess.run(_launcher(tmp_path, "0.5", "60"), capture_output=True, text=True,
                          timeout=150, cwd=REPO)  # fmt: skip
    out = tmp_path / "out"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "coordinator leader node" in proc.stdout
    ev = read_events(out / EVENTS)
    assert [e["event"] for e in ev] == ["kill", "new_leader", "restart", "restarted"], ev
    killed = ev[0]["node"]
    assert ev[1]["node"] not in (None, killed) and ev[3]["node"] == killed
    started = float((out / LOAD_STARTED).read_text())
    assert ev[0]["t"] >= started + 0.5  # not earlier than kill_at after the first commit
    assert ev[2]["t"] >= ev[0]["t"] + 1.0  # restart_after
    assert (out / "cluster" / f"node{killed}" / "stdout.2").exists()  # a second run
    assert not _alive(int((tmp_path / "load.pid").read_text()))
    assert _running_in(out / "cluster") == []


def test_ctrl_c_kills_the_load_and_every_node(tmp_path):
    out = tmp_path / "out"
    err = tmp_path / "launcher.stderr"  # a file: an unread pipe could block the launcher
    with err.open("w") as err_file:
        launcher = subprocess.Popen(_launcher(tmp_path, "None", "120"), stdout=subprocess.DEVNULL,
                                    stderr=err_file, text=True, cwd=REPO)  # fmt: skip
    try:
        wait_until(lambda: (out / LOAD_STARTED).exists() or launcher.poll() is not None,
                   "the load to start", timeout=180, interval=0.1)  # fmt: skip
        assert launcher.poll() is None, err.read_text()[-3000:]
        load_pid = int((tmp_path / "load.pid").read_text())
        assert _alive(load_pid) and len(_running_in(out / "cluster")) >= 3
        t0 = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        # a cap, not an expectation (6 s alone): the nodes are SIGKILLed and reaped
        launcher.wait(180)
        print(f"the launcher exited {time.monotonic() - t0:.1f} s after SIGINT")
        assert not _alive(load_pid)
        assert _running_in(out / "cluster") == []
        assert read_events(out / EVENTS) == []  # kill_at None: no kill
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        for pid in _running_in(out / "cluster"):  # a failed test leaves nothing behind
            os.kill(pid, signal.SIGKILL)
