"""ScienceBoard's Celestia tasks in a desktop container (image coda-desktop: the host's build of
ScienceBoard's Celestia fork, ``scripts/celestia.sh``, copied in by ``scripts/docker-build.sh``;
never compiled inside the image build). The tasks the local tests solve (time, Julian date,
render, label and orbit flags, auto magnitude, star style, texture resolution, entity distance,
visibility, hiding, reference marks, pause, answers) set up from their task files: a scripted
wrong solution fails, then a right one succeeds, judged by their own checkers over Celestia's
dump read inside the container through the agent's ``/coda/celestia`` (no port of Celestia is
published). The solutions are the local tests' (celestia_helpers), sent through the
container's guest agent (about 4 minutes).
Without a Celestia build on the host the image holds none and these tests skip (CI=true: they
fail)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.docker import container_desktop
from worker.providers.docker_desktop import ContainerDesktop
from worker.providers.image import celestia as build

from .celestia_helpers import CASES, require_image_build, setup_task, wrong_then_right

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = tuple(sorted(CASES))


@pytest.fixture(scope="module")
def desktop(docker_client: Any, desktop_image: str) -> Iterator[ContainerDesktop]:
    require_image_build()
    with container_desktop(docker_client, "celestia") as d:
        yield d


def test_the_image_holds_this_hosts_celestia_build(desktop: ContainerDesktop) -> None:
    """The build is at the path its binary was compiled for, the one the worker's command
    rewrite names; the image's own lookup (CODA_CELESTIA_DIR / CODA_CELESTIA_KEY) agrees; the
    dump server is not reachable through the container's published application port."""
    ctx = setup_task(desktop, "A-02")
    assert ctx.rw("/app/bin/celestia-qt6 «PORTLIKE»").startswith(str(build.binary()))
    found = desktop.container.exec_run(
        ["python", "-c", "from worker.providers.image import celestia as c; "
                         "print(c.is_built(), c.binary())"], user="user")
    assert found.exit_code == 0 and found.output.decode().split() == ["True", str(build.binary())]
    # the dump server listens on the container's loopback: its published port leads nowhere
    with pytest.raises(httpx.TransportError):
        httpx.post(f"http://127.0.0.1:{desktop.ports['apps']}/", timeout=10)


@pytest.mark.parametrize("name", TASKS)
def test_celestia_task_wrong_then_right_in_a_desktop_container(desktop: ContainerDesktop,
                                                               name: str) -> None:
    wrong_then_right(desktop, name)
