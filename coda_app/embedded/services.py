"""Both stores at once: start the embedded servers, stop them all on exit, or take the URLs
from DATABASE_URL / REDIS_URL when set."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coda.logging import get_logger
from coda.urls import redact_url, to_asyncpg_url
from coda_app.embedded.common import EmbeddedServiceError
from coda_app.embedded.postgres import EmbeddedPostgres
from coda_app.embedded.redis import EmbeddedRedis

log = get_logger("coda.embedded")


@dataclass(frozen=True)
class ServiceUrls:
    """Where the master finds its stores."""

    database_url: str  # postgresql+asyncpg://...
    redis_url: str  # redis://...
    servers: tuple[EmbeddedPostgres | EmbeddedRedis, ...] = field(default=(), compare=False)
    """The embedded servers started (none for stores from the environment): ``coda up``
    supervises them."""


class EmbeddedServices:
    """Starts embedded servers and stops them all on stop() / context exit / interpreter exit.

    Signals: the servers run in their own sessions, so a terminal's Ctrl-C reaches only the
    caller, where SIGINT raises KeyboardInterrupt and `with` blocks clean up; for the same on
    SIGTERM the caller uses `exit_on_sigterm()`. A parent killed outright leaves them running:
    the next start on the same data dir stops them first.
    """

    def __init__(self, *, fast: bool = False) -> None:
        self.fast = fast
        self._servers: list[EmbeddedPostgres | EmbeddedRedis] = []
        self._atexit = False

    def start_postgres(self, data_dir: Path | str, port: int | None = None, *,
                       site: Path | None = None, root: Path | None = None) -> str:
        return self._start(EmbeddedPostgres(data_dir, port=port, fast=self.fast, site=site,
                                            root=root))

    def start_redis(self, data_dir: Path | str, port: int | None = None) -> str:
        return self._start(EmbeddedRedis(data_dir, port=port, fast=self.fast))

    def _start(self, server: EmbeddedPostgres | EmbeddedRedis) -> str:
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        url = server.start()
        self._servers.append(server)
        return url

    @property
    def servers(self) -> list[EmbeddedPostgres | EmbeddedRedis]:
        return list(self._servers)

    def stop(self) -> None:
        """Stop every started server, last started first; idempotent."""
        errors: list[str] = []
        while self._servers:
            server = self._servers.pop()
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others; raised below
                errors.append(f"{type(server).__name__}: {exc}")
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False
        if errors:
            raise EmbeddedServiceError("; ".join(errors))

    def __enter__(self) -> EmbeddedServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit (like Ctrl-C raises KeyboardInterrupt), so `finally` and
    `with` blocks stop the embedded servers. Also makes SIGINT raise KeyboardInterrupt when the
    process inherited it ignored (a job started with `&` by a non-interactive shell), where
    Python would otherwise never stop on it. Call from the main thread."""

    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def embedded_services(
    data_dir: Path | str,
    *,
    fast: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Iterator[ServiceUrls]:
    """Yield the store URLs: DATABASE_URL / REDIS_URL when set, else embedded servers
    under data_dir that are stopped when the block exits."""
    env = os.environ if environ is None else environ
    with EmbeddedServices(fast=fast) as services:
        if env.get("DATABASE_URL"):
            database_url = to_asyncpg_url(env["DATABASE_URL"])
            log.info("postgres.external", url=redact_url(database_url))
        else:
            database_url = services.start_postgres(data_dir)
        if env.get("REDIS_URL"):
            redis_url = env["REDIS_URL"]
            log.info("redis.external", url=redact_url(redis_url))
        else:
            redis_url = services.start_redis(data_dir)
        yield ServiceUrls(database_url=database_url, redis_url=redis_url,
                          servers=tuple(services.servers))


@dataclass(frozen=True)
class PrivateStores:
    """Stores of one run that nothing else uses: a database and a Redis key prefix."""

    database_url: str
    redis_url: str
    redis_prefix: str


@contextlib.contextmanager
def scratch_database(database_url: str, prefix: str = "coda_run") -> Iterator[str]:
    """A new empty database on the server of ``database_url``, dropped afterwards."""
    import asyncio
    import secrets
    from concurrent.futures import ThreadPoolExecutor

    import asyncpg

    from coda.urls import to_plain_postgres_url

    plain = to_plain_postgres_url(database_url)
    name = f"{prefix.replace('-', '_')}_{secrets.token_hex(4)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(plain)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def run(sql: str) -> None:  # in a thread of its own: callers may be inside an event loop
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, admin(sql)).result()

    run(f'create database "{name}"')
    head, _, _ = database_url.rpartition("/")
    try:
        yield f"{head}/{name}"
    finally:
        run(f'drop database if exists "{name}" with (force)')


def delete_prefix(redis_url: str, prefix: str) -> None:
    """Delete every Redis key under ``prefix:``."""
    import redis

    r = redis.Redis.from_url(redis_url)
    try:
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


@contextlib.contextmanager
def private_stores(data_dir: Path | str, *, prefix: str = "coda-run",
                   environ: Mapping[str, str] | None = None) -> Iterator[PrivateStores]:
    """Stores for one run (a benchmark, ``coda learn``): embedded servers under ``data_dir``,
    or on the servers of DATABASE_URL / REDIS_URL a throwaway database and a random key prefix,
    both removed on exit."""
    import secrets

    env = os.environ if environ is None else environ
    key_prefix = f"{prefix}-{secrets.token_hex(4)}"
    with embedded_services(data_dir, environ=env) as urls:
        db = (scratch_database(urls.database_url, prefix) if env.get("DATABASE_URL")
              else contextlib.nullcontext(urls.database_url))
        try:
            with db as database_url:
                yield PrivateStores(database_url, urls.redis_url, key_prefix)
        finally:
            if env.get("REDIS_URL"):
                delete_prefix(urls.redis_url, key_prefix)
