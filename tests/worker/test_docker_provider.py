"""The docker provider's desktop containers on a real engine (image coda-desktop:latest, built
by the ``desktop_image`` fixture when missing): the contract check, resets that really clean
(the fast revert and the recreate), broken desktops detected with a typed reason and replaced,
stale containers removed, slots isolated, and no container left afterwards. Every container
carries a name prefix unique to this run and is removed at the end."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from coda.contracts.desktop import BrokenReason
from tests.fixtures.waiting import wait_for
from worker.providers.conformance import check_desktop
from worker.providers.docker import DockerProvider, DockerSettings
from worker.providers.docker_desktop import PREFIX_LABEL, ContainerDesktop

from .helpers import window

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _ours(client: Any, prefix: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{PREFIX_LABEL}={prefix}"}))


@pytest.fixture(scope="module")
def prefix(docker_client: Any, desktop_image: str) -> Iterator[str]:
    """A name prefix for this module's containers; whatever carries it is removed after."""
    p = f"coda-test-{secrets.token_hex(3)}"
    yield p
    for c in _ours(docker_client, p):
        c.remove(force=True)


def _provider(prefix: str, **options: Any) -> DockerProvider:
    return DockerProvider(DockerSettings(name_prefix=prefix, ready_timeout_s=60, **options))


@pytest.fixture(scope="module")
def provider(prefix: str) -> Iterator[DockerProvider]:
    with _provider(prefix) as p:
        yield p


@pytest.fixture
def desktop(provider: DockerProvider) -> ContainerDesktop:
    d = provider.desktop(0)
    assert isinstance(d, ContainerDesktop)
    d.reset()
    return d


def test_desktop_container_passes_the_provider_contract(provider: DockerProvider) -> None:
    d = provider.desktop(5)
    check_desktop(d)
    assert isinstance(d, ContainerDesktop) and d.container is None


def test_ports_are_published_on_loopback_only(desktop: ContainerDesktop) -> None:
    bound = desktop.container.attrs["NetworkSettings"]["Ports"]
    hosts = {b["HostIp"] for binds in bound.values() for b in binds or []}
    assert hosts == {"127.0.0.1"}, bound
    assert desktop.guest is not None
    assert desktop.guest.base_url == f"http://127.0.0.1:{desktop.ports['agent']}"
    assert desktop.layout.app_url == f"http://127.0.0.1:{desktop.ports['apps']}"


def test_the_agent_refuses_requests_without_the_slot_token(desktop: ContainerDesktop) -> None:
    import httpx

    assert desktop.guest is not None
    url = desktop.guest.base_url
    assert httpx.get(f"{url}/health").status_code == 200  # readiness needs no token
    assert httpx.get(f"{url}/screenshot").status_code == 401
    wrong = {"authorization": f"Bearer {secrets.token_urlsafe(24)}"}
    assert httpx.get(f"{url}/screenshot", headers=wrong).status_code == 401


PIDS = ("import os, sys; needle = sys.argv[1].encode(); print(' '.join(p for p in os.listdir("
        "'/proc') if p.isdigit() and int(p) != os.getpid() and needle in open("
        "f'/proc/{p}/cmdline', 'rb').read().replace(bytes(1), b' ')))")


def _pids(d: ContainerDesktop, needle: str) -> list[int]:
    """Processes in the container whose command line holds ``needle`` (no procps there)."""
    code, out = d.container.exec_run(["python", "-c", PIDS, needle], user="root")
    assert code == 0, out
    return [int(p) for p in out.decode().split()]


def _leave_an_episode_behind(d: ContainerDesktop) -> None:
    guest = d.guest
    assert guest is not None
    out = guest.execute("echo episode-1 > ~/atelier/left-behind.txt && echo x > ~/.secret "
                        "&& echo t > /tmp/episode-tmp", shell=True)
    assert out.returncode == 0, out
    guest.launch(["xterm", "-T", "episode-1"])
    guest.launch("sleep 600 &", shell=True)
    wait_for(lambda: window(guest, "episode-1"), "the first episode's xterm")


