"""The docker provider under infrastructure faults, injected from outside on a real engine: the
image not there (then tagged), the engine unreachable (the connection to it cut, then back),
two workers given one name prefix. The infrastructure's faults are :class:`ProviderDown` (the
worker waits them out, no episode is charged), a desktop the engine could not remove is removed
by name when the engine answers again, and a worker never removes containers it does not own
(nor one a live process of its own name uses). Every container carries a prefix of this
module's and none is left afterwards."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.contracts.desktop import ProviderDown, ProviderFault
from tests.fixtures.faults import Stopwatch, record
from tests.fixtures.master import MasterProcess
from tests.fixtures.proxy import proxy
from tests.fixtures.waiting import wait_for
from tests.worker.test_episodes import C02, assert_c02_solved, wait_episode
from worker.providers.base import ProviderConflict
from worker.providers.docker import DockerProvider, DockerSettings
from worker.providers.docker_desktop import PREFIX_LABEL, ContainerDesktop

from .workerproc import Rest, running_worker, worker_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER_SOCKET = "/var/run/docker.sock"


def _ours(client: Any, prefix: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{PREFIX_LABEL}={prefix}"}))


@pytest.fixture
def prefix(docker_client: Any, desktop_image: str) -> Iterator[str]:
    """A name prefix of this test's containers; none may be left after it."""
    p = f"coda-test-{secrets.token_hex(3)}"
    yield p
    left = _ours(docker_client, p)
    for c in left:
        c.remove(force=True)
    assert [c.name for c in left] == []


@pytest.fixture
def missing_tag(docker_client: Any, desktop_image: str) -> Iterator[str]:
    """A tag of the desktop image that is not there yet (the test tags it); removed after."""
    from docker.errors import ImageNotFound

    tag = f"coda-desktop:missing-{secrets.token_hex(3)}"
    yield tag
    with contextlib.suppress(ImageNotFound):  # never tagged
        docker_client.images.remove(tag, noprune=True)


def _provider(prefix: str, owner: str = "worker-a", **options: Any) -> DockerProvider:
    return DockerProvider(DockerSettings(name_prefix=prefix, owner=owner, ready_timeout_s=60,
                                         **options))


def test_an_image_that_is_not_there_is_missing_until_it_is(
        prefix: str, missing_tag: str, docker_client: Any, desktop_image: str) -> None:
    with _provider(prefix, image=missing_tag) as p:
        with pytest.raises(ProviderDown) as err:
            p.probe()
        assert err.value.fault is ProviderFault.MISSING
        assert err.value.detail.startswith(f"image {missing_tag} not found")
        with pytest.raises(ProviderDown):
            p.desktop(0).reset()
        docker_client.images.get(desktop_image).tag(missing_tag)
        p.probe()
        assert p.desktop(0).reset() is not None


def test_an_engine_that_does_not_answer_is_unreachable_and_nothing_is_lost(
        prefix: str, docker_client: Any) -> None:
    import docker

    with proxy(DOCKER_SOCKET) as engine:
        def client() -> Any:
            return docker.DockerClient(base_url=f"tcp://127.0.0.1:{engine.port}", timeout=30)

        with _provider(prefix, client=client) as p:
            d = p.desktop(0)
            assert isinstance(d, ContainerDesktop)
            d.reset()
            first = d.container.id
            engine.cut()
            with pytest.raises(ProviderDown) as err:
                p.probe()
            assert err.value.fault is ProviderFault.UNREACHABLE
            with pytest.raises(ProviderDown) as err:
                d.reset()  # broken in the engine's eyes, and it cannot be replaced now
            assert err.value.fault is ProviderFault.UNREACHABLE
            assert [c.id for c in _ours(docker_client, prefix)] == [first]  # left, for now
            engine.restore()
            p.probe()
            d.reset()  # the one it could not remove goes, by its name, before the new one
            assert [c.id for c in _ours(docker_client, prefix)] == [d.container.id] != [first]
            assert d.health().ok


def test_a_prefix_in_use_by_another_worker_is_refused_and_its_container_untouched(
        prefix: str, docker_client: Any) -> None:
    a = _provider(prefix, owner="worker-a", alive_interval_s=0.5, alive_ttl_s=5)
    try:
        da = a.desktop(0)
        da.reset()
        with _provider(prefix, owner="worker-b") as b:
            with pytest.raises(ProviderConflict) as err:
                b.probe()
            assert f"name_prefix {prefix!r} is in use by worker 'worker-a'" in str(err.value)
            with pytest.raises(ProviderConflict):
                b.desktop(0)
        with _provider(prefix, owner="worker-a") as again:  # a second process of worker-a
            with pytest.raises(ProviderConflict) as err:
                again.probe()
            assert (f"is in use by another live process of worker 'worker-a' (instance "
                    f"{a.settings.instance})") in str(err.value)
        [mine] = _ours(docker_client, prefix)
        assert mine.id == da.container.id and mine.status == "running" and da.health().ok
        a._desktops.clear()  # a crashes: its container stays, its liveness mark not renewed
        a.close()
        with _provider(prefix, owner="worker-a") as after:  # a-again, after the crash of a
            after.probe()  # its own stale container removed, once its mark is 5 s old
            assert _ours(docker_client, prefix) == []
    finally:
        a.close()


def test_a_worker_whose_image_is_missing_leases_nothing_until_it_is_there(
        wmaster: MasterProcess, replay_services: tuple[str, str], prefix: str,
        missing_tag: str, docker_client: Any, desktop_image: str, tmp_path: Path) -> None:
    rest = Rest(wmaster)
    [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
    planner, executor = replay_services
    options = {"image": missing_tag, "name_prefix": prefix, "ready_timeout_s": 120}
    env = worker_env(wmaster, planner, executor, "http://127.0.0.1:9", kinds="episode",
                     provider="docker", provider_options=json.dumps(options),
                     provider_probe_max_s="2")
    with running_worker(env, tmp_path / "worker.log") as worker:
        def down() -> dict[str, Any] | None:
            workers = rest.get("/v1/workers")
            p = workers[0]["provider"] if workers else None
            return p if p and p["fault"] else None

        state = wait_for(down, "the provider down", 120, logs=worker.log, gone=worker.exited)
        assert state["fault"] == "missing" and missing_tag in state["detail"], state
        ep = rest.episode(episode_id)
        assert ep["status"] == "queued" and ep["attempts"] == 0
        docker_client.images.get(desktop_image).tag(missing_tag)
        watch = Stopwatch()
        wait_for(lambda: rest.episode(episode_id)["status"] != "queued", "leased", 120,
                 logs=worker.log, gone=worker.exited)
        record("docker_image_missing_at_start", leased_after_tag_s=watch.s())
        assert_c02_solved(wait_episode(rest, episode_id, worker), attempt=1)
        record("docker_image_missing_at_start", attempts=1, episodes_failed=0)
