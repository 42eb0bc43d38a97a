"""Every flag CODA passes to vLLM (``coda vllm serve`` and ``deploy/vllm/*.sh``) is one the
pinned vLLM's server accepts (its ``--help=all``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from coda_app.vllm import Role, ServeConfig, serve_command
from tests.vllm.conftest import require_vllm

pytestmark = pytest.mark.vllm

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "vllm"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")


@pytest.fixture(scope="module")
def accepted() -> set[str]:
    python = require_vllm()
    out = subprocess.run([str(python), "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return set(FLAG.findall(out))


def script_flags(path: Path) -> set[str]:
    code = "\n".join(line for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    return set(FLAG.findall(code))


def test_coda_vllm_serve_flags_are_vllms(accepted: set[str]) -> None:
    for role in Role:
        cmd, _ = serve_command(ServeConfig(role=role, model="m", api_key="k"), "python")
        flags = {a for a in cmd if a.startswith("--")}
        assert flags <= accepted, flags - accepted


@pytest.mark.parametrize("script", sorted(DEPLOY.glob("*.sh")), ids=lambda p: p.name)
def test_deploy_script_flags_are_vllms(script: Path, accepted: set[str]) -> None:
    flags = script_flags(script)
    assert flags <= accepted, flags - accepted


def test_coda_up_vllm_flags_are_vllms(accepted: set[str]) -> None:
    from coda_app.stack_vllm import SERVERS, server_config

    for name in SERVERS:
        cmd, _ = serve_command(server_config(name, Path("m")), "python")
        flags = {a for a in cmd if a.startswith("--")}
        assert flags <= accepted, flags - accepted