def _assert_clean(d: ContainerDesktop) -> None:
    guest = d.guest
    assert guest is not None
    assert guest.read_file("/home/user/atelier/left-behind.txt") is None
    assert guest.read_file("/home/user/.secret") is None
    assert guest.read_file("/tmp/episode-tmp") is None
    assert guest.windows() == []
    assert guest.read_file("/home/user/.config/texstudio/texstudio.ini"), "template restored"
    assert _pids(d, "sleep 600") == []


def _restores_by_exec(client: Any, container: str, since: float) -> int:
    """``docker exec coda-desktop-restore`` run in the container since ``since`` (the engine's
    events; the tests' own execs are not counted)."""
    events = client.events(since=int(since), until=int(time.time()) + 1, decode=True,
                           filters={"container": container, "event": "exec_create"})
    return sum(1 for e in events if "coda-desktop-restore" in str(e.get("Action", "")))


def test_revert_really_cleans_and_keeps_the_container(desktop: ContainerDesktop,
                                                      docker_client: Any) -> None:
    _leave_an_episode_behind(desktop)
    container = desktop.container.id
    since = time.time()
    desktop.reset()
    _assert_clean(desktop)
    assert desktop.container.id == container, "the fast reset keeps the container"
    # the agent restored the home as the desktop user: no docker exec (the engine's CPU)
    assert _restores_by_exec(docker_client, container, since - 1) == 0
    assert desktop.health().ok


def test_the_engine_runs_no_healthcheck_in_a_desktop(desktop: ContainerDesktop,
                                                      docker_client: Any) -> None:
    """The image's HEALTHCHECK (for a container run by hand) is off in the provider's
    containers: the provider probes the agent itself, and the engine's exec every 10 s costs
    CPU on every desktop."""
    desktop.container.reload()
    config = desktop.container.attrs["Config"]
    assert config.get("Healthcheck", {}).get("Test") == ["NONE"]
    assert "Health" not in desktop.container.attrs["State"]


def test_the_image_font_caches_are_valid(desktop: ContainerDesktop) -> None:
    """Fontconfig takes the image's system caches as current: an application start in an
    emptied home (every reset) builds no font cache of its own (~0.13 CPU s each when it did)."""
    code, out = desktop.container.exec_run(
        ["sh", "-c", "rm -rf ~/.cache/fontconfig && fc-list >/dev/null && "
                     "ls ~/.cache/fontconfig 2>/dev/null | wc -l"], user="user")
    assert code == 0 and out.decode().strip() == "0", out


class _Containers:
    def __init__(self, containers: Any) -> None:
        self._c = containers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["environment"] = {**kwargs["environment"], "CODA_GUEST_HOME_TEMPLATE": ""}
        return self._c.run(*args, **kwargs)


class _WithoutTemplate:
    """A docker client whose desktop containers start with CODA_GUEST_HOME_TEMPLATE unset."""

    def __init__(self) -> None:
        import docker

        self._c = docker.from_env()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    @property
    def containers(self) -> _Containers:
        return _Containers(self._c.containers)


def test_an_agent_without_a_home_template_is_restored_by_docker_exec(
        prefix: str, docker_client: Any) -> None:
    """An image whose agent cannot restore (no home template: 503, as an older image's 404)
    falls back to ``coda-desktop-restore`` run as root."""
    with _provider(f"{prefix}-exec", client=_WithoutTemplate) as p:
        d = p.desktop(0)
        assert isinstance(d, ContainerDesktop)
        d.reset()
        _leave_an_episode_behind(d)
        since = time.time()
        d.reset()
        _assert_clean(d)
        assert _restores_by_exec(docker_client, d.container.id, since - 1) == 1


def test_recreate_really_cleans_with_a_new_container(prefix: str) -> None:
    with _provider(f"{prefix}-re", reset="recreate") as p:
        d = p.desktop(0)
        assert isinstance(d, ContainerDesktop)
        d.reset()
        _leave_an_episode_behind(d)
        container = d.container.id
        d.reset()
        assert d.container.id != container
        _assert_clean(d)


