"""The processes ``coda up`` runs beside the master: the planner, executor and judge services,
a local worker with Xvfb slots and (opt-in) the trainer, each a real process with its log in
``<home>/logs``.

Models: ``tiny`` (default) serves the tiny random Qwen2.5-VL built offline on first use (runs
anywhere; its output is garbage, which the worker records as step errors); ``replay`` serves
recorded outputs for the bundled TeXstudio task C-02 (planner, executor and judge), so the
whole loop (success, verdicts, groups, training, new versions) runs on any machine; a model
directory or a served model name with ``--*-url`` (an OpenAI-compatible server such as vLLM)
runs real models; ``--vllm`` serves the tiny model with vLLM's own servers, started and stopped
with the stack (``coda_app.stack_vllm``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from coda.inference.spec import BackendSpec
from coda.logging import get_logger
from coda.procs import start_process, stop_process
from coda_app.services import ServiceProcess
from coda_app.stack_shape import StackShape
from coda_app.stack_vllm import SERVED_NAME as VLLM_SERVED_NAME
from coda_app.stack_vllm import VllmServers, start_servers
from coda_app.supervise import Child

log = get_logger("coda_app.stack")

ROOT = Path(__file__).resolve().parent.parent
REPLAYS = ROOT / "examples" / "replays"
REPLAY_TASKS = [ROOT / "examples" / "scienceboard" / "VM" / app / f"{name}.json"
                for app, name in (("TeXstudio", "C-02"), ("KAlgebra", "C-01"))]
"""The demo batch of ``--models replay``: the bundled tasks examples/replays/ has recordings for
(``demo.<role>.json`` answers all of them), but GRASS GIS A-03, whose stand-in data sets a
machine may not have built."""
TINY_DEMO_TASKS = [ROOT / "examples" / "scienceboard" / "VM" / app / f"{name}.json"
                   for app, name in (("TeXstudio", "B-01"), ("TeXstudio", "C-02"),
                                     ("KAlgebra", "A-01"))]
"""Bundled tasks whose applications the local slot image has (others need, e.g., VS Code)."""
ROLES = ("planner", "executor", "judge")


def is_tiny(spec: BackendSpec) -> bool:
    """The tiny random model, here or served by vLLM (``coda up --vllm``): small images and
    outputs keep its garbage short."""
    return spec.backend in ("transformers", "openai") and "tiny-qwen25vl" in spec.model


def chosen(spec: BackendSpec) -> dict[str, Any]:
    """The fields the stack chose (backend, model, URL): a service's own settings (its
    environment) give the rest."""
    return spec.model_dump(exclude_unset=True)


@dataclass(frozen=True, kw_only=True)
class StackConfig(StackShape):
    home: Path
    master_url: str
    admin_token: SecretStr
    worker_token: SecretStr
    service_token: SecretStr
    service_admin_token: SecretStr

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def artifacts(self) -> Path:
        return self.home / "artifacts"


def tiny_model_dir(home: Path) -> Path:
    """The tiny random Qwen2.5-VL under ``home/models`` (built once, a few seconds)."""
    out = home / "models" / "tiny-qwen25vl"
    if not (out / "config.json").exists():
        from coda.inference.tiny import build_tiny_qwen25vl

        log.info("stack.building_tiny_model", out=str(out))
        tmp = out.with_name(out.name + ".partial")
        build_tiny_qwen25vl(tmp)
        tmp.rename(out)
    return out


OCR_EXECUTOR = "ocr"
"""``--executor-model ocr``: the executor grounds plans with OCR alone (the ``ocr`` backend,
no weights, no per-task data; docs/services.md), a cheap baseline executor."""


def choose_models(cfg: StackConfig) -> dict[str, BackendSpec]:
    """What serves each role (pure, given the tiny model's directory when it is needed)."""
    out: dict[str, BackendSpec] = {}
    for role in ROLES:
        url = cfg.model_urls.get(role)
        given = cfg.model_dirs.get(role)
        if url:
            out[role] = BackendSpec(backend="openai", model=given or role, base_url=url)
        elif role == "executor" and given == OCR_EXECUTOR:
            out[role] = BackendSpec(backend="ocr", model="rapidocr")
        elif given:
            out[role] = BackendSpec(backend="transformers", model=given)
        elif cfg.models == "replay":
            out[role] = BackendSpec(backend="replay", model=str(REPLAYS / f"demo.{role}.json"))
        else:
            out[role] = BackendSpec(backend="transformers",
                                    model=str(tiny_model_dir(cfg.home)))
    return out


def uses_tiny(choices: dict[str, BackendSpec]) -> bool:
    return any(is_tiny(c) for c in choices.values())


def service_settings(role: str, choice: BackendSpec, cfg: StackConfig) -> Any:
    common: dict[str, Any] = {"artifacts_url": str(cfg.artifacts),
                              "inference_tokens": [cfg.service_token],
                              "admin_token": cfg.service_admin_token}
    tiny = is_tiny(choice)
    if tiny:
        common["max_pixels"] = 56 * 56
    if role == "planner":
        from planner_service.settings import PlannerSettings

        pull: dict[str, Any] = {}
        if cfg.vllm:
            pull = {"master_url": cfg.master_url, "master_token": cfg.worker_token,
                    "version_poll_s": 2.0}
        return PlannerSettings(**chosen(choice), **common, **pull,
                               adapter_cache_dir=str(cfg.home / "adapter-cache"))
    if role == "executor":
        from executor_service.settings import ExecutorSettings

        return ExecutorSettings(**chosen(choice), **common)
    from judge_service.settings import JudgeModelSpec, JudgeSettings

    extra: dict[str, Any] = {"max_pixels": 56 * 56} if tiny else {}
    spec = JudgeModelSpec(name="judge", **chosen(choice), **extra)
    common.pop("max_pixels", None)
    if tiny:
        common["max_tokens"] = 64
    return JudgeSettings(models=[spec], **common)


def worker_env(master_url: str, worker_token: SecretStr, service_token: SecretStr,
               urls: dict[str, str], *, slots: int, slot_root: Path, job_slots: int = 1,
               name: str = "local") -> dict[str, str]:
    """The environment of a local ``coda worker`` process talking to ``master_url`` and the
    model services at ``urls`` (role -> URL)."""
    return {"CODA_WORKER_MASTER_URL": master_url,
            "CODA_WORKER_TOKEN": worker_token.get_secret_value(),
            "CODA_WORKER_NAME": name,
            "CODA_WORKER_SLOTS": str(slots), "CODA_WORKER_JOB_SLOTS": str(job_slots),
            "CODA_WORKER_SLOT_ROOT": str(slot_root),
            "CODA_WORKER_PLANNER_URL": urls["planner"],
            "CODA_WORKER_EXECUTOR_URL": urls["executor"],
            "CODA_WORKER_JUDGE_URL": urls["judge"],
            "CODA_WORKER_SERVICE_TOKEN": service_token.get_secret_value(),
            "CODA_LOG_FORMAT": "json"}


class Stack:
    """Start, watch and stop the services, the worker and the trainer."""

    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.services: dict[str, ServiceProcess] = {}
        self.worker: subprocess.Popen[bytes] | None = None
        self.trainer: subprocess.Popen[bytes] | None = None
        self.choices: dict[str, BackendSpec] = {}
        self.vllm: VllmServers | None = None
        self._specs: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._stopping = False

    def request_stop(self) -> None:
        """Asked to stop while starting: start() starts nothing more."""
        self._stopping = True

    # -- start ---------------------------------------------------------------------------

    def start(self) -> None:
        """Services first (ready), then the worker and the trainer."""
        self.cfg.logs.mkdir(parents=True, exist_ok=True)
        self.cfg.artifacts.mkdir(parents=True, exist_ok=True)
        self.choices = choose_models(self.cfg)
        if self.cfg.vllm:
            self.vllm = start_servers(tiny_model_dir(self.cfg.home), self.cfg.logs)
            for role, url in self.vllm.urls.items():
                self.choices[role] = BackendSpec(backend="openai", model=VLLM_SERVED_NAME,
                                                 base_url=url)
        for role, choice in self.choices.items():
            if self._stopping:
                return
            proc = ServiceProcess.of(role, service_settings(role, choice, self.cfg),
                                     self.cfg.logs / f"{role}.log")
            proc.start()
            self.services[role] = proc
            log.info("stack.service_starting", role=role, backend=choice.backend,
                     model=choice.model, url=proc.url)
        with ThreadPoolExecutor(len(self.services)) as pool:
            list(pool.map(lambda p: p.wait_ready(timeout=600), self.services.values()))
        if self._stopping:
            return
        self.worker = self._spawn("worker", [sys.executable, "-m", "worker.cli"],
                                  self._worker_env())
        if self.cfg.train and not self._stopping:
            self.trainer = self._spawn("trainer", [sys.executable, "-m", "trainer.grpo.cli"],
                                       self._trainer_env())

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        path = self.cfg.logs / f"{name}.log"
        self._specs[name] = (cmd, env)
        proc = start_process(cmd, env=env, log=path, cwd=ROOT)
        log.info("stack.started", name=name, pid=proc.pid, log=str(path))
        return proc

    def url(self, role: str) -> str:
        return self.services[role].url

    def _worker_env(self) -> dict[str, str]:
        env = worker_env(self.cfg.master_url, self.cfg.worker_token, self.cfg.service_token,
                         {role: self.url(role) for role in ROLES}, slots=self.cfg.slots,
                         slot_root=self.cfg.home / "desktops")
        if uses_tiny(self.choices):  # keep the tiny model's garbage short
            env.update({"CODA_WORKER_MAX_TOKENS": "32", "CODA_WORKER_EXECUTOR_MAX_TOKENS": "32",
                        "CODA_WORKER_MAX_STEPS": "5",
                        "CODA_WORKER_JUDGE_POLICY": json.dumps(
                            {"votes": 1, "multi_resolution": False, "max_frames": 4})})
        return env

    def _trainer_env(self) -> dict[str, str]:
        planner = self.choices["planner"]
        base = planner.model if planner.backend == "transformers" else str(
            tiny_model_dir(self.cfg.home))
        return {"CODA_TRAINER_MASTER_URL": self.cfg.master_url,
                "CODA_TRAINER_MASTER_TOKEN": self.cfg.admin_token.get_secret_value(),
                "CODA_TRAINER_MODEL": base,
                "CODA_TRAINER_ARTIFACTS_URL": str(self.cfg.artifacts),
                "CODA_TRAINER_CHECKPOINT_DIR": str(self.cfg.home / "trainer"),
                # with vLLM the planner pulls each version from the master (no push)
                "CODA_TRAINER_PLANNER_URLS": json.dumps(
                    [] if self.cfg.vllm else [self.url("planner")]),
                "CODA_TRAINER_PLANNER_TOKEN": self.cfg.service_admin_token.get_secret_value(),
                "CODA_TRAINER_GROUPS_PER_UPDATE": "2", "CODA_TRAINER_DEVICE": "cpu",
                "CODA_TRAINER_MAX_PIXELS": str(56 * 56), "CODA_TRAINER_LORA_RANK": "4",
                "CODA_TRAINER_LOG_LEVEL": "INFO", "CODA_LOG_FORMAT": "json"}

    # -- watch and stop ------------------------------------------------------------------

    def dead(self) -> list[str]:
        """Components that exited (their logs say why)."""
        out = [role for role, p in self.services.items() if not p.alive()]
        for name, proc in (("worker", self.worker), ("trainer", self.trainer)):
            if proc is not None and proc.poll() is not None:
                out.append(name)
        if self.vllm is not None:
            out += self.vllm.dead()
        return out

    def children(self) -> list[Child]:
        """What ``coda up`` supervises of the stack (:mod:`coda_app.supervise`): the vLLM
        servers, the model services, the worker and the trainer, each started again on the
        same port / with the same settings."""
        out: list[Child] = []
        if self.vllm is not None:
            servers = self.vllm
            for name in list(servers.procs):
                out.append(Child(f"vllm-{name}", partial(servers.alive, name),
                                 partial(servers.restart, name),
                                 self.cfg.logs / f"vllm-{name}.log"))
        for role, service in self.services.items():
            out.append(Child(role, service.alive, service.restart, service.log_path))
        for name in ("worker", "trainer"):
            if name in self._specs:
                out.append(Child(name, partial(self._alive, name), partial(self._respawn, name),
                                 self.cfg.logs / f"{name}.log"))
        return out

    def _alive(self, name: str) -> bool:
        proc = self.worker if name == "worker" else self.trainer
        return proc is not None and proc.poll() is None

    def _respawn(self, name: str) -> None:
        if self._stopping:
            return
        cmd, env = self._specs[name]
        proc = self._spawn(name, cmd, env)
        if name == "worker":
            self.worker = proc
        else:
            self.trainer = proc

    def stop(self) -> None:
        """Worker first (it drains and gives running jobs back), then trainer and services."""
        self._stopping = True
        for proc in (self.worker, self.trainer):
            if proc is not None:
                stop_process(proc, timeout=90)
        for p in self.services.values():
            p.stop()
        if self.vllm is not None:
            self.vllm.stop()
        log.info("stack.stopped")
