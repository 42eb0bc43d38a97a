"""One real vLLM server (CPU build, ``scripts/vllm-install.sh``) for the tests of this folder
(package scope: it stops when they are done, not at the end of the whole suite).

The tiny Qwen2.5-VL is the same for the three roles, so one server started as the planner
(``--enable-lora``) answers the planner's, executor's and judge's requests: one start-up
(~25-80 s on 2 busy cores) per run, plus the restarts of the kill -9 tests; ``test_stack.py``
starts the two servers of ``coda up --vllm`` itself. Without vLLM these tests skip, except under
``CI=true`` where they fail: CI installs vLLM (``scripts/test.sh``) and must run them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from coda.procs import free_port
from coda_app.vllm import Role, ServeConfig, start_server, stop_server, vllm_python

SERVED_NAME = "tiny"
MAX_MODEL_LEN = 4096
"""Small enough that a long trajectory exceeds it (the judge's fitting is tested against it)."""
WARM_UP_TIMEOUT_S = 120.0


def require_vllm() -> Path:
    python = vllm_python()
    if python is None:
        message = "vLLM is not installed: run scripts/vllm-install.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI must run the vllm tests)", pytrace=False)
        pytest.skip(message)
    return python


@dataclass
class VllmServer:
    """A running vLLM server; :meth:`restart` starts it again on the same port."""

    config: ServeConfig
    python: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        self.proc = start_server(self.config, python=self.python, log_path=self.log_path)
        warm_up(self.url)

    def kill(self) -> None:
        """SIGKILL of the server and its engine processes, as a crash (no clean shutdown)."""
        assert self.proc is not None
        stop_server(self.proc, kill=True)

    def stop(self) -> None:
        if self.proc is not None:
            stop_server(self.proc)


def warm_up(url: str) -> None:
    """One short request (vLLM's first request takes ~17 s on this machine)."""
    body = {"model": SERVED_NAME, "max_tokens": 2,
            "messages": [{"role": "user", "content": "hello"}]}
    httpx.post(f"{url}/v1/chat/completions", json=body,
               timeout=WARM_UP_TIMEOUT_S).raise_for_status()


@pytest.fixture(scope="package")
def vllm_server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path,
                ) -> Iterator[VllmServer]:
    """The tiny model behind vLLM: served as ``tiny``, LoRA on, 16 images, float32 weights
    (the trainer's dtype, for the log-prob parity), a 1 GiB KV cache."""
    python = require_vllm()
    config = ServeConfig(role=Role.planner, model=str(tiny_model_dir), served_name=SERVED_NAME,
                         port=free_port(), max_model_len=MAX_MODEL_LEN, images=16,
                         max_lora_rank=16, dtype="float32", kv_cache_gib=1)
    server = VllmServer(config, python, tmp_path_factory.mktemp("vllm") / "vllm.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def vllm_url(vllm_server: VllmServer) -> str:
    return vllm_server.url
