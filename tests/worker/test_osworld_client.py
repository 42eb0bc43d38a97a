"""An OSWorld-style client sequence against the agent, unchanged: the same HTTP calls, bodies
and expectations OSWorld's ``PythonController`` / ``SetupController`` (desktop_env) and
ScienceBoard's ``VManager`` make, with ``requests`` as they use it. Run twice: against an agent
serving a throw-away local display without a token (as their clients expect), and with the token
carried in the URL (``http://coda:<token>@host:port``), which needs no change to their code."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests
from PIL import Image

from coda.actions import Click
from coda.contracts.desktop import GuestKind
from coda.procs import free_port, stop_process
from coda.tasks import parse_task
from tests.fixtures.waiting import exited, wait_for
from worker.providers.base import GuestLayout
from worker.providers.client import GuestClient
from worker.providers.local import LocalDesktop
from worker.tasks import TaskContext, run_setup

from .helpers import window

PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"


@pytest.fixture(scope="module")
def throwaway_agent(desktop: LocalDesktop) -> Iterator[str]:
    """A second agent on the same display, started with --throwaway-local-display."""
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(desktop.home), "DISPLAY": str(desktop.display),
           "XAUTHORITY": str(desktop.dir / "Xauthority")}
    proc = subprocess.Popen([sys.executable, "-m", "worker.guest", "serve",
                             "--throwaway-local-display", "--port", str(port),
                             "--desktop-id", desktop.id], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return requests.get(base + "/health", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        wait_for(up, "the throw-away agent", gone=exited(proc, "the throw-away agent"))
        yield base
    finally:
        stop_process(proc)


@pytest.fixture(params=["no-token", "token-in-url"])
def server(request: pytest.FixtureRequest, desktop: LocalDesktop) -> str:
    if request.param == "no-token":
        return str(request.getfixturevalue("throwaway_agent"))
    assert desktop.guest is not None
    return desktop.guest.base_url.replace("http://", f"http://coda:{desktop.token}@")


def execute_python_command(http_server: str, command: str) -> dict[str, object]:
    """PythonController.execute_python_command, as OSWorld sends it."""
    command_list = ["python", "-c", PREFIX.format(command=command)]
    payload = json.dumps({"command": command_list, "shell": False})
    response = requests.post(http_server + "/execute",
                             headers={"Content-Type": "application/json"}, data=payload,
                             timeout=90)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_osworld_client_sequence(server: str, desktop: LocalDesktop) -> None:
    home = desktop.home
    # SetupController: upload (multipart), launch, execute, open, activate / close windows
    form = {"file_path": f"{home}/Desktop/notes.txt"}
    r = requests.post(server + "/setup/upload", data=form,
                      files={"file_data": ("notes.txt", b"hello from the host\n")})
    assert r.status_code == 200 and r.text == "File Uploaded"
    headers = {"Content-Type": "application/json"}
    r = requests.post(server + "/setup/launch", headers=headers,
                      data=json.dumps({"command": ["xterm", "-T", "osworld-term"],
                                       "shell": False}))
    assert r.status_code == 200 and "launched successfully" in r.text
    assert desktop.guest is not None
    wait_for(lambda: window(desktop.guest, "osworld-term"), "the launched xterm")
    r = requests.post(server + "/setup/open_file", headers=headers,
                      data=json.dumps({"path": f"{home}/Desktop/notes.txt"}))
    assert r.status_code == 200 and r.text == "File opened successfully"
    r = requests.post(server + "/setup/open_file", headers=headers,
                      data=json.dumps({"path": f"{home}/Desktop/missing.txt"}))
    assert r.status_code == 404
    r = requests.post(server + "/setup/execute", headers=headers,
                      data=json.dumps({"command": "ls ~/Desktop", "shell": True}))
    assert r.status_code == 200 and r.json()["output"] == "notes.txt\n"
    assert r.json()["status"] == "success" and r.json()["returncode"] == 0
    r = requests.post(server + "/setup/execute", headers=headers,
                      data=json.dumps({"command": "ls ~/Desktop/notes.txt", "shell": False}))
    assert r.json()["returncode"] == 0  # a string without a shell is split, ~/ expanded
    for route in ("activate_window", "close_window"):
        r = requests.post(server + f"/setup/{route}", headers=headers,
                          data=json.dumps({"window_name": "osworld-term", "strict": True,
                                           "by_class": False}))
        assert r.status_code == 200
    wait_for(lambda: window(desktop.guest, "osworld-term") is None, "wmctrl to close it")

    # PythonController: screenshot, actions through /execute, platform, sizes, files
    shot = requests.get(server + "/screenshot")
    assert shot.status_code == 200 and shot.headers["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(shot.content)).size == (1280, 800)
    assert execute_python_command(server, "pyautogui.moveTo(321, 123)")["returncode"] == 0
    platform_out = execute_python_command(server, "import platform; print(platform.system())")
    assert str(platform_out["output"]).strip() == "Linux"
    assert requests.get(server + "/cursor_position").json() == [321, 123]
    assert requests.post(server + "/screen_size").json() == {"width": 1280, "height": 800}
    assert requests.get(server + "/platform").text == "Linux"
    got = requests.post(server + "/file", data={"file_path": f"{home}/Desktop/notes.txt"})
    assert got.status_code == 200 and got.content == b"hello from the host\n"
    tree = requests.get(server + "/accessibility")
    assert tree.status_code in (200, 503)  # 503 without an AT-SPI bus, never a crash
    listing = requests.post(server + "/list_directory", headers=headers,
                            data=json.dumps({"path": str(home / "Desktop")}))
    assert {"type": "file", "name": "notes.txt"} in listing.json()["directory_tree"]["children"]

    # ScienceBoard's VManager: JSON content type on every POST, /read, /write, /append, /opt
    sb = f"{home}/atelier/sb.txt"
    assert requests.post(server + "/write", headers=headers,
                         json={"path": sb, "content": "a"}).text == "OK"
    assert requests.post(server + "/append", headers=headers,
                         json={"path": sb, "content": "b"}).text == "OK"
    assert requests.get(server + "/read", params={"path": sb}).text == "ab"
    assert requests.post(server + "/opt", headers=headers, json={"depth": 10}).text == "OK"
    assert requests.post(server + "/screen_size", headers=headers).status_code == 200


def test_the_worker_drives_an_osworld_style_server_unmodified(throwaway_agent: str,
                                                              desktop: LocalDesktop) -> None:
    """The provider side's client in OSWorld mode (no token, no /health, no window list):
    readiness by screenshot, scaling on the worker, actions as ``python -c`` through /execute,
    ``launch`` waiting the task's ``wait`` seconds as ScienceBoard does."""
    guest = GuestClient(throwaway_agent, kind=GuestKind.OSWORLD)
    try:
        assert guest.health().ok
        obs = guest.observe(fmt="webp", width=640)
        assert (obs.width, obs.height, obs.screen_width) == (640, 400, 1280)
        assert guest.screenshots == 2  # one full PNG each, scaled here (their server leaks)
        assert guest.act(Click(x=5, y=5)).ok
        assert guest.windows() is None
        task = parse_task({"type": "TeXstudio", "sort": "VM", "steps": 1, "instruction": "t",
                           "version": "0.1", "evaluate": [], "initialize": [
                               {"func": "touch", "path": "/home/user/a.txt", "text": "x"},
                               {"func": "launch", "command": "xterm", "shell": True,
                                "wait": 0.2}]}, task_id="t/1")
        ctx = TaskContext(task=task, guest=guest, layout=GuestLayout(
            rewrites=[("/home/user", str(desktop.home))]))
        report = run_setup(ctx)
        assert report.ok and "waited 0.2 s" in report.steps[1].detail
    finally:
        guest.close()
