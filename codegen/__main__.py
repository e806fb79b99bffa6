"""``python -m codegen``: regenerate ``kafka_rpc/protocol/messages/`` from ``message_specs/``.

Options: ``--specs DIR`` (repeatable), ``--out DIR``, ``--package NAME``, ``--check`` (exit 1 if
the output would change, writing nothing). Output is deterministic and formatted with
``ruff format`` (a hard step: a formatter failure fails the run); files the generator no longer
writes are deleted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from codegen.emit import emit_index, emit_module, module_name
from codegen.model import SpecError, load_dir

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = ROOT / "message_specs"
DEFAULT_OUT = ROOT / "kafka_rpc" / "protocol" / "messages"


def render(spec_dirs: list[Path], label_root: Path | None = None) -> dict[str, str]:
    """Return ``{file name: source}`` for every spec of ``spec_dirs`` plus ``__init__.py``."""
    specs = load_dir(*spec_dirs)
    out: dict[str, str] = {}
    for s in specs:
        p = Path(s.path)
        try:
            label = p.resolve().relative_to(label_root.resolve()) if label_root else p.name
        except ValueError:
            label = p.name
        out[module_name(s.name) + ".py"] = emit_module(s, str(label))
    out["__init__.py"] = emit_index(specs)
    return out


def _ruff_format(directory: Path) -> None:
    cmd = [sys.executable, "-m", "ruff", "format", "--quiet", "--no-cache",
           "--line-length", "100", str(directory)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"ruff format failed on generated code:\n{res.stdout}{res.stderr}")


def generate(spec_dirs: list[Path], out_dir: Path, check: bool = False) -> bool:
    """Write (or with ``check`` compare) the generated package; returns True if anything
    differs from what is on disk."""
    files = render(spec_dirs, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp) / "messages"
        t.mkdir()
        for name, text in files.items():
            (t / name).write_text(text, encoding="utf-8")
        _ruff_format(t)
        new = {p.name: p.read_text(encoding="utf-8") for p in sorted(t.glob("*.py"))}
    old = {p.name: p.read_text(encoding="utf-8") for p in sorted(out_dir.glob("*.py"))} \
        if out_dir.exists() else {}  # fmt: skip
    changed = new != old
    if check or not changed:
        return changed
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in set(old) - set(new):
        (out_dir / name).unlink()
    for name, text in new.items():
        if old.get(name) != text:
            (out_dir / name).write_text(text, encoding="utf-8")
    stale = out_dir / "__pycache__"
    if stale.exists():
        shutil.rmtree(stale, ignore_errors=True)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen", description=__doc__.splitlines()[0])
    ap.add_argument("--specs", action="append", type=Path, help="spec directory (repeatable)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the output would change")
    args = ap.parse_args(argv)
    try:
        changed = generate(args.specs or [DEFAULT_SPECS], args.out, args.check)
    except SpecError as e:
        print(f"codegen: {e}", file=sys.stderr)
        return 2
    if args.check and changed:
        print("codegen: generated code is out of date; run python -m codegen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
