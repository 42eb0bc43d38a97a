"""A Celestia task solved end to end by a replayed episode through ``coda worker``: a real
master, the planner and executor services on the replay backend (the recorded outputs of
``examples/replays/celestia-A-02.*.json``: k, then Shift+K into Celestia's 3D view, DONE), the
worker as a real process setting ScienceBoard's A-02 up on the project's build of Celestia and
judging it with the task's own checker over Celestia's dump; on a local slot, and in a desktop
container (image coda-desktop with the host's build). Without a Celestia build these skip
(CI=true: they fail)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.docker import remove_containers
from tests.fixtures.master import EXAMPLES, MasterProcess

from .celestia_helpers import require_build, require_image_build
from .test_episodes import replays_fixture, solve_replayed

pytestmark = pytest.mark.slow

A02 = json.loads((EXAMPLES / "VM" / "Celestia" / "A-02.json").read_text())
celestia_replays = replays_fixture("celestia-A-02", require_build)


def solve_a02(wmaster: MasterProcess, replays: tuple[str, str], log_path: Path,
              **worker: Any) -> dict[str, Any]:
    """A-02 submitted and run by a worker on the replay services; its episode, solved."""
    return solve_replayed(wmaster, replays, A02, log_path, ["type", "type", "done"], **worker)


def test_replay_solves_a_celestia_task_on_a_local_slot(
        wmaster: MasterProcess, celestia_replays: tuple[str, str], desktop_host: None,
        tmp_path: Path) -> None:
    solve_a02(wmaster, celestia_replays, tmp_path / "worker.log")


@pytest.mark.docker
def test_replay_solves_a_celestia_task_in_a_desktop_container(
        wmaster: MasterProcess, celestia_replays: tuple[str, str], docker_client: Any,
        desktop_image: str, tmp_path: Path) -> None:
    require_image_build()
    prefix = f"coda-celestia-ep-{secrets.token_hex(3)}"
    options = {"image": desktop_image, "name_prefix": prefix, "ready_timeout_s": 120}
    try:
        solve_a02(wmaster, celestia_replays, tmp_path / "worker.log", provider="docker",
                  provider_options=json.dumps(options))
    finally:
        remove_containers(docker_client, prefix)
