"""The guest agent on a real Xvfb display with a real window manager, xterm and a Tk window."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from coda import procs
from coda.actions import Click, Move, Press, RightClick, TypeText
from tests.fixtures.waiting import wait_for
from worker.guest import a11y
from worker.guest.runner import ActionRunner, ActionTimeout
from worker.providers.client import GuestClient
from worker.providers.local import LocalDesktop

from .helpers import pixel, read_json, region, window

TK_APP = Path(__file__).parent / "apps" / "tk_clicker.py"


def _http(desktop: LocalDesktop, token: str | None = None) -> httpx.Client:
    assert desktop.guest is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=desktop.guest.base_url, headers=headers, timeout=30)


def test_refuses_to_start_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODA_GUEST_")}
    run = subprocess.run([sys.executable, "-m", "worker.guest", "serve", "--port", "1"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2
    assert "refusing to start" in run.stderr and "CODA_GUEST_TOKEN" in run.stderr
    short = subprocess.run([sys.executable, "-m", "worker.guest", "serve", "--token", "short"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert short.returncode == 2 and "at least 16" in short.stderr
    exposed = subprocess.run([sys.executable, "-m", "worker.guest", "serve",
                              "--throwaway-local-display", "--host", "0.0.0.0"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert exposed.returncode == 2 and "without a token" in exposed.stderr


def test_every_route_but_health_needs_the_token(desktop: LocalDesktop) -> None:
    with _http(desktop) as anonymous, _http(desktop, "x" * 24) as wrong, \
            _http(desktop, desktop.token) as right:
        assert anonymous.get("/health").json()["agent"] == "coda-guest"
        for client in (anonymous, wrong):
            assert client.get("/screenshot").status_code == 401
            assert client.post("/execute", json={"command": "true", "shell": True}
                               ).status_code == 401
        assert right.get("/screenshot").status_code == 200


def test_typing_into_xterm_creates_a_file_and_the_screenshot_shows_it(
        desktop: LocalDesktop) -> None:
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    guest.launch(["xterm", "-geometry", "80x12+40+40", "-bg", "white", "-fg", "black"])
    term = wait_for(lambda: window(guest, "xterm"), "the xterm window")
    assert term is not None
    box = (term.x, term.y, term.x + term.width, term.y + term.height)
    assert desktop.act(Click(x=term.x + term.width // 2, y=term.y + term.height // 2)).ok
    before = desktop.observe().image
    # '<' '>' '{' are typed right (pyautogui alone types '<' as '>' on this keymap)
    assert desktop.act(TypeText(text="echo 'a<b>c {x}' > ~/typed.txt\n")).ok
    target = f"{desktop.home}/typed.txt"
    content = wait_for(lambda: guest.read_file(target), "the file the typed command creates")
    assert content == b"a<b>c {x}\n"
    after = desktop.observe().image
    assert region(before, box) != region(after, box), "the typed text must show in the xterm"


def _tk_window(desktop: LocalDesktop) -> tuple[GuestClient, str, int, int]:
    """The Tk test window on a fresh desktop, once mapped: the guest, its state file and the
    centre of its button."""
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    state_file = f"{desktop.home}/tk-state.json"
    guest.launch(["python3", str(TK_APP), state_file])
    state = wait_for(lambda: read_json(guest, state_file), "the Tk window to map")
    return guest, state_file, state["x"] + state["width"] // 2, state["y"] + state["height"] // 2


def test_clicking_a_tk_window_changes_its_state_and_the_screenshot_shows_it(
        desktop: LocalDesktop) -> None:
    guest, state_file, cx, cy = _tk_window(desktop)
    probe = (cx + 60, cy + 40)  # away from the cursor and the label
    assert pixel(desktop.observe().image, *probe) == (0x80, 0x80, 0x80)
    assert desktop.act(Click(x=cx, y=cy)).ok
    wait_for(lambda: (read_json(guest, state_file) or {}).get("clicked"), "the click")
    shown = wait_for(lambda: pixel(desktop.observe().image, *probe) == (0x20, 0xC0, 0x20),
                       "the button to turn green in a screenshot", timeout=10)
    assert shown


def test_a_context_menu_is_listed_as_a_popup_while_it_is_up(desktop: LocalDesktop) -> None:
    guest, _, cx, cy = _tk_window(desktop)
    assert guest.popups() == []
    assert desktop.act(RightClick(x=cx, y=cy)).ok
    (menu,) = wait_for(guest.popups, "the context menu listed as a popup")
    assert (menu.x, menu.y) == (cx, cy) and menu.width > 0 and menu.height > 0
    assert all(w.id != menu.id for w in guest.windows() or [])  # not a managed window
    assert desktop.act(Press(key="escape")).ok
    wait_for(lambda: guest.popups() == [], "the context menu gone")


def test_screenshots_draw_the_cursor(desktop: LocalDesktop) -> None:
    desktop.reset()
    assert desktop.act(Move(x=900, y=600)).ok
    empty = desktop.observe().image  # the root window's pattern, the cursor elsewhere
    assert desktop.act(Move(x=300, y=300)).ok
    box = (300, 300, 312, 316)
    with_cursor = desktop.observe().image
    assert region(empty, box) != region(with_cursor, box)
    assert desktop.act(Move(x=900, y=600)).ok
    assert region(desktop.observe().image, box) == region(empty, box)


def test_screenshot_formats_and_scaled_sizes(desktop: LocalDesktop) -> None:
    with _http(desktop, desktop.token) as c:
        png = c.get("/screenshot")
        assert png.headers["content-type"] == "image/png"
        assert Image.open(io.BytesIO(png.content)).size == (1280, 800)
        webp = c.get("/screenshot", params={"format": "webp", "width": 640})
        assert webp.headers["content-type"] == "image/webp"
        assert Image.open(io.BytesIO(webp.content)).size == (640, 400)
        assert webp.headers["x-screen-width"] == "1280"
        jpeg = c.get("/screenshot", params={"format": "jpeg", "height": 200})
        assert Image.open(io.BytesIO(jpeg.content)).format == "JPEG"
        bad = c.get("/screenshot", params={"format": "gif"})
        assert bad.status_code == 422 and "format" in bad.text


def test_command_time_is_bounded_and_the_process_group_dies(desktop: LocalDesktop) -> None:
    with _http(desktop, desktop.token) as c:
        start = time.monotonic()
        r = c.post("/execute", json={"command": "sleep 300 & sleep 300; echo never",
                                     "shell": True, "timeout": 1})
        assert r.status_code == 500 and "timed out after 1 seconds" in r.json()["message"]
        assert time.monotonic() - start < 20
    wait_for(lambda: not [p for p in procs.marked_pids(desktop.id)
                            if "sleep" in Path(f"/proc/{p}/cmdline").read_bytes().decode()],
               "the timed-out command's processes to be gone", timeout=10)


def test_typed_actions_are_bounded(desktop: LocalDesktop) -> None:
    env = {**os.environ, "DISPLAY": str(desktop.display),
           "XAUTHORITY": str(desktop.dir / "Xauthority")}
    runner = ActionRunner(env)
    try:
        runner.run("pyautogui.moveTo(10, 10)", timeout=30)
        with pytest.raises(ActionTimeout):
            runner.run("time.sleep(30)", timeout=0.5)
        runner.run("pyautogui.moveTo(20, 20)", timeout=30)  # a fresh runner took over
    finally:
        runner.close()


def test_accessibility_answers_within_its_bound(desktop: LocalDesktop) -> None:
    with _http(desktop, desktop.token) as c:
        r = c.get("/accessibility")
    assert r.status_code in (200, 503), r.text
    if r.status_code == 200:
        assert r.json()["AT"].startswith("<desktop-frame")
    else:
        assert "accessibility" in r.json()["message"]
    with pytest.raises(a11y.AccessibilityTimeout):
        a11y.dump(timeout=0.001, env=os.environ)


def test_files_round_trip_and_bad_input_is_a_named_4xx(desktop: LocalDesktop) -> None:
    target = f"{desktop.home}/Downloads/up.bin"
    with _http(desktop, desktop.token) as c:
        up = c.post("/setup/upload", data={"file_path": target},
                    files={"file_data": ("up.bin", b"\x00\x01payload")})
        assert up.status_code == 200 and up.text == "File Uploaded"
        got = c.post("/file", data={"file_path": target})
        assert got.content == b"\x00\x01payload"
        assert "attachment" in got.headers["content-disposition"]
        assert c.post("/file", data={"file_path": target + ".nope"}).status_code == 404
        assert c.post("/file", json={"file_path": target}).status_code == 400
        no_cmd = c.post("/execute", json={"shell": True})
        assert no_cmd.status_code == 422 and "command" in no_cmd.text
        bad_action = c.post("/coda/act", json={"action": {"type": "click", "x": -5, "y": 1}})
        assert bad_action.status_code == 422 and "x" in bad_action.text
        assert c.post("/setup/upload", data={"file_path": target}).status_code == 400


def test_close_apps_ends_everything_the_agent_started(desktop: LocalDesktop) -> None:
    guest = desktop.guest
    assert guest is not None
    guest.launch(["xterm"])
    guest.launch("sleep 300 & sleep 301", shell=True)
    wait_for(lambda: window(guest, "xterm"), "the xterm window")
    reply = guest.close_apps()
    assert reply.killed >= 3 and reply.windows == []
    assert procs.marked_pids(desktop.id) == []


def test_a_display_that_is_not_there_is_display_unavailable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What python-xlib raises for a missing X server becomes the one typed error the routes
    answer 503 ``x_unavailable`` with."""
    from worker.guest.capture import DisplayUnavailable
    from worker.guest.xsession import XSession

    (tmp_path / "xauth").touch()
    monkeypatch.setenv("XAUTHORITY", str(tmp_path / "xauth"))
    x = XSession(":4093")  # no X server there
    with pytest.raises(DisplayUnavailable, match=r"display :4093: DisplayConnectionError"):
        x.screen_size()
