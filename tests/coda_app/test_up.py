"""``coda up`` as an object (coda_app/up.py): its options checked, and :class:`UpStack`'s run
loop serving a master over the given stores until told to stop, then stopping what it
started (master-only here; the whole stack: test_up_supervision.py, test_e2e.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from coda.procs import free_port
from coda_app.embedded.services import ServiceUrls
from coda_app.secrets_file import local_secrets
from coda_app.up import UpOptions, UpStack, options_problem
from tests.fixtures.waiting import wait_for


def test_options_that_cannot_run_together_are_named() -> None:
    assert options_problem("tiny", vllm=True, urls=(None, None, None)) is None
    assert options_problem("replay", vllm=False, urls=("http://p", None, None)) is None
    assert "--models" in str(options_problem("huge", vllm=False, urls=()))
    assert "--vllm" in str(options_problem("replay", vllm=True, urls=()))
    assert "--vllm" in str(options_problem("tiny", vllm=True, urls=(None, "http://e", None)))


def test_the_run_loop_serves_the_master_until_told_to_stop(
        tmp_path: Path, fresh_database_url: str, fresh_redis_url: str) -> None:
    opts = UpOptions(home=tmp_path, port=free_port(), master_only=True, demo=False, live=False)
    tokens = local_secrets(tmp_path)
    up = UpStack(opts, tokens, ServiceUrls(fresh_database_url, fresh_redis_url))
    assert up.stack is None
    outcome: list[bool] = []
    runner = threading.Thread(target=lambda: outcome.append(up.run()))
    runner.start()
    try:
        wait_for(lambda: up.server.started, "the master listening", 120,
                 gone=lambda: None if runner.is_alive() else "the run loop ended")
        got = httpx.get(f"{opts.url}/v1/status", timeout=30,
                        headers={"authorization": f"Bearer {up.admin_token}"})
        assert got.status_code == 200, got.text
    finally:
        up.server.should_exit = True
        runner.join(60)
    assert not runner.is_alive() and outcome == [True]
