"""`coda vllm serve`'s command line per role (pure; no vLLM needed) and the installer's pins."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from coda_app.cli import app
from coda_app.vllm import INSTALL_SCRIPT, VLLM_VERSION, Role, ServeConfig, serve_command


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_planner_gets_runtime_lora() -> None:
    cmd, env = serve_command(ServeConfig(role=Role.planner, model="/m", served_name="tiny",
                                         port=9000, max_lora_rank=16, kv_cache_gib=1,
                                         extra=("--enforce-eager",)), "/venv/bin/python")
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert (flag(cmd, "--model"), flag(cmd, "--served-model-name"), flag(cmd, "--port")) == (
        "/m", "tiny", "9000")
    assert "--enable-lora" in cmd and flag(cmd, "--max-lora-rank") == "16"
    assert json.loads(flag(cmd, "--limit-mm-per-prompt")) == {"image": 5}
    assert flag(cmd, "--max-model-len") == "32768" and cmd[-1] == "--enforce-eager"
    assert env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_executor_and_judge_have_no_lora() -> None:
    cmd, env = serve_command(ServeConfig(role=Role.judge, model="/m"), "python")
    assert "--enable-lora" not in cmd and env == {}
    assert json.loads(flag(cmd, "--limit-mm-per-prompt")) == {"image": 16}
    assert flag(cmd, "--served-model-name") == "/m" and flag(cmd, "--max-model-len") == "65536"
    cmd, _ = serve_command(ServeConfig(role=Role.executor, model="/m", images=3,
                                       max_model_len=4096, api_key="k"), "python")
    assert json.loads(flag(cmd, "--limit-mm-per-prompt")) == {"image": 3}
    assert flag(cmd, "--max-model-len") == "4096" and flag(cmd, "--api-key") == "k"


def test_the_installer_pins_the_same_version() -> None:
    text = INSTALL_SCRIPT.read_text()
    assert re.search(rf'^VLLM_VERSION="{re.escape(VLLM_VERSION)}"$', text, re.M)
    reqs = Path(INSTALL_SCRIPT).parents[1] / "deploy" / "vllm" / "requirements-cpu.txt"
    lines = [ln for ln in reqs.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines and all("==" in ln for ln in lines)  # every requirement pinned
    assert not any(ln.startswith(("torch==", "torchvision==", "vllm")) for ln in lines)


def test_serve_without_vllm_says_how_to_install(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CODA_VLLM_PYTHON", str(tmp_path / "none"))
    result = CliRunner().invoke(app, ["vllm", "serve", "planner", "/m", "--no-install"])
    assert result.exit_code == 2
    assert "scripts/vllm-install.sh" in result.output
