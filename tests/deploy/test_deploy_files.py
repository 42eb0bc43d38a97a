"""The deployment files: compose files valid against the Compose spec (and accepted by
docker-compose 1.29 when installed), launch scripts that parse and build the right `vllm serve`
command, and compose environments that the services' settings classes accept, both on the CPU
path (docker-compose.yml alone: replay models, the trainer on the tiny model) and on GPU
servers (with deploy/compose/gpu.yml). Nothing here runs a container: tests/deploy/
test_compose_e2e.py brings the stack up with a real engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from pydantic_settings import BaseSettings

from executor_service.settings import ExecutorSettings
from judge_service.settings import JudgeSettings
from master.settings import MasterSettings
from planner_service.settings import PlannerSettings
from worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
STACK = ROOT / "docker-compose.yml"
VM_SERVER = DEPLOY / "compose" / "vm-server.yml"
GPU = DEPLOY / "compose" / "gpu.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
SCRIPTS = sorted((DEPLOY / "vllm").glob("*.sh"))

SETTINGS: dict[str, tuple[type[BaseSettings], str]] = {
    "master": (MasterSettings, "CODA_"),
    "planner": (PlannerSettings, "CODA_PLANNER_"),
    "executor": (ExecutorSettings, "CODA_EXECUTOR_"),
    "judge": (JudgeSettings, "CODA_JUDGE_"),
}

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?err}``, ``$$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        current = env.get(name)
        if op in (":-", ":?") and not current:
            current = None
        if current is not None:
            return current
        if op in ("?", ":?"):
            raise KeyError(f"{name}: required ({arg})")
        return arg if op in ("-", ":-") else ""

    return _VAR.sub(sub, value)


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def compose(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file: mappings merge key by key, the rest is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    return override


def gpu_stack() -> dict[str, Any]:
    """docker-compose.yml with deploy/compose/gpu.yml on top."""
    merged: dict[str, Any] = merge(compose(STACK), compose(GPU))
    return merged


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def field_names(cls: type[BaseSettings], prefix: str) -> set[str]:
    """Every environment variable name the settings class reads."""
    names: set[str] = set()
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        if choices:
            names.update(str(c).upper() for c in choices)
        else:
            names.add(f"{prefix}{name}".upper())
    return names


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for key in list(os.environ):
        if key.startswith("CODA_") or key in ("DATABASE_URL", "REDIS_URL"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(ROOT / "deploy")  # no .env here: the settings read only what is set
    yield monkeypatch


# --- compose files ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [STACK, GPU, VM_SERVER], ids=lambda p: p.name)
def test_compose_file_matches_the_compose_spec(path: Path) -> None:
    # check-jsonschema is a dev dependency (pyproject), so this always runs
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stack_has_every_part() -> None:
    services = compose(STACK)["services"]
    assert set(services) >= {"postgres", "redis", "master", "planner", "executor", "judge",
                             "trainer"}
    assert not any(name.startswith("vllm") for name in services), "vLLM is gpu.yml's"
    assert services["postgres"]["image"] == "${CODA_POSTGRES_IMAGE:-postgres:16}"
    assert services["redis"]["image"] == "${CODA_REDIS_IMAGE:-redis:7}"
    assert "--appendonly" in services["redis"]["command"]
    assert "/readyz" in " ".join(services["master"]["healthcheck"]["test"])
    assert services["master"]["env_file"] == "${CODA_ENV_FILE:-.env}"
    for name, service in services.items():
        assert "deploy" not in service, f"{name}: no GPU reservation on the CPU path"
        for port in service.get("ports", []):  # published on CODA_PUBLISH_ADDRESS only
            assert port.startswith("${CODA_PUBLISH_ADDRESS:-127.0.0.1}:"), (name, port)
    gpu = gpu_stack()["services"]
    for name in ("vllm-planner", "vllm-executor", "vllm-judge"):
        devices = gpu[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
        assert "vllm/vllm-openai" in gpu[name]["image"]
        script = gpu[name]["command"][0]
        assert (DEPLOY / "vllm" / Path(script).name).is_file(), script
        role = name.removeprefix("vllm-")
        assert gpu[role]["depends_on"] == {name: {"condition": "service_started"}}
    devices = gpu["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_no_top_level_name() -> None:
    # docker-compose 1.29 (the one Debian packages) refuses it: -p / COMPOSE_PROJECT_NAME
    for path in (STACK, GPU, VM_SERVER):
        assert "name" not in compose(path), path.name


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_compose_env_vars_are_settings_fields(name: str, gpu: bool) -> None:
    cls, prefix = SETTINGS[name]
    stack = gpu_stack() if gpu else compose(STACK)
    env = service_env(stack["services"][name])
    used = {k for k in env if k.startswith("CODA_")}
    assert used, f"{name}: no CODA_* settings in docker-compose.yml"
    unknown = used - field_names(cls, prefix)
    assert not unknown, f"{name}: not fields of {cls.__name__}: {sorted(unknown)}"


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_compose_env_validates_with_the_example_values(name: str, gpu: bool,
                                                       clean_env: pytest.MonkeyPatch,
                                                       ) -> None:
    cls, _ = SETTINGS[name]
    example = read_env_file(ENV_EXAMPLE)
    stack = gpu_stack() if gpu else compose(STACK)
    for key, raw in service_env(stack["services"][name]).items():
        clean_env.setenv(key, interpolate(raw, example))
    settings: Any = cls()
    replays = "/app/examples/replays"
    if name == "planner":
        if gpu:
            assert settings.spec().base_url == "http://vllm-planner:8000/v1"
            assert settings.model == example["CODA_VLLM_PLANNER_MODEL"]
        else:
            assert settings.backend == "replay"
            assert settings.model == f"{replays}/demo.planner.json"
    if name == "executor":
        assert settings.backend == ("openai" if gpu else "replay")
        assert settings.model == (example["CODA_VLLM_EXECUTOR_MODEL"] if gpu
                                  else f"{replays}/demo.executor.json")
    if name == "judge":
        (spec,) = settings.models
        assert spec.backend == ("openai" if gpu else "replay")
        assert spec.model == (example["CODA_VLLM_JUDGE_MODEL"] if gpu
                              else f"{replays}/demo.judge.json")
    if name in ("planner", "executor", "judge"):
        settings.check_secrets()  # the example's tokens are long enough to start
        assert settings.artifacts_url == "/data/artifacts"
    if name == "master":
        assert settings.database_url.startswith("postgresql+asyncpg://coda:")
        assert settings.tokens()[1] == example["CODA_WORKER_TOKENS"].split(",")


def test_replay_files_of_the_cpu_stack_are_in_the_models_image() -> None:
    dockerfile = (DEPLOY / "docker" / "Dockerfile.models").read_text()
    assert "COPY examples/replays ./examples/replays" in dockerfile and "WORKDIR /app" in dockerfile
    for role in ("planner", "executor", "judge"):
        assert (ROOT / "examples" / "replays" / f"demo.{role}.json").is_file()


def test_compose_commands_are_coda_commands() -> None:
    from coda_app.cli import app

    known = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    pending: set[str] = set()
    for path in (STACK, VM_SERVER):
        for name, service in compose(path)["services"].items():
            command = service.get("command")
            if command and command[0] == "coda":
                assert command[1] in known | pending, f"{path.name}: {name}: {command}"


def test_vm_server_worker_speaks_http_to_the_master_only() -> None:
    (worker,) = compose(VM_SERVER)["services"].values()
    env = service_env(worker)
    assert worker["command"] == ["coda", "worker"]
    assert "CODA_WORKER_MASTER_URL" in env and "CODA_WORKER_TOKEN" in env
    leaked = [k for k in env if any(s in k for s in ("DATABASE", "REDIS", "POSTGRES"))]
    assert not leaked, leaked
    unknown = {k for k in env if k.startswith("CODA_")} - field_names(WorkerSettings,
                                                                        "CODA_WORKER_")
    assert not unknown, f"not fields of WorkerSettings: {sorted(unknown)}"


def test_vm_server_worker_env_validates_with_the_example_values(
        clean_env: pytest.MonkeyPatch) -> None:
    (worker,) = compose(VM_SERVER)["services"].values()
    example = read_env_file(ENV_EXAMPLE)
    for key, raw in service_env(worker).items():
        clean_env.setenv(key, interpolate(raw, example))
    settings = WorkerSettings()
    assert settings.master_url == example["CODA_MASTER_URL"]
    assert settings.provider == "docker"
    assert settings.provider_options["image"] == "coda-desktop:latest"
    assert settings.service_token is not None


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_trainer_and_minio_are_opt_in_profiles(clean_env: pytest.MonkeyPatch, gpu: bool) -> None:
    from trainer.config import TrainerConfig

    services = (gpu_stack() if gpu else compose(STACK))["services"]
    assert services["trainer"]["profiles"] == ["train"]
    assert services["minio"]["profiles"] == ["minio"]
    example = read_env_file(ENV_EXAMPLE)
    env = service_env(services["trainer"])
    for key, raw in env.items():
        if key.startswith("CODA_TRAINER_"):
            clean_env.setenv(key, interpolate(raw, example))
    cfg = TrainerConfig()
    assert cfg.planner_urls == ["http://planner:8001"]
    if gpu:
        assert cfg.device == "cuda" and interpolate(env["CODA_TINY_MODEL_DIR"], example) == ""
        assert "${CODA_MODELS_DIR:-./models}:/data/models:ro" in services["trainer"]["volumes"]
    else:  # the tiny model the models image's entrypoint builds, trained on the CPU
        assert cfg.device == "cpu"
        assert cfg.model == interpolate(env["CODA_TINY_MODEL_DIR"], example)
        assert "deploy" not in services["trainer"]


def _compose_config(files: list[Path], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = ["docker-compose"]
    for f in files:
        cmd += ["-f", str(f)]
    return subprocess.run([*cmd, "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                          check=False, env={"PATH": os.environ.get("PATH", ""), **env})


@pytest.mark.parametrize("files", [[STACK], [STACK, GPU], [VM_SERVER]],
                         ids=["cpu", "gpu", "vm-server"])
def test_docker_compose_v1_accepts_the_files(files: list[Path], tmp_path: Path) -> None:
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("docker-compose missing (scripts/docker-engine.sh start installs it)")
        pytest.skip("docker-compose (1.29) is not installed")
    env = read_env_file(ENV_EXAMPLE)
    env_file = tmp_path / "example.env"
    env_file.write_text(ENV_EXAMPLE.read_text())
    proc = _compose_config(files, {**env, "CODA_ENV_FILE": str(env_file)})
    assert proc.returncode == 0, proc.stderr
    # a required secret that is missing stops compose with its message
    if files[0] == STACK:
        env.pop("POSTGRES_PASSWORD")
        proc = _compose_config(files, {**env, "CODA_ENV_FILE": str(env_file)})
        assert proc.returncode != 0 and "set POSTGRES_PASSWORD" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def run_script(script: Path, tmp_path: Path, **env: str) -> tuple[list[str], dict[str, str]]:
    """Run a launch script with a fake `vllm` that records its argv and environment."""
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT_ARGS"\nenv > "$OUT_ENV"\n')
    fake.chmod(0o755)
    args_file, env_file = tmp_path / "args", tmp_path / "env"
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CODA_VLLM_BIN": str(fake),
            "OUT_ARGS": str(args_file), "OUT_ENV": str(env_file)}
    subprocess.run(["bash", str(script)], env={**base, **env}, check=True,
                   capture_output=True, text=True)
    return args_file.read_text().splitlines(), read_env_file(env_file)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_planner_script_serves_the_paper_planner_with_runtime_lora(tmp_path: Path) -> None:
    args, env = run_script(DEPLOY / "vllm" / "planner.sh", tmp_path)
    assert args[:2] == ["serve", "OpenIXCLab/CODA-PLANNER-TARS-32B"]
    assert "--enable-lora" in args
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert flag(args, "--tensor-parallel-size") == "4"
    assert flag(args, "--limit-mm-per-prompt") == '{"image":5}'
    assert int(flag(args, "--max-lora-rank")) >= 8


def test_planner_script_takes_settings_from_env(tmp_path: Path) -> None:
    args, _ = run_script(DEPLOY / "vllm" / "planner.sh", tmp_path, CODA_VLLM_PLANNER_TP="2",
                         CODA_VLLM_PLANNER_MODEL="/models/p", CODA_VLLM_PLANNER_MAX_LORA_RANK="16",
                         CODA_VLLM_PLANNER_PORT="9100", CODA_VLLM_API_KEY="k" * 20)
    assert args[1] == "/models/p"
    assert flag(args, "--tensor-parallel-size") == "2"
    assert flag(args, "--max-lora-rank") == "16"
    assert flag(args, "--port") == "9100"
    assert flag(args, "--api-key") == "k" * 20


@pytest.mark.parametrize(("script", "model", "tp"), [
    ("executor.sh", "ByteDance-Seed/UI-TARS-1.5-7B", "2"),
    ("judge.sh", "Qwen/Qwen2.5-VL-72B-Instruct", "4"),
])
def test_executor_and_judge_scripts(tmp_path: Path, script: str, model: str, tp: str) -> None:
    args, _ = run_script(DEPLOY / "vllm" / script, tmp_path)
    assert args[:2] == ["serve", model]
    assert flag(args, "--tensor-parallel-size") == tp
    assert "--enable-lora" not in args
    assert "--api-key" not in args
    assert flag(args, "--limit-mm-per-prompt").startswith('{"image":')


# --- images and units -------------------------------------------------------------------------


def test_dockerfiles_install_the_right_extras() -> None:
    docker = DEPLOY / "docker"
    master = (docker / "Dockerfile.master").read_text()
    assert "RUN python requirements.py master > " in master
    assert "pip install --index-url" not in master
    models = (docker / "Dockerfile.models").read_text()
    assert "RUN python requirements.py models trainer > " in models
    assert "RUN python requirements.py worker > " in (docker / "Dockerfile.worker").read_text()
    for text in (master, models):  # the dependencies' layer comes before the code's
        assert text.index("requirements.py") < text.index("COPY coda ./coda")
        assert "--no-deps ." in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = subprocess.run([sys.executable, str(docker / "requirements.py"), "--pyproject",
                             str(ROOT / "pyproject.toml"), "worker"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    assert not any(r.startswith("coda[") for r in listed)  # its own extras resolved
    assert {*project["dependencies"], *project["optional-dependencies"]["guest"]} <= set(listed)
    assert any(r.startswith("docker==") for r in listed)
    extras = project["optional-dependencies"]
    assert not any(d.startswith("torch") for d in extras["master"] + extras["worker"])
    (pin,) = [d for d in extras["models"] if d.startswith("torch==")]
    pinned = re.search(r"ARG TORCH_VERSION=(\S+)", models)
    assert pinned and pin == f"torch=={pinned.group(1)}", "Dockerfile.models torch pin drifted"


@pytest.mark.parametrize("name", ["master", "models", "worker"])
def test_python_images_take_their_base_and_pip_flags(name: str) -> None:
    text = (DEPLOY / "docker" / f"Dockerfile.{name}").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in text
    assert 'ARG PIP_INSTALL_FLAGS=""' in text
    installs = re.findall(r"pip install ([^\n]*)", text)
    assert installs and all("$PIP_INSTALL_FLAGS" in line for line in installs), installs


@pytest.mark.parametrize("name", ["postgres", "redis"])
def test_store_images_come_from_debian_packages(name: str) -> None:
    text = (DEPLOY / "docker" / f"Dockerfile.{name}").read_text()
    assert "ARG BASE_IMAGE=debian:bookworm-slim\nFROM ${BASE_IMAGE}" in text
    assert "apt-get install" in text and "HEALTHCHECK" in text
    entry = DEPLOY / "docker" / f"{name}-entrypoint.sh"
    assert os.access(entry, os.X_OK), entry
    proc = subprocess.run(["sh", "-n", str(entry)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("unit", sorted((DEPLOY / "systemd").glob("*.service")),
                         ids=lambda p: p.name)
def test_systemd_units(unit: Path) -> None:
    text = unit.read_text()
    for section in ("[Unit]", "[Service]", "[Install]"):
        assert section in text, f"{unit.name}: no {section}"
    assert re.search(r"^ExecStart=/", text, re.M), f"{unit.name}: ExecStart must be absolute"
