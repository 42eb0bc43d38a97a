"""The guest's side of the vsphere provider's token hand-over: ``guestinfo.coda.token`` read
from vcsim's environment variable or through VMware Tools' RPC (``vmware-rpctool``: a stand-in
script here, VMware Tools cannot run on this host), taken by the desktop session when no
CODA_GUEST_TOKEN is given, and kept from every command the agent starts; and the session's
restore of the home at boot (a simulator VM whose disk a revert does not reset)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coda.guestenv import guestinfo_env_name
from worker.guest.commands import child_env
from worker.guest.guestinfo import read_guestinfo
from worker.guest.home import HomeTemplateMissing, restore_home
from worker.guest.session import SessionError, SessionSettings

TOKEN = "guestinfo-token-0123456789"


def _rpctool(bin_dir: Path, body: str) -> None:
    tool = bin_dir / "vmware-rpctool"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


def test_vcsim_hands_guestinfo_over_as_an_environment_variable() -> None:
    assert guestinfo_env_name("coda.token") == "VMX_GUESTINFO_CODA_TOKEN"
    assert read_guestinfo("coda.token", {"VMX_GUESTINFO_CODA_TOKEN": TOKEN}) == TOKEN


def test_vmware_tools_rpc_is_asked_otherwise(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _rpctool(tmp_path, f'[ "$1" = "info-get guestinfo.coda.token" ] && echo {TOKEN} && exit 0\n'
                       'echo "No value found"; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert read_guestinfo("coda.token", {}) == TOKEN
    assert read_guestinfo("coda.other", {}) is None  # unset: the tool says so and exits 1


def test_no_tools_and_no_variable_is_none(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert read_guestinfo("coda.token", {}) is None


def test_the_session_takes_the_guestinfo_token_when_none_is_given() -> None:
    s = SessionSettings.from_env({"VMX_GUESTINFO_CODA_TOKEN": TOKEN})
    assert s.token == TOKEN and s.home_template is None
    given = SessionSettings.from_env({"CODA_GUEST_TOKEN": "given-token-0123456789",
                                      "VMX_GUESTINFO_CODA_TOKEN": TOKEN})
    assert given.token == "given-token-0123456789"
    with pytest.raises(SessionError, match="guestinfo"):
        SessionSettings.from_env({"VMX_GUESTINFO_CODA_TOKEN": "short"})


def test_commands_the_agent_starts_never_see_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_GUEST_TOKEN", TOKEN)
    monkeypatch.setenv("VMX_GUESTINFO_CODA_TOKEN", TOKEN)
    monkeypatch.setenv("VMX_GUESTINFO", "true")
    env = child_env("slot-1", {"QT_SCALE_FACTOR": "1"})
    assert TOKEN not in env.values() and not any(k.startswith("VMX_GUESTINFO") for k in env)
    assert env["QT_SCALE_FACTOR"] == "1" and env["CODA_DESKTOP"] == "slot-1"


def test_the_home_is_restored_from_its_template_at_boot(tmp_path: Path) -> None:
    template, home, tmp = tmp_path / "template", tmp_path / "home", tmp_path / "tmp"
    for d in (template / "atelier", home / "atelier", tmp / ".X11-unix"):
        d.mkdir(parents=True)
    (template / "atelier" / "main.tex").write_text("clean")
    (home / "atelier" / "main.tex").write_text("edited")
    (home / "left.txt").write_text("episode")
    (tmp / "left.txt").write_text("episode")
    (tmp / ".X0-lock").write_text("x")
    (tmp / "coda-guest-bin-1000-abc").mkdir()
    restore_home(template, home, temporary=[tmp])
    assert sorted(p.name for p in home.iterdir()) == ["atelier"]
    assert (home / "atelier" / "main.tex").read_text() == "clean"
    assert sorted(p.name for p in tmp.iterdir()) == [".X0-lock", ".X11-unix",
                                                      "coda-guest-bin-1000-abc"]
    with pytest.raises(HomeTemplateMissing, match="not a directory"):
        restore_home(tmp_path / "missing", home)
