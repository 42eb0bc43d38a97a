"""The whole loop as a user runs it: ``coda up --models replay --train`` (the real command, a
real process tree: master on Postgres and Redis, planner / executor / judge services, a local
worker with Xvfb slots running the real TeXstudio, the trainer on the tiny Qwen2.5-VL). Over
REST: 2 tasks x 2 rollouts -> episodes -> judge -> groups -> a trainer update publishes a
planner version -> a second batch is served by that version. The dashboard is then checked
in Debian's Chromium (Playwright): the page with every stage, an episode replay with its
images; both are saved as screenshots.

The planner, executor and judge answer from recorded outputs (the replay backend) because the
tiny random model cannot solve or judge a task; the trainer trains the real tiny model.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.codaup import running_coda_up
from tests.fixtures.master import EXAMPLES
from tests.fixtures.waiting import log_tails, wait_for

pytestmark = pytest.mark.slow

C02 = json.loads((EXAMPLES / "VM" / "TeXstudio" / "C-02.json").read_text())
NOOP = {"id": "noop", "app": "xterm", "step_budget": 3,
        "instruction": "Nothing is left to do here: say you are done."}
SHOTS = os.environ.get("CODA_E2E_SHOTS")
"""Where to keep the browser's screenshots (the docs' come from
``CODA_E2E_SHOTS=benchmarks/results``); unset, they stay in the test's temporary folder."""
CHROMIUM = "/usr/bin/chromium"


def wait(probe: Callable[[], Any], what: str, timeout: float, log: Path) -> Any:
    return wait_for(probe, what, timeout, interval=0.5,
                    logs=lambda: log_tails(log.parent.glob("*.log")))


@pytest.fixture
def coda_up(fresh_database_url: str, fresh_redis_url: str, desktop_host: None,
            tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    with running_coda_up(tmp_path / "coda",
                         ["--models", "replay", "--train", "--no-demo", "--slots", "2"],
                         database_url=fresh_database_url, redis_url=fresh_redis_url) as up:
        yield up.url, up.tokens, up.logs


def test_the_whole_loop_and_its_dashboard(coda_up: tuple[str, dict[str, str], Path],
                                          tmp_path: Path) -> None:
    url, tokens, logs = coda_up
    http = httpx.Client(base_url=url, timeout=60,
                        headers={"authorization": f"Bearer {tokens['admin_token']}"})
    up_log = logs / "up.log"

    first = http.post("/v1/batches", json={"name": "e2e-1", "tasks": [C02, NOOP],
                                           "rollouts": 2}).json()
    batch = first["batch"]["id"]
    wait(lambda: http.get(f"/v1/batches/{batch}").json()["status"] == "finished",
         "the first batch", 600, up_log)
    progress = http.get(f"/v1/batches/{batch}").json()["progress"]
    assert progress["completed"] == 4 and progress["succeeded"] == 2, progress
    # the judge and group jobs of the batch done and every group trained: the version read
    # next is the one the second batch runs with (each trained group publishes a version)
    status = wait(lambda: _settled(http.get("/v1/status").json()),
                  "the judge and group jobs done and their groups trained", 600, up_log)
    version = wait(lambda: http.get("/v1/models/current", params={"role": "planner"}).json()
                   .get("name"), "a published planner version", 600, up_log)
    assert status["verdicts"]["judged"] == 4 and status["verdicts"]["correct"] == 2, status
    assert status["groups"].get("consumed", 0) >= 1, status["groups"]
    assert status["training_curve"], "the trainer reported its update"

    second = http.post("/v1/batches", json={"name": "e2e-2", "tasks": [C02],
                                            "judge": "never"}).json()
    [episode_id] = second["episode_ids"]
    ep = wait(lambda: (e := http.get(f"/v1/episodes/{episode_id}").json())["status"]
              == "completed" and e, "the second batch", 600, up_log)
    assert ep["success"] is True
    assert {s["planner_version"] for s in ep["steps"]} == {version}

    solved = [e for e in http.get("/v1/episodes", params={"batch_id": batch}).json()["items"]
              if e["success"]]
    replay = wait(lambda: (r := http.get(f"/v1/episodes/{solved[0]['id']}/replay").json())
                  ["rewards"] and r, "the groups of a solved episode", 300, up_log)
    assert replay["rewards"][0]["step_index"] == 0 and replay["rewards"][0]["candidates"] == 8
    _check_dashboard(url, str(solved[0]["id"]), version, tmp_path)


def _settled(status: dict[str, Any]) -> dict[str, Any] | None:
    """The status once no job is queued or leased and no group waits for the trainer."""
    busy = sum(q["queued"] + q["leased"] for q in status["queues"])
    waiting = status["groups"].get("ready", 0) + status["groups"].get("leased", 0)
    done = busy == 0 and waiting == 0 and status["groups"].get("consumed", 0) >= 1
    return status if done else None


def _check_dashboard(url: str, episode_id: str, version: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: bash scripts/desktop-deps.sh"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/?refresh=300")
        for section in ("#batches", "#scores", "#queues", "#lifecycle", "#judge-rates",
                        "#training", "#workers", "#episodes"):
            assert page.locator(section).is_visible(), section
        text = page.inner_text("body")
        assert "e2e-1" in text and "TeXstudio" in text and version in text
        assert page.locator("#scores tr").count() >= 3  # header, apps, Overall
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

        page.goto(f"{url}/episodes/{episode_id}")
        images = page.locator(".step img")
        assert images.count() >= 6
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.step img'))"
            ".every(i => i.complete && i.naturalWidth > 0)")
        replay = page.inner_text("body")
        assert "correct" in page.inner_text("#verdict") and "Thought:" in replay
        assert "group of 8" in replay and "positive" in replay
        page.screenshot(path=str(tmp_path / "replay.png"), full_page=True)
        browser.close()
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        for name in ("dashboard.png", "replay.png"):
            shutil.copy(tmp_path / name, Path(SHOTS) / f"e2e-{name}")
