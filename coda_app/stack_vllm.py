"""``coda up --vllm``: the tiny model served by vLLM's own servers for the three roles.

Two servers, started together: one for the planner (runtime LoRA on, the trainer's versions
are loaded into it by the planner service, which pulls them from the master) and one that the
executor and the judge share. One server per role would be the production layout
(``deploy/vllm/*.sh``); on a small machine (2 cores, where each vLLM server takes ~3.3 GB and a
minute or more to start) the executor and the judge share one, since they serve the same tiny
model without adapters. Images reach vLLM at most ``TINY_MAX_PIXELS`` (its processor's
``max_pixels``), the size the trainer re-encodes them at, so the planner's log-probs and the
trainer's are of the same prompt.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from coda.logging import get_logger
from coda.procs import free_port
from coda_app.vllm import Role, ServeConfig, install, start_server, stop_server, vllm_python

log = get_logger("coda_app.stack_vllm")

SERVED_NAME = "tiny-qwen25vl"
"""The name the tiny model is served under (``coda_app.stack.is_tiny`` recognises it)."""
TINY_MAX_PIXELS = 56 * 56
MAX_MODEL_LEN = 8192
SERVERS: dict[str, tuple[Role, tuple[str, ...]]] = {
    "planner": (Role.planner, ("planner",)),
    "executor-judge": (Role.judge, ("executor", "judge")),
}
"""server name -> (the role whose defaults it takes, the roles it serves)."""


@dataclass
class VllmServers:
    """The running servers and, per CODA role, the URL of the server that serves it."""

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    configs: dict[str, ServeConfig] = field(default_factory=dict)
    python: Path | str = ""
    logs: Path | None = None

    def dead(self) -> list[str]:
        return [f"vllm-{name}" for name, p in self.procs.items() if p.poll() is not None]

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def restart(self, name: str) -> None:
        """Start server ``name`` again on its port (``coda up``'s supervision), once what is
        left of it (its engine processes) is gone; returns once it answers."""
        old = self.procs.pop(name, None)
        if old is not None:
            stop_server(old, kill=True)
        log_path = self.logs / f"vllm-{name}.log" if self.logs else None
        self.procs[name] = start_server(self.configs[name], python=self.python,
                                        log_path=log_path)

    def stop(self) -> None:
        """Each server and its engine processes (nothing is left holding the model)."""
        for name, proc in self.procs.items():
            stop_server(proc)
            log.info("stack.vllm_stopped", server=name)
        self.procs.clear()


def server_config(name: str, model_dir: Path) -> ServeConfig:
    role, _ = SERVERS[name]
    return ServeConfig(
        role=role, model=str(model_dir), served_name=SERVED_NAME, port=free_port(),
        max_model_len=MAX_MODEL_LEN, max_lora_rank=16, dtype="float32", kv_cache_gib=1,
        extra=("--mm-processor-kwargs", json.dumps({"max_pixels": TINY_MAX_PIXELS})))


def start_servers(model_dir: Path, logs: Path) -> VllmServers:
    """Start the servers together and return once each answers (all stopped if one fails)."""
    python = vllm_python() or install()
    configs = {name: server_config(name, model_dir) for name in SERVERS}
    out = VllmServers(configs=configs, python=python, logs=logs)

    def start(name: str) -> None:
        proc = start_server(configs[name], python=python, log_path=logs / f"vllm-{name}.log")
        out.procs[name] = proc

    try:
        with ThreadPoolExecutor(len(configs)) as pool:
            list(pool.map(start, configs))
    except BaseException:
        out.stop()
        raise
    for name, config in configs.items():
        for role in SERVERS[name][1]:
            out.urls[role] = f"http://{config.host}:{config.port}/v1"
        log.info("stack.vllm_ready", server=name, url=f"http://{config.host}:{config.port}")
    return out
