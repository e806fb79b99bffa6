"""The SQL resources of the database Batch Coordinators (SQLite and PostgreSQL): named statements
and numbered migrations, read from the package, and the version check of a database's schema.

Each backend keeps its own files (SQLite: ``sql/*.sql`` and ``migrations/``; PostgreSQL:
``pg/queries.sql`` and ``pg/migrations/``) and applies its migrations its own way (SQLite in one
``BEGIN IMMEDIATE`` transaction, statement by statement; PostgreSQL in one transaction under an
advisory lock, each script whole); what they share is here, decided once:

* a statements file is cut into sections, each starting with a ``-- name: <name>`` line;
* a migration is ``V###__name.sql`` (three or more digits), applied in version order and
  recorded in the table ``schema_version`` with the SHA-256 of its text;
* a database whose newest recorded version is above the code's latest, or whose recorded
  checksum of a migration differs from the shipped file's (edited after being applied), is
  refused with :class:`SchemaVersionError` (the Flyway rules Inkless's control plane follows).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from collections.abc import Mapping

__all__ = [
    "SchemaVersionError",
    "load_migrations",
    "load_queries",
    "pending_migrations",
]

_PACKAGE = "kafka_rpc.coordinator"
_MIGRATION_NAME = re.compile(r"^V(\d{3,})__([A-Za-z0-9_]+)\.sql$")
_SECTION = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


class SchemaVersionError(RuntimeError):
    """The database was written by a newer schema than this code knows, or a recorded migration
    differs from the one shipped (edited after being applied)."""


def load_queries(*path: str) -> dict[str, str]:
    """All named statements (sections start with ``-- name: <name>``) of the package resource
    ``path`` (relative to ``kafka_rpc/coordinator``): one ``.sql`` file, or a directory whose
    ``*.sql`` files are read in name order. Raises ``ValueError`` for a name defined twice."""
    root = importlib.resources.files(_PACKAGE).joinpath(*path)
    if root.is_file():
        entries = [root]
    else:
        entries = sorted((e for e in root.iterdir() if e.name.endswith(".sql")),
                         key=lambda e: e.name)  # fmt: skip
    queries: dict[str, str] = {}
    for entry in entries:
        parts = _SECTION.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2]):
            if name in queries:
                raise ValueError(f"duplicate SQL statement name {name!r} in {entry.name}")
            queries[name] = body.strip()
    return queries


def load_migrations(*path: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of the ``V###__name.sql`` files of the package directory
    ``path`` (relative to ``kafka_rpc/coordinator``), by version. Raises ``ValueError`` for two
    files of one version."""
    out: list[tuple[int, str, str]] = []
    root = importlib.resources.files(_PACKAGE).joinpath(*path)
    for entry in root.iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    out.sort()
    versions = [v for v, _, _ in out]
    if len(set(versions)) != len(versions):
        raise ValueError(f"duplicate migration versions: {versions}")
    return out


def pending_migrations(
    migrations: list[tuple[int, str, str]], applied: Mapping[int, str]
) -> tuple[list[tuple[int, str, str, str]], int]:
    """The migrations still to apply and the schema version once they are.

    ``migrations``: :func:`load_migrations`'s list; ``applied``: ``schema_version``'s rows,
    version -> recorded SHA-256 (hex). Returns ``([(version, name, checksum, sql)...] in version
    order, resulting version)``. Raises :class:`SchemaVersionError` if the database is newer
    than the code, or an applied migration's checksum differs from the shipped file."""
    latest = migrations[-1][0] if migrations else 0
    newest = max(applied, default=0)
    if newest > latest:
        raise SchemaVersionError(
            f"database schema version {newest} is newer than this code's {latest}"
        )
    out: list[tuple[int, str, str, str]] = []
    for version, name, script in migrations:
        checksum = hashlib.sha256(script.encode()).hexdigest()
        if version in applied:
            if applied[version] != checksum:
                raise SchemaVersionError(f"migration V{version:03d}__{name} was changed")
            continue
        out.append((version, name, checksum, script))
    return out, max(latest, newest)
