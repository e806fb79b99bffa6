"""Durable small-file writes shared by the metadata log, the quorum state, ``partition.metadata``
and ``meta.properties``.

:func:`atomic_write` is Kafka's ``Utils.atomicMoveWithFallback`` pattern: the content goes to
``<path><tmp_suffix>``, is fsynced, renamed over ``path`` and the directory is fsynced, so a crash
leaves either the old or the new file, never a torn one. :func:`fsync_dir` makes a rename,
creation or deletion in a directory durable.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(directory: Path | str) -> None:
    """fsync ``directory`` itself (its entries: renames, creations, deletions). ``OSError`` on
    failure."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, data: bytes | str, tmp_suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``data`` (``str`` as UTF-8): write ``<path><tmp_suffix>``, fsync it,
    rename it over ``path``, fsync the directory. On failure the old file is untouched, the temp
    file removed and the ``OSError`` raised."""
    path = Path(path)
    tmp = path.with_name(path.name + tmp_suffix)
    view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
