"""The `coda` command line as a user runs it: real processes, real HTTP."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from coda.contracts.coverage import CoverageReport
from coda.procs import free_port
from tests.fixtures.infra import embedded_data_dir
from tests.fixtures.waiting import exited, wait_for

ROOT = Path(__file__).resolve().parents[2]
CODA = [sys.executable, "-m", "coda_app.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CODA, *args], cwd=ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_submit_and_status(master, tmp_path):
    tasks = ROOT / "examples" / "scienceboard" / "VM" / "TeXstudio"
    out = run("submit", str(tasks), "-k", "2", "--url", master.url,
              "--token", master.admin_token, "--home", str(tmp_path))
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert created["episodes"] == 2 * len(list(tasks.glob("*.json")))
    st = run("status", "--url", master.url, "--home", str(tmp_path), "--json")
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["batches"][0]["id"] == created["batch_id"]
    episodes = httpx.get(f"{master.url}/v1/episodes", params={"limit": 1000}).json()["items"]
    want = {f"TeXstudio/{f.stem}" for f in tasks.glob("*.json")}
    assert {e["task_id"] for e in episodes} == want  # ids survive the trip
    table = run("status", "--url", master.url, "--home", str(tmp_path))
    assert "Batches" in table.stdout and "TeXstudio" in table.stdout


def test_a_submission_sent_again_with_its_key_is_one_batch_and_status_shows_workers(
        master, tmp_path):
    task = ROOT / "examples" / "scienceboard" / "VM" / "KAlgebra" / "C-01.json"
    sent = [run("submit", str(task), "--url", master.url, "--token", master.admin_token,
                "--home", str(tmp_path), "--idempotency-key", "resubmit-1") for _ in range(2)]
    assert [s.returncode for s in sent] == [0, 0], [s.stderr for s in sent]
    assert json.loads(sent[0].stdout) == json.loads(sent[1].stdout)
    auth = {"authorization": f"Bearer {master.worker_token}"}
    wid = httpx.post(f"{master.url}/v1/workers", json={"name": "vm-1", "slots": 2},
                     headers=auth).json()["id"]
    httpx.post(f"{master.url}/v1/workers/{wid}/heartbeat", headers=auth, json={
        "provider": {"ok": False, "fault": "unreachable", "detail": "vSphere vc:443: refused"}})
    table = run("status", "--url", master.url, "--home", str(tmp_path)).stdout
    assert "Workers" in table and "vm-1" in table and "waiting: unreachable" in table


def test_submit_reports_bad_files_and_refusals(master, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "KAlgebra", "sort": "VM", "steps": 3}')
    out = run("submit", str(bad), "--url", master.url, "--token", master.admin_token)
    assert out.returncode == 2 and "instruction" in out.stderr
    good = ROOT / "examples" / "scienceboard" / "VM" / "Lean"
    out = run("submit", str(good), "--url", master.url, "--token", "wrong-token-0123456789")
    assert out.returncode == 1 and "401" in out.stderr
    out = run("submit", str(good), "--url", f"http://127.0.0.1:{free_port()}", "--token", "x")
    assert out.returncode == 1 and "cannot reach" in out.stderr


_MASTER_IMAGE = """
import sys
# the master's image (deploy/docker/Dockerfile.master) holds coda, coda_app and master only
sys.modules.update(dict.fromkeys(("worker", "planner_service", "executor_service",
                                  "judge_service", "trainer"), None))
