"""The local provider: the contract check, resets that really clean, broken desktops detected
with a typed reason and replaced, and nothing left running afterwards."""

from __future__ import annotations

import os
import signal
from functools import partial

from coda import procs
from coda.contracts.desktop import BrokenReason
from tests.fixtures.waiting import wait_for
from worker.providers.conformance import check_desktop
from worker.providers.local import LocalDesktop, LocalProvider

from .helpers import window


def test_local_desktop_passes_the_provider_contract(provider: LocalProvider) -> None:
    check_desktop(provider.desktop(5))


def test_reset_really_cleans(desktop: LocalDesktop) -> None:
    guest = desktop.guest
    assert guest is not None
    out = guest.execute("echo episode-1 > ~/atelier/left-behind.txt && echo x > ~/.secret",
                        shell=True)
    assert out.returncode == 0
    guest.launch(["xterm", "-T", "episode-1"])
    guest.launch("sleep 600 &", shell=True)
    wait_for(lambda: window(guest, "episode-1"), "the first episode's xterm")
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    assert guest.read_file(f"{desktop.home}/atelier/left-behind.txt") is None
    assert guest.read_file(f"{desktop.home}/.secret") is None
    assert guest.windows() == []
    assert procs.marked_pids(desktop.id) == []
    texstudio_ini = desktop.home / ".config" / "texstudio" / "texstudio.ini"
    assert texstudio_ini.is_file(), "the home template is restored"


def test_a_dead_agent_is_reported_and_the_desktop_replaced(desktop: LocalDesktop) -> None:
    agent = desktop._procs["agent"]
    agent.kill()
    agent.wait()
    health = desktop.health()
    assert not health.ok and health.reason is BrokenReason.AGENT_GONE
    before = desktop.replacements
    desktop.reset()
    assert desktop.replacements == before + 1
    assert desktop.last_broken is not None
    assert desktop.last_broken.reason is BrokenReason.AGENT_GONE
    assert desktop.health().ok


def test_a_crashed_x_server_is_reported_and_the_desktop_replaced(desktop: LocalDesktop) -> None:
    os.kill(desktop._procs["xvfb"].pid, signal.SIGKILL)
    desktop._procs["xvfb"].wait()
    health = desktop.health()
    assert not health.ok and health.reason is BrokenReason.X_CRASHED
    desktop.reset()
    assert desktop.health().ok
    assert desktop.last_broken is not None
    assert desktop.last_broken.reason is BrokenReason.X_CRASHED


def test_a_crashed_display_is_seen_by_the_agent_too(desktop: LocalDesktop) -> None:
    """The agent itself reports a display it lost (what a VM running it would show)."""
    guest = desktop.guest
    assert guest is not None
    os.kill(desktop._procs["xvfb"].pid, signal.SIGKILL)
    desktop._procs["xvfb"].wait()
    health = guest.health()
    assert not health.ok and health.reason is BrokenReason.X_CRASHED
    desktop.reset()
    assert desktop.health().ok


def test_close_stops_every_process(desktop_host: None) -> None:
    provider = LocalProvider()
    d = provider.desktop(0)
    d.reset()
    assert isinstance(d, LocalDesktop) and d.guest is not None
    d.guest.launch(["xterm"])
    wait_for(lambda: window(d.guest, "xterm") if d.guest else None, "xterm")
    pids = [p.pid for p in d._procs.values()] + procs.marked_pids(d.id)
    assert len(pids) >= 4
    root = provider.root
    provider.close()
    assert not [p for p in pids if procs.alive(p)]
    assert not root.exists()


def test_slots_are_isolated_even_for_single_instance_apps(provider: LocalProvider) -> None:
    """TeXstudio hands a second start to the running instance; each slot gets its own."""
    a, b = provider.desktop(1), provider.desktop(2)
    for d in (a, b):
        d.reset()
        assert d.guest is not None
        d.guest.upload(f"{d.home}/atelier/{d.id}.tex", b"\\documentclass{article}\n")
        d.guest.launch(["texstudio", f"{d.home}/atelier/{d.id}.tex"])
    for d in (a, b):
        wait_for(partial(window, d.guest, f"{d.id}.tex"), f"TeXstudio on {d.id}")
    assert a.display != b.display and a.home != b.home

