"""A test bed of hosts on one machine: one Linux network namespace per host, and real network
faults between them (``docs/network-faults.md``).

Topology (:class:`NetBed`): a bridge in a namespace of its own (``<tag>-br``, so nothing touches
the machine's own network), and one namespace per host, each joined to the bridge by a veth pair:
node ``i`` is ``<tag>-n<i>`` at ``10.77.0.<i>/24``, the client is ``<tag>-c`` at
``10.77.0.100``. ``<tag>`` is :data:`PREFIX` + this process's pid, so a crashed earlier run
cannot collide with this one; :func:`cleanup_stale` removes the namespaces of runs whose process
is gone (and ends what still runs in them).

Faults, with Debian's tools (every one recorded in :attr:`NetBed.events` with its monotonic time):

* **drops** (nftables, table ``inet kafka_rpc_netns`` in each host's namespace, input hook):
  :meth:`NetBed.set_drops` takes directed pairs ``(src, dst)``: packets from ``src`` are dropped
  on arrival at ``dst``. Partitions are sets of pairs (:func:`partition_pairs`: symmetric,
  one-way, one node isolated, a majority split, a bridge node that sees both sides). TCP then does
  what it does: a one-way cut stalls the connections both ways (their ACKs are lost), as it would
  between real hosts.
* **random loss**: ``numgen random mod 100 < N`` drops N % of the packets a node receives from the
  other hosts (:meth:`NetBed.set_loss`).
* **delay with jitter**: this kernel has no netem (``CONFIG_NET_SCH_NETEM`` is not set), so each
  node's listeners are behind a Toxiproxy (:class:`Toxiproxy`, github.com/Shopify/toxiproxy v2)
  in the node's namespace, listening on the node's address and forwarding to the node's own
  listener on 127.0.0.1; :meth:`NetBed.set_delay` adds a ``latency`` toxic (latency, jitter ms)
  to the answers of every proxy, so a request/answer round trip between two hosts gets the delay
  once.
* **links** down and up: ``ip link set <veth> down/up`` in the node's namespace
  (:meth:`NetBed.set_link`).

:meth:`NetBed.heal` removes every fault. :meth:`NetBed.close` ends every process started with
:meth:`NetBed.popen` (its process group) and removes every namespace; it is idempotent, for a
``finally``.

Network calls (the toxiproxy API, the test's Kafka clients) are made from the client namespace:
:func:`run_in_netns` runs a coroutine on a thread that first moved itself into a namespace
(``setns(2)`` on ``/run/netns/<name>``; a network namespace is per thread, and sockets stay in the
namespace they were made in). Everything here needs root (:func:`require_root`).

Every wait is bounded; nothing retries forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "CLIENT_HOST",
    "PREFIX",
    "NetBed",
    "NetnsUnavailable",
    "Toxiproxy",
    "cleanup_stale",
    "partition_pairs",
    "require_root",
    "run_in_netns",
    "toxiproxy_binary",
]

#: namespace names start with this, then the pid of the process that made them
PREFIX = "krpcnet"
SUBNET = "10.77.0"
CLIENT_HOST = 100
TABLE = "kafka_rpc_netns"
TOXIPROXY_VERSION = "v2.5.0"
#: where ``.ci/run`` installs toxiproxy (outside the repository); ``KAFKA_RPC_TOXIPROXY`` wins
TOXIPROXY_DEFAULT = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "kafka-rpc"
    / f"toxiproxy-{TOXIPROXY_VERSION}"
    / "toxiproxy-server"
)
TOXIPROXY_API_PORT = 8474
CMD_TIMEOUT = 10.0  # s, one ip/nft command
_CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class NetnsUnavailable(RuntimeError):
    """The test bed cannot run here (not root, a tool missing); the message says which."""


def require_root() -> None:
    """Raise :class:`NetnsUnavailable` unless this process is root and ``ip``, ``nft`` and
    toxiproxy are there."""
    if os.geteuid() != 0:
        raise NetnsUnavailable(
            "the network-namespace tests need root (ip netns, nft); run them as root, or opt out "
            "explicitly with KAFKA_RPC_SKIP_NETNS=1"
        )
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"{tool} is not installed (Debian: iproute2, nftables)")
    if toxiproxy_binary() is None:
        raise NetnsUnavailable(
            f"toxiproxy-server {TOXIPROXY_VERSION} is not at {TOXIPROXY_DEFAULT} (set "
            "KAFKA_RPC_TOXIPROXY, or run .ci/run, which builds it with the Go module proxy)"
        )


def toxiproxy_binary() -> str | None:
    """``$KAFKA_RPC_TOXIPROXY``, else :data:`TOXIPROXY_DEFAULT`, else ``toxiproxy-server`` on
    the PATH; None when none exists."""
    env = os.environ.get("KAFKA_RPC_TOXIPROXY")
    for p in (env, str(TOXIPROXY_DEFAULT)):
        if p and os.access(p, os.X_OK):
            return p
    return shutil.which("toxiproxy-server")


def _run(*cmd: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT, input=input)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _namespaces() -> list[str]:
    r = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _remove_namespace(name: str) -> None:
    """SIGKILL whatever still runs in ``name`` (its processes, by pid), then delete it."""
    r = _run("ip", "netns", "pids", name, check=False)
    for pid in r.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while _run("ip", "netns", "pids", name, check=False).stdout.strip():
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    _run("ip", "netns", "del", name, check=False)


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove the namespaces named ``<prefix><pid>-...`` whose pid is no running process (a run
    that crashed or was killed); returns their names."""
    gone = []
    for name in _namespaces():
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and (int(pid) == os.getpid() or Path(f"/proc/{pid}").exists()):
            continue
        _remove_namespace(name)
        gone.append(name)
    return gone


