"""The package layout the architecture promises (docs/architecture.md, "The layers"), checked
on the source with ``ast``: every ``import`` / ``from ... import`` counts, at module level,
under ``if TYPE_CHECKING:`` and inside functions (a function-level import only hides a cycle
until the function runs).

* No import cycle anywhere in ``kafka_rpc``: the control managers import ``controller.base``
  and ``controller.image`` (and each other one way), ``controller.replay`` /
  ``controller.snapshot`` dispatch to them.
* Only the node (``kafka_rpc.node``, the composition root) and the command line above it import
  the listener layer (``kafka_rpc.server``); no lower layer imports the node.
* ``kafka_rpc.raft`` imports nothing of ``kafka_rpc.controller`` (the Raft core knows no
  records), and ``kafka_rpc.controller`` imports nothing of ``kafka_rpc.server`` or
  ``kafka_rpc.handlers`` (the controller knows records, not sockets).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import kafka_rpc

ROOT = Path(kafka_rpc.__file__).resolve().parent


def _in(mod: str, *packages: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in packages)


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` loads: itself, else its longest prefix that is one of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


GENERATED = "kafka_rpc.protocol.messages"  # codegen output: imports only kafka_rpc.protocol


def import_graph() -> dict[str, set[str]]:
    """module -> the ``kafka_rpc`` modules it imports (anywhere in its body); the generated
    message modules are not read (3 MB of codecs)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        if _in(mod, GENERATED):
            graph[mod] = set()
            continue
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    pkg = f"{base}.{node.module}" if node.module else base
                else:
                    pkg = node.module or ""
                # `from pkg import sub` loads pkg.sub when it is a module, else pkg
                targets = [f"{pkg}.{a.name}" for a in node.names]
            for t in targets:
                r = _resolve(t, modules)
                if r is not None and r != mod:
                    edges.add(r)
        graph[mod] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@functools.cache
def _package_graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_import_cycle():
    graph = _package_graph()
    assert "kafka_rpc.controller.image" in graph  # the walk found the package
    assert _cycles(graph) == []


#: the layers below the listener layer and the node: none imports either
LOWER = (
    "kafka_rpc.handlers", "kafka_rpc.broker", "kafka_rpc.coordinator", "kafka_rpc.controller",
    "kafka_rpc.raft", "kafka_rpc.security", "kafka_rpc.client", "kafka_rpc.api",
    "kafka_rpc.protocol", "kafka_rpc.storage", "kafka_rpc.config",
)  # fmt: skip


def reaching_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports from a module of :data:`LOWER` into ``kafka_rpc.server`` or
    ``kafka_rpc.node``, and from ``kafka_rpc.server`` into ``kafka_rpc.node``."""
    return sorted(
        (m, t)
        for m, ts in graph.items()
        for t in ts
        if (_in(m, *LOWER) and _in(t, "kafka_rpc.server", "kafka_rpc.node"))
        or (_in(m, "kafka_rpc.server") and _in(t, "kafka_rpc.node"))
    )


def test_lower_layers_never_import_the_listeners_or_the_node():
    graph = _package_graph()
    assert "kafka_rpc.node.node" in graph and "kafka_rpc.server.listeners" in graph
    assert reaching_up(graph) == []


def test_the_layer_rule_sees_a_handler_reaching_up():
    """The rule on a made-up graph: a handler importing the listener layer (inside a function or
    not, the graph does not tell) and the listener layer importing the node are both found."""
    graph = {
        "kafka_rpc.handlers.x": {"kafka_rpc.server.listeners", "kafka_rpc.api.registry"},
        "kafka_rpc.server.listeners": {"kafka_rpc.node.node"},
        "kafka_rpc.node.node": {"kafka_rpc.server.listeners", "kafka_rpc.handlers.x"},
    }
    assert reaching_up(graph) == [
        ("kafka_rpc.handlers.x", "kafka_rpc.server.listeners"),
        ("kafka_rpc.server.listeners", "kafka_rpc.node.node"),
    ]


def test_raft_does_not_import_the_controller():
    graph = _package_graph()
    bad = sorted(
        (m, t)
        for m, ts in graph.items()
        if _in(m, "kafka_rpc.raft")
        for t in ts
        if _in(t, "kafka_rpc.controller")
    )
    assert bad == []


def test_controller_does_not_import_server_or_handlers():
    graph = _package_graph()
    bad = sorted(
        (m, t)
        for m, ts in graph.items()
        if _in(m, "kafka_rpc.controller")
        for t in ts
        if _in(t, "kafka_rpc.server", "kafka_rpc.handlers")
    )
    assert bad == []


def test_the_checks_see_function_level_imports(tmp_path, monkeypatch):
    """The cycle finder on a made-up package: a cycle closed by an import inside a function
    (and by a relative import) is found."""
    pkg = tmp_path / "kafka_rpc"
    (pkg / "controller").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "controller" / "__init__.py").write_text("")
    (pkg / "controller" / "a.py").write_text("from kafka_rpc.controller import b\n")
    (pkg / "controller" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "controller" / "c.py").write_text("import kafka_rpc.controller.a\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", pkg)
    graph = import_graph()
    assert graph["kafka_rpc.controller.b"] == {"kafka_rpc.controller.a"}
    assert _cycles(graph) == [["kafka_rpc.controller.a", "kafka_rpc.controller.b"]]
