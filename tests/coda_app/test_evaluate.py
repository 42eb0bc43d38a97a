"""``coda eval``: the Table 1 rows and files (pure), and the command against a real master
whose episodes a REST "worker" in the test finishes; a master that is down is a clear error."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_eval_runs_k_rollouts_and_writes_table1(master: MasterProcess, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("A-01.json", "A-02.json"):
        (tasks / name).write_text((EXAMPLES / "VM" / "KAlgebra" / name).read_text())
    proc = _eval(master.url, master.admin_token, tasks, tmp_path / "out")
    worker = httpx.Client(base_url=master.url, timeout=30,
                          headers={"authorization": f"Bearer {master.worker_token}"})
    wid = worker.post("/v1/workers", json={"name": "eval-test", "slots": 4}).json()["id"]
    done = 0

    def all_finished() -> bool:  # A-01 succeeds in both rollouts, A-02 in one of two
        nonlocal done
        for job in worker.post("/v1/jobs/lease", json={"worker_id": wid, "capacity": 4,
                                                       "wait_s": 1}).json()["jobs"]:
            task = job["payload"]["task"]["id"]
            success = "A-01" in task or job["payload"]["rollout"] == 0
            r = worker.post(f"/v1/jobs/{job['id']}/complete", json={
                "lease_token": job["lease_token"], "kind": "episode",
                "result": {"success": success}})
            assert r.status_code == 204, r.text
            done += 1
        return done >= 4

    wait_for(all_finished, "the 4 episodes leased and finished", 120, interval=0,
             gone=exited(proc, "coda eval"),
             logs=lambda: str(proc.communicate()) if proc.poll() is not None else "")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
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
