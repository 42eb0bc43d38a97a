"""``coda up --vllm --train`` (its stack, beside a real master process): the tiny model served
by vLLM's own servers, the trainer's first version published to the master, pulled by the
planner service into vLLM (listed in its ``/v1/models``) and used by the next plans; on stop no
vLLM process is left."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from pydantic import SecretStr

from coda.clients.master import MasterClient
from coda.contracts.services_api import PlanResponse
from tests.fixtures.master import MasterProcess
from tests.fixtures.waiting import log_tails, wait_for
from tests.trainer.conftest import store_screens
from tests.trainer.grpo.test_resume import synthetic_group
from tests.vllm.conftest import require_vllm
from tests.vllm.test_services import plan_request

pytestmark = pytest.mark.vllm
WAIT_S = 600.0


def wait(probe: Callable[[], Any], what: str, logs: Path, timeout: float = WAIT_S) -> Any:
    return wait_for(probe, what, timeout, logs=lambda: log_tails(logs.glob("*.log"), 2000),
                    interval=1.0)


def test_coda_up_vllm_train_serves_the_trainer_s_version(master: MasterProcess,
                                                        tmp_path: Path) -> None:
    from coda_app.stack import Stack, StackConfig

    require_vllm()
    artifacts = Path(master.env["CODA_ARTIFACTS_URL"])
    assert artifacts == tmp_path / "artifacts"  # the stack's home/artifacts is the master's
    cfg = StackConfig(home=tmp_path, master_url=master.url,
                      admin_token=SecretStr(master.admin_token),
                      worker_token=SecretStr(master.worker_token),
                      service_token=SecretStr(secrets.token_urlsafe(24)),
                      service_admin_token=SecretStr(secrets.token_urlsafe(24)),
                      slots=1, train=True, vllm=True)
    stack = Stack(cfg)
    engines: list[psutil.Process] = []
    try:
        stack.start()
        assert stack.vllm is not None
        engines = [psutil.Process(p.pid) for p in stack.vllm.procs.values()]
        engines += [c for e in engines for c in e.children(recursive=True)]
        assert {c.backend for c in stack.choices.values()} == {"openai"}

        # one tiny batch for the trainer: two groups (as the worker's group jobs post them)
        screen, _ = store_screens(artifacts)

        async def post() -> None:
            async with MasterClient(master.url, token=master.admin_token) as m:
                for k in range(2):
                    await m.create_group(synthetic_group(screen, k))
        asyncio.run(post())

        admin = {"authorization": f"Bearer {master.admin_token}"}
        version = wait(lambda: httpx.get(f"{master.url}/v1/models/current", headers=admin,
                                         params={"role": "planner"}).json().get("name"),
                       "a version published by the trainer", cfg.logs)
        vllm_url = stack.vllm.urls["planner"].removesuffix("/v1")
        wait(lambda: version in {m["id"] for m in
                                 httpx.get(f"{vllm_url}/v1/models").json()["data"]},
             f"{version} loaded into the planner's vLLM", cfg.logs)
        token = {"authorization": f"Bearer {cfg.service_token.get_secret_value()}"}
        resp = httpx.post(f"{stack.url('planner')}/v1/plan", json=plan_request(2),
                          headers=token, timeout=120)
        assert resp.status_code == 200, resp.text
        assert {p.version for p in PlanResponse.model_validate(resp.json()).plans} == {version}
        assert not stack.dead(), stack.dead()
    finally:
        stack.stop()
    _, alive = psutil.wait_procs(engines, timeout=30)
    assert not alive, f"vLLM processes left: {[p.pid for p in alive]}"
