"""``coda eval``: the Table 1 rows and files (pure), and the command against a real master
whose episodes a REST "worker" in the test finishes; a master that is down is a clear error."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from coda.contracts.master_api import AppScore
from coda_app.evaluate import table_rows, to_csv
from tests.fixtures.master import EXAMPLES, ROOT, MasterProcess
from tests.fixtures.waiting import exited, wait_for


def test_rows_put_overall_last_and_csv_has_the_header() -> None:
    scores = [AppScore(app="Overall", tasks=3, rollouts=6, average_at_k=50.0, pass_at_k=66.67),
              AppScore(app="TeXstudio", tasks=1, rollouts=2, average_at_k=None, pass_at_k=None),
              AppScore(app="KAlgebra", tasks=2, rollouts=4, average_at_k=50.0, pass_at_k=50.0)]
    rows = table_rows(scores)
    assert [r["app"] for r in rows] == ["KAlgebra", "TeXstudio", "Overall"]
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert parsed[0] == {"app": "KAlgebra", "tasks": "2", "rollouts": "4",
                         "average_at_k": "50.0", "pass_at_k": "50.0"}
    assert parsed[1]["average_at_k"] == ""


def _eval(master_url: str, token: str, tasks: Path, out: Path, *extra: str,
          ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "coda_app.cli", "eval", str(tasks), "--k", "2", "--out-dir",
         str(out), "--url", master_url, "--token", token, *extra],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _finish(master: MasterProcess, proc: subprocess.Popen[str],
            success: Callable[[dict[str, Any]], bool], episodes: int = 4) -> str:
    """A REST "worker" leases and completes the batch's episodes (``success`` of each payload)
    while ``coda eval`` waits; its standard output once it exited 0."""
    worker = httpx.Client(base_url=master.url, timeout=30,
                          headers={"authorization": f"Bearer {master.worker_token}"})
    wid = worker.post("/v1/workers", json={"name": "eval-test", "slots": 4}).json()["id"]
    done = 0

    def all_finished() -> bool:
        nonlocal done
        for job in worker.post("/v1/jobs/lease", json={"worker_id": wid, "capacity": 4,
                                                       "wait_s": 1}).json()["jobs"]:
            r = worker.post(f"/v1/jobs/{job['id']}/complete", json={
                "lease_token": job["lease_token"], "kind": "episode",
                "result": {"success": success(job["payload"])}})
            assert r.status_code == 204, r.text
            done += 1
        return done >= episodes

    wait_for(all_finished, f"the {episodes} episodes leased and finished", 120, interval=0,
             gone=exited(proc, "coda eval"),
             logs=lambda: str(proc.communicate()) if proc.poll() is not None else "")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def test_eval_runs_k_rollouts_and_writes_table1(master: MasterProcess, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("A-01.json", "A-02.json"):
        (tasks / name).write_text((EXAMPLES / "VM" / "KAlgebra" / name).read_text())
    proc = _eval(master.url, master.admin_token, tasks, tmp_path / "out")
    # A-01 succeeds in both rollouts, A-02 in one of two
    out = _finish(master, proc, lambda p: "A-01" in p["task"]["id"] or p["rollout"] == 0)
    assert "Average@2" in out and "Overall" in out
    rows = list(csv.DictReader((tmp_path / "out" / "table1.csv").open()))
    assert [(r["app"], r["average_at_k"], r["pass_at_k"]) for r in rows] == [
        ("KAlgebra", "75.0", "100.0"), ("Overall", "75.0", "100.0")]
    summary = json.loads((tmp_path / "out" / "table1.json").read_text())
    assert summary["k"] == 2 and summary["episodes"] == 4 and summary["succeeded"] == 3


def test_eval_against_a_master_that_is_down_is_a_clear_error(tmp_path: Path) -> None:
    tasks = EXAMPLES / "VM" / "KAlgebra" / "A-01.json"
    proc = _eval("http://127.0.0.1:9", "token", tasks, tmp_path / "out")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "cannot reach the master" in err
    bad = _eval("http://127.0.0.1:9", "t", tmp_path / "nothing-here", tmp_path / "out")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.strip()


def test_eval_compares_two_planner_versions_side_by_side(master: MasterProcess,
                                                         tmp_path: Path) -> None:
    """``--versions base --versions v1``: one batch pinned to each; the REST "worker" solves
    every v1 episode and half of base's, and the table and files show them side by side with
    each version's success rate and interval."""
    tasks = EXAMPLES / "VM" / "KAlgebra" / "A-01.json"
    proc = _eval(master.url, master.admin_token, tasks, tmp_path / "out", "--versions", "base",
                 "--versions", "v1")
    out = _finish(master, proc, lambda p: p["planner_version"] == "v1" or p["rollout"] == 0)
    assert "side by side" in out and "+50.00" in out and "success, 95 % interval" in out
    rows = list(csv.DictReader((tmp_path / "out" / "compare.csv").open()))
    assert rows[0] == {"app": "KAlgebra", "base": "50.0", "v1": "100.0"}
    summary = json.loads((tmp_path / "out" / "compare.json").read_text())
    rates = {v["version"]: v["rate"] for v in summary["versions"]}
    assert rates["v1"]["rate"] == 1.0 and rates["base"]["rate"] == 0.5
    assert rates["base"]["ci_low"] < 0.5 < rates["base"]["ci_high"]