from coda_app.cli import app
app(sys.argv[1:])
"""


@pytest.mark.parametrize(("args", "code", "says"), [
    (["master", "--help"], 0, "Serve the master"),
    (["--help"], 0, "(not installed)"),
    (["planner"], 2, "coda planner is not available: the planner_service package is not"),
    (["guest"], 2, "coda guest is not available: the worker package is not"),
])
def test_an_image_with_some_roles_runs_their_commands(args: list[str], code: int,
                                                      says: str) -> None:
    out = subprocess.run([sys.executable, "-c", _MASTER_IMAGE, *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == code, out.stderr[-2000:]
    assert says in " ".join((out.stdout + out.stderr).split())


def test_up_vllm_is_the_tiny_model_only(tmp_path: Path) -> None:
    out = run("up", "--vllm", "--models", "replay", "--home", str(tmp_path / "home"))
    assert out.returncode == 2
    assert "--vllm serves the tiny model" in " ".join((out.stdout + out.stderr).split())


def test_master_refuses_default_secret(fresh_database_url, fresh_redis_url):
    out = run("master", "--port", str(free_port()),
              env={"CODA_DATABASE_URL": fresh_database_url, "CODA_REDIS_URL": fresh_redis_url,
                   "CODA_ADMIN_TOKEN": "change-me-admin"})
    assert out.returncode == 2 and "refusing to start" in out.stderr


@pytest.mark.slow
def test_up_runs_embedded_stops_on_ctrl_c_and_keeps_data():
    """The Quick start's main job: embedded Postgres + Redis + master + demo batch."""
    with embedded_data_dir() as home:  # a folder the server user reaches: cluster kept inside
        _up_embedded(home)