def _wait_exited(d: ContainerDesktop) -> None:
    def exited() -> bool:
        d.container.reload()
        return bool(d.container.status != "running")
    wait_for(exited, "the container to exit")


def test_a_killed_container_is_reported_and_replaced(desktop: ContainerDesktop) -> None:
    desktop.container.kill()
    _wait_exited(desktop)
    health = desktop.health()
    assert not health.ok and health.reason is BrokenReason.VM_OFF, health
    before = desktop.replacements
    desktop.reset()
    assert desktop.replacements == before + 1
    assert desktop.last_broken is not None and desktop.last_broken.reason is BrokenReason.VM_OFF
    assert desktop.health().ok


@pytest.mark.parametrize(("process", "reason"), [("worker.guest serve", BrokenReason.AGENT_GONE),
                                                 ("Xvfb", BrokenReason.X_CRASHED)])
def test_a_dead_process_is_reported_with_its_reason_and_replaced(
        desktop: ContainerDesktop, process: str, reason: BrokenReason) -> None:
    pids = _pids(desktop, process)
    assert len(pids) == 1, pids
    code, out = desktop.container.exec_run(["sh", "-c", f"kill -KILL {pids[0]}"],
                                             user="root")
    assert code == 0, out
    _wait_exited(desktop)
    health = desktop.health()
    assert not health.ok and health.reason is reason, health
    desktop.reset()
    assert desktop.last_broken is not None and desktop.last_broken.reason is reason
    assert desktop.health().ok


def test_close_removes_every_container(prefix: str, docker_client: Any) -> None:
    p = _provider(f"{prefix}-close")
    for slot in (0, 1):
        p.desktop(slot).reset()
    assert len(_ours(docker_client, f"{prefix}-close")) == 2
    p.close()
    assert _ours(docker_client, f"{prefix}-close") == []


def test_stale_containers_of_the_prefix_are_removed(prefix: str, docker_client: Any) -> None:
    left = _provider(f"{prefix}-stale", alive_interval_s=1, alive_ttl_s=3)
    left.desktop(3).reset()
    left._desktops.clear()  # a worker that died without closing: its container stays,
    left.close()  # its liveness mark no longer renewed (stale 3 s after its last renewal)
    stale = _ours(docker_client, f"{prefix}-stale")
    assert len(stale) == 1
    with _provider(f"{prefix}-stale") as p:
        p.desktop(0)
        assert [c.id for c in _ours(docker_client, f"{prefix}-stale")] == []


def test_slots_are_isolated(provider: DockerProvider) -> None:
    a, b = provider.desktop(1), provider.desktop(2)
    path = "/home/user/atelier/main.tex"
    for d, text in ((a, "a"), (b, "b")):
        assert isinstance(d, ContainerDesktop)
        d.reset()
        assert d.guest is not None
        d.guest.upload(path, f"\\documentclass{{article}} % {text}\n".encode())
        d.guest.launch(["texstudio", path])
    for d in (a, b):
        wait_for(partial(window, d.guest, "main.tex"), f"TeXstudio on slot {d.slot}",
                   timeout=90)
    assert isinstance(a, ContainerDesktop) and isinstance(b, ContainerDesktop)
    assert a.container.id != b.container.id and a.ports != b.ports and a.token != b.token
    assert a.guest is not None and b.guest is not None
    assert a.guest.read_file(path) != b.guest.read_file(path)


def test_the_screen_size_is_the_providers(prefix: str) -> None:
    with _provider(f"{prefix}-screen", screen=(1024, 768)) as p:
        obs = p.desktop(0).reset()
        assert (obs.width, obs.height) == (1024, 768)


def test_the_image_refuses_to_start_without_a_token(docker_client: Any, prefix: str,
                                                   desktop_image: str) -> None:
    c = docker_client.containers.run(desktop_image, detach=True,
                                     labels={PREFIX_LABEL: prefix}, network_mode="none")
    try:
        assert c.wait(timeout=60)["StatusCode"] == 2
        assert "CODA_GUEST_TOKEN" in c.logs().decode()
    finally:
        c.remove(force=True)
