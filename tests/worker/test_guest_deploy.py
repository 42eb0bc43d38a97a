"""The guest agent's deployment: the systemd unit, the light ``guest`` extra, ``coda guest``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from coda.guestenv import MIN_TOKEN_LENGTH
from coda_app.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_systemd_unit_runs_the_agent_with_a_token_file_or_guestinfo() -> None:
    text = (ROOT / "deploy" / "guest" / "coda-guest.service").read_text()
    for section in ("[Unit]", "[Service]", "[Install]"):
        assert section in text
    assert re.search(r"^ExecStart=/\S+/coda guest serve", text, re.M)
    # optional: without it the agent reads the VM's guestinfo.coda.token (vsphere provider)
    assert "EnvironmentFile=-/etc/coda/guest.env" in text
    assert "Environment=DISPLAY=:0" in text and "Restart=always" in text


def test_guest_extra_is_light_and_pinned() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    guest = extras["guest"]
    assert all("==" in d for d in guest), guest
    names = {re.split(r"[\[=]", d)[0] for d in guest}
    assert not names & {"torch", "transformers", "sqlalchemy", "asyncpg", "redis"}
    assert {"fastapi", "uvicorn", "mss", "pyautogui", "pillow"} <= names
    assert "coda[guest]" in extras["worker"]


def test_coda_guest_cli() -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["guest", "token"])
    assert made.exit_code == 0 and len(made.output.strip()) >= MIN_TOKEN_LENGTH
    helped = runner.invoke(app, ["guest", "serve", "--help"])
    assert helped.exit_code == 0 and "--throwaway-local-display" in helped.output