def _up_embedded(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    port = free_port()
    lines: dict[int, list[str]] = {}  # each process' output so far, read as it comes
    readers: dict[int, threading.Thread] = {}

    def start(*demo: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([*CODA, "up", "--home", str(home), "--port", str(port),
                                 "--demo-rollouts", "1", "--master-only", *demo], cwd=ROOT,
                                env=env,
                                text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        read = lines.setdefault(proc.pid, [])
        pipe = proc.stdout
        assert pipe is not None
        readers[proc.pid] = threading.Thread(
            target=lambda: read.extend(iter(pipe.readline, "")), daemon=True)
        readers[proc.pid].start()

        def demo_submitted() -> bool:
            resp = httpx.get(f"http://127.0.0.1:{port}/v1/batches", timeout=2)
            return resp.status_code == 200 and bool(resp.json()["total"])

        try:
            wait_for(demo_submitted, "coda up with its demo batch", 120, interval=0.3,
                     gone=exited(proc, "coda up"), logs=lambda: "".join(read))
        except AssertionError:
            proc.kill()
            raise
        return proc

    def said(proc: subprocess.Popen[str], text: str) -> None:
        wait_for(lambda: text in "".join(lines[proc.pid]), f"coda up saying {text!r}", 60,
                 interval=0.2, gone=exited(proc, "coda up"), logs=lambda: "".join(lines[proc.pid]))

    def ctrl_c(proc: subprocess.Popen[str]) -> str:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        readers[proc.pid].join(timeout=30)  # the pipe's end: every line read
        output = "".join(lines[proc.pid])
        assert proc.returncode == 0, output
        return output

    proc = start("--demo")  # a master for remote VM servers queues the demo only when asked
    page = httpx.get(f"http://127.0.0.1:{port}/").text
    assert "scienceboard-demo" in page
    batch = httpx.get(f"http://127.0.0.1:{port}/v1/batches").json()["items"][0]
    assert batch["progress"]["total"] == 169  # every bundled task once (33 Celestia)
    out = ctrl_c(proc)
    assert "postgres.stopped" in out and "redis.stopped" in out
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
    proc = start("--demo")  # a second start keeps the data
    again = httpx.get(f"http://127.0.0.1:{port}/v1/batches").json()
    assert again["total"] == 1 and again["items"][0]["id"] == batch["id"]
    said(proc, "already submitted")  # the demo step runs once the master listens
    ctrl_c(proc)
    proc = start()  # --master-only without --demo: no demo batch is queued, nor looked for
    assert httpx.get(f"http://127.0.0.1:{port}/v1/batches").json()["total"] == 1
    # supervision: the embedded stores killed outright are started again on their ports
    for name, pidfile in (("redis", home / "redis" / "redis.pid"),
                          ("postgres", home / "postgres" / "postmaster.pid")):
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        wait_for(lambda n=name: _restarts(port).get(n) == 1 and _restarts(port),
                 f"coda up restarting the embedded {name}", 120, interval=0.5,
                 gone=exited(proc, "coda up"))
    assert httpx.get(f"http://127.0.0.1:{port}/v1/batches").json()["total"] == 1
    out = ctrl_c(proc)
    assert "demo batch" not in out
    assert "stack.child_restarted" in out


def _restarts(port: int) -> dict[str, int]:
    """Restarts per supervised process from the master's status (read without a token)."""
    resp = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=5)
    if resp.status_code != 200:
        return {}
    return {c["name"]: c["restarts"] for c in resp.json()["supervised"] if c["running"]}


@pytest.mark.slow
def test_up_gives_up_on_a_store_that_keeps_dying():
    """The embedded Redis killed again after each restart: restarted 5 times (backoff 1, 2,
    4, 8, 16 s), the 6th death within 5 minutes stops everything: exit 1 with its log's tail."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    port = free_port()
    with embedded_data_dir() as home:
        proc = subprocess.Popen([*CODA, "up", "--home", str(home), "--port", str(port),
                                 "--master-only", "--no-live"], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "redis" in _restarts(port), "coda up's master", 120,
                     interval=0.3, gone=exited(proc, "coda up"))
            pidfile = home / "redis" / "redis.pid"
            for n in range(1, 7):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
                if n < 6:
                    wait_for(lambda n=n: _restarts(port).get("redis") == n,
                             f"redis restarted {n}x", 120, interval=0.3,
                             gone=exited(proc, "coda up"))
            output, _ = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 1, output
    flat = " ".join(output.split())
    assert "redis died 6 times within 300 s: giving up" in flat, output[-3000:]
    assert "stack.gave_up" in output and "stopped: everything" in output


def _up_output(env: dict[str, str], *args: str, tty: bool) -> str:
    """`coda up` (stores from the environment) until the master is up, then Ctrl-C; its
    output as a terminal (a pseudo-terminal) or a pipe shows it."""
    port = free_port()
    cmd = [*CODA, "up", "--port", str(port), "--no-demo", "--master-only", *args]
    full_env = {**os.environ, **env}
    if tty:
        main_fd, sub_fd = pty.openpty()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdin=sub_fd, stdout=sub_fd,
                                stderr=sub_fd)
        os.close(sub_fd)
    else:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        main_fd = proc.stdout.fileno()
    out, ended = b"", False

    def master_up() -> bool:
        nonlocal out, ended
        ready, _, _ = select.select([main_fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # the terminal closed: the process ended
                chunk = b""
            ended = not chunk
            out += chunk
        return b"CODA master up" in out

    try:
        wait_for(master_up, "'CODA master up' in its output", 120, interval=0,
                 gone=lambda: "coda up's output ended" if ended else None,
                 logs=lambda: out.decode(errors="replace")[-3000:])
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    finally:
        proc.kill()
        if tty:
            os.close(main_fd)
    return out.decode(errors="replace")


def _log_lines(output: str) -> list[str]:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)  # colours
    return [line.strip() for line in plain.splitlines() if "master.ready" in line]


@pytest.mark.slow
def test_up_logs_are_human_on_a_terminal_and_json_elsewhere(fresh_database_url,
                                                           fresh_redis_url, tmp_path):
    env = {"DATABASE_URL": fresh_database_url, "REDIS_URL": fresh_redis_url}
    home = ("--home", str(tmp_path / "home"))
    [line] = _log_lines(_up_output(env, *home, tty=True))
    assert line.split()[1:4] == ["[info", "]", "master.ready"]  # time [level] event key=value
    [line] = _log_lines(_up_output(env, *home, tty=False))
    assert json.loads(line)["event"] == "master.ready"
    [line] = _log_lines(_up_output(env, *home, "--log-format", "json", tty=True))
    assert json.loads(line)["level"] == "info"
    [line] = _log_lines(_up_output({**env, "CODA_LOG_FORMAT": "console"}, *home, tty=False))
    assert line.split()[1:4] == ["[info", "]", "master.ready"]


def test_tasks_coverage_of_the_bundled_tasks_on_the_local_image() -> None:
    out = run("tasks", "coverage", str(ROOT / "examples" / "scienceboard"), "--json", "-")
    assert out.returncode == 0, out.stderr
    report = CoverageReport.model_validate_json(out.stdout)
    apps = {a.app: a for a in report.apps}
    assert apps["KAlgebra"].tasks == 31 and apps["KAlgebra"].runnable >= 25
    assert report.total.tasks == sum(a.tasks for a in report.apps)
    table = run("tasks", "coverage", str(ROOT / "examples" / "scienceboard"))
    assert table.returncode == 0 and "real verdict here" in table.stdout