def enter_netns(name: str) -> None:
    """Move the calling thread into the network namespace ``name`` (setns(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in_netns(name: str, main: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
    """Run ``main()`` in a new event loop on a thread inside namespace ``name``; its result, or
    its exception re-raised here. ``TimeoutError`` when it is not done after ``timeout`` s (the
    caller's ``finally`` then removes the namespaces and processes it used)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            enter_netns(name)
            out["value"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            out["error"] = exc

    t = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        assert t.ident is not None  # started
        frame = sys._current_frames().get(t.ident)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "?"
        raise TimeoutError(f"the run in {name} did not end within {timeout:g} s; it is at:\n"
                           f"{where}")  # fmt: skip
    if "error" in out:
        raise out["error"]
    return out["value"]


def partition_pairs(groups: Iterable[Iterable[int]]) -> set[tuple[int, int]]:
    """The directed pairs to drop so that hosts in different ``groups`` cannot talk (both
    ways). A host in no group is not cut from anyone."""
    gs = [set(g) for g in groups]
    out = set()
    for i, a in enumerate(gs):
        for b in gs[i + 1 :]:
            for x in a:
                for y in b:
                    out |= {(x, y), (y, x)}
    return out


class Toxiproxy:
    """One ``toxiproxy-server`` (API on ``host:8474``) and its proxies, through its HTTP API
    (``POST /proxies``, ``POST /proxies/<name>/toxics``, ``DELETE .../toxics/<toxic>``)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.proxies: list[str] = []

    def api(self, method: str, path: str, body: Any = None, timeout: float = 3.0) -> Any:
        conn = http.client.HTTPConnection(self.host, TOXIPROXY_API_PORT, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"})  # fmt: skip
            resp = conn.getresponse()
            text = resp.read().decode()
            if resp.status >= 300:
                raise RuntimeError(f"toxiproxy {method} {path}: {resp.status} {text}")
            return json.loads(text) if text.strip() else None
        finally:
            conn.close()

    async def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api("GET", "/proxies", timeout=1.0)
                return
            except (OSError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    def set_latency(self, latency_ms: int, jitter_ms: int) -> None:
        for p in self.proxies:
            self.api("POST", f"/proxies/{p}/toxics", {
                "name": "delay", "type": "latency", "stream": "downstream", "toxicity": 1.0,
                "attributes": {"latency": latency_ms, "jitter": jitter_ms},
            })  # fmt: skip

    def clear(self) -> None:
        for p in self.proxies:
            toxics = self.api("GET", f"/proxies/{p}/toxics") or []
            for t in toxics:
                self.api("DELETE", f"/proxies/{p}/toxics/{t['name']}")


class NetBed:
    """Namespaces for ``nodes`` (ids 1..99) and one client, joined by a bridge (module
    docstring). :meth:`create` builds them; :meth:`close` removes everything."""

    def __init__(self, nodes: Iterable[int], workdir: Path, tag: str | None = None) -> None:
        self.nodes = sorted(nodes)
        if not all(1 <= n < CLIENT_HOST for n in self.nodes):
            raise ValueError("node ids must be 1..99")
        self.tag = tag or f"{PREFIX}{os.getpid()}"
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.toxiproxies: dict[int, Toxiproxy] = {}
        self.drops: set[tuple[int, int]] = set()
        self.loss_percent = 0
        self.delay: tuple[int, int] | None = None
        self.links_down: set[int] = set()
        #: (monotonic time, what was done), for the fault schedule in a failure's report
        self.events: list[tuple[float, str]] = []
        self._made: list[str] = []

    # ------------------------------------------------------------------ names
    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-br"

    @property
    def client_ns(self) -> str:
        return f"{self.tag}-c"

    def ns(self, host: int) -> str:
        return self.client_ns if host == CLIENT_HOST else f"{self.tag}-n{host}"

    @staticmethod
    def address(host: int) -> str:
        return f"{SUBNET}.{host}"

    @staticmethod
    def veth(host: int) -> str:
        return f"eth{host}"

    # ------------------------------------------------------------------ life
    def create(self) -> None:
        """The bridge namespace, the hosts' namespaces, veths, addresses, and an empty nft
        table in each node's namespace. Raises RuntimeError (after removing what it made) when
        a command fails."""
        try:
            _run("ip", "netns", "add", self.bridge_ns)
            self._made.append(self.bridge_ns)
            br = self.bridge_ns
            _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", br, "link", "set", "br0", "up")
            for host in [*self.nodes, CLIENT_HOST]:
                ns = self.ns(host)
                _run("ip", "netns", "add", ns)
                self._made.append(ns)
                veth, peer = self.veth(host), f"p{host}"
                _run("ip", "link", "add", veth, "netns", ns, "type", "veth", "peer", "name",
                     peer, "netns", br)  # fmt: skip
                _run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", veth)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "link", "set", veth, "up")
                _run("ip", "-n", br, "link", "set", peer, "master", "br0")
                _run("ip", "-n", br, "link", "set", peer, "up")
            for node in self.nodes:
                self._apply_rules(node)
        except BaseException:
            self.close()
            raise
        self.note(f"created namespaces {self.tag}-* (nodes {self.nodes})")

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    def popen(self, host: int, cmd: list[str], log: Path, cwd: Path | None = None,
              env: dict | None = None) -> subprocess.Popen:  # fmt: skip
        """``cmd`` in ``host``'s namespace (``ip netns exec``), in its own process group, stdout
        and stderr to ``log``; ended by :meth:`close`."""
        with log.open("ab") as out:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], stdout=out,
                                 stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                 start_new_session=True)  # fmt: skip
        self.procs.append(p)
        return p

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        """SIGKILL ``p``'s process group and reap it (bounded)."""
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)

    def close(self) -> None:
        """End every process started here, then remove every namespace made (idempotent)."""
        for p in self.procs:
            with contextlib.suppress(Exception):
                self.kill(p)
        for ns in reversed(self._made):
            with contextlib.suppress(Exception):
                _remove_namespace(ns)
        self._made.clear()

    # ------------------------------------------------------------------ toxiproxy
    def start_toxiproxy(self, node: int, proxies: dict[str, tuple[str, str]],
                        seed: int = 0) -> Toxiproxy:  # fmt: skip
        """A ``toxiproxy-server`` in ``node``'s namespace with its API on the node's address
        (reachable from the client namespace) and ``proxies`` (name -> (listen, upstream)
        ``host:port``) made at its start (``-config``); ``seed`` seeds its toxics' jitter."""
        binary = toxiproxy_binary()
        if binary is None:
            raise NetnsUnavailable("toxiproxy-server is not installed")
        config = self.workdir / f"toxiproxy-{node}.json"
        config.write_text(json.dumps([
            {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
            for name, (listen, upstream) in proxies.items()
        ]))  # fmt: skip
        log = self.workdir / f"toxiproxy-{node}.log"
        self.popen(node, [binary, "-host", self.address(node), "-port", str(TOXIPROXY_API_PORT),
                          "-config", str(config), "-seed", str(seed)], log)  # fmt: skip
        tp = self.toxiproxies[node] = Toxiproxy(self.address(node))
        tp.proxies = list(proxies)
        return tp

    # ------------------------------------------------------------------ faults
    def _apply_rules(self, node: int) -> None:
        rules = [
            f"table inet {TABLE} {{}}",
            f"delete table inet {TABLE}",
            f"table inet {TABLE} {{",
            "  chain input {",
            "    type filter hook input priority 0; policy accept;",
        ]
        for src, dst in sorted(self.drops):
            if dst == node:
                rules.append(f"    ip saddr {self.address(src)} drop")
        if self.loss_percent >= 100:
            rules.append(f"    ip saddr {SUBNET}.0/24 drop")
        elif self.loss_percent > 0:
            rules.append(f"    ip saddr {SUBNET}.0/24 numgen random mod 100 < "
                         f"{self.loss_percent} drop")  # fmt: skip
        rules += ["  }", "}"]
        _run("ip", "netns", "exec", self.ns(node), "nft", "-f", "-", input="\n".join(rules) + "\n")

    def set_drops(self, pairs: Iterable[tuple[int, int]], why: str = "") -> None:
        """Drop packets from ``src`` at ``dst`` for exactly the ``(src, dst)`` pairs given (the
        client, :data:`CLIENT_HOST`, may be one of them); every other pair passes."""
        new = set(pairs)
        changed = {d for s, d in new ^ self.drops}
        self.drops = new
        for node in sorted(changed & set(self.nodes)):
            self._apply_rules(node)
        self.note(f"drops {sorted(new)}" + (f" ({why})" if why else ""))

    def set_loss(self, percent: int) -> None:
        """Drop ``percent`` % of the packets each node receives from the other hosts (0: no
        loss), at random (nftables ``numgen random``)."""
        if not 0 <= percent <= 100:
            raise ValueError("percent is 0..100")
        self.loss_percent = percent
        for node in self.nodes:
            self._apply_rules(node)
        self.note(f"loss {percent}%")

    def set_delay(self, latency_ms: int, jitter_ms: int) -> None:
        """Each answer through every node's proxies is delayed ``latency_ms`` +- ``jitter_ms``
        (Toxiproxy ``latency`` toxic); 0, 0 removes the delay. Call from the client
        namespace (:func:`run_in_netns`)."""
        for tp in self.toxiproxies.values():
            tp.clear()
            if latency_ms or jitter_ms:
                tp.set_latency(latency_ms, jitter_ms)
        self.delay = (latency_ms, jitter_ms) if latency_ms or jitter_ms else None
        self.note(f"delay {latency_ms} ms +- {jitter_ms} ms")

    def set_link(self, node: int, up: bool) -> None:
        """``ip link set <veth> up|down`` in ``node``'s namespace."""
        _run("ip", "-n", self.ns(node), "link", "set", self.veth(node), "up" if up else "down")
        if up:
            self.links_down.discard(node)
        else:
            self.links_down.add(node)
        self.note(f"link of node {node} {'up' if up else 'down'}")

    def heal(self) -> None:
        """Every link up, no drops, no loss, no delay."""
        for node in sorted(self.links_down):
            self.set_link(node, True)
        self.drops = set()
        self.loss_percent = 0
        for node in self.nodes:
            self._apply_rules(node)
        if self.delay is not None:
            self.set_delay(0, 0)
        self.note("healed")

    def schedule_text(self, t0: float) -> str:
        """The fault events as lines ``+<seconds since t0> <what>``."""
        return "\n".join(f"+{t - t0:8.3f}s {what}" for t, what in self.events)
