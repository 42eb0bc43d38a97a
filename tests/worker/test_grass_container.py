"""A GRASS GIS task in a desktop container (image coda-desktop:latest: Debian's GRASS 8.2, the
stand-in data sets in the home template): B-11 set up from its task file, a wrong solution
fails, then the right one succeeds, judged by its own checker read from the GUI inside the
container through the agent's ``/coda/grass`` (no port of the GUI is published)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coda.contracts.desktop import CheckVerdict
from tests.fixtures.docker import container_desktop
from worker.providers.docker_desktop import ContainerDesktop
from worker.tasks import run_checkers

from .grass_helpers import console, setup_task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def desktop(docker_client: Any, desktop_image: str) -> Iterator[ContainerDesktop]:
    with container_desktop(docker_client, "grass") as d:
        yield d


def test_grass_task_wrong_then_right_in_a_desktop_container(desktop: ContainerDesktop) -> None:
    ctx = setup_task(desktop, "B-11")
    assert ctx.rw("/home/user") == "/home/user"  # the task's own paths, unrewritten
    outcome = run_checkers(ctx, console("v.info map=roadsmajor@PERMANENT")(desktop, ctx))
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    outcome = run_checkers(ctx, console("v.info map=boundary_region@PERMANENT")(desktop, ctx))
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    ports = desktop.container.attrs["NetworkSettings"]["Ports"] or {}
    assert set(ports) <= {"5000/tcp", "8000/tcp"}, ports
