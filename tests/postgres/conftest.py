"""PostgreSQL fixtures: one throw-away cluster per session, a fresh database per test."""

from tests.pg_cluster import pg_cluster, pg_databases, pg_dsn  # noqa: F401 - fixtures
