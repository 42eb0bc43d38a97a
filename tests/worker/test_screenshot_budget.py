"""Screenshots spent by guest kind. OSWorld's / ScienceBoard's guest server leaks one X connection
per screenshot: a 500 at the 251st of a boot, a crash at the 252nd (measured on their server).
Their VM images cannot run here, so a real HTTP server in their protocol's shape stands in for
it (``/health`` unknown, ``GET /screenshot``, ``POST /setup/execute``, ``POST /screen_size``)
and fails the same way after ``limit`` screenshots. The desktop settles and steps against it
on a fake clock (no waits) and must never reach the failure; the project's own agent keeps the
50 ms quiet-period polling."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from coda.actions import Click
from coda.contracts.desktop import BrokenReason, DesktopBroken, GuestKind
from tests.fixtures.images import image_bytes
from worker.providers.base import OSWORLD_PAUSE_S, Desktop
from worker.providers.client import GuestClient, GuestError, ScreenshotBudgetSpent
from worker.providers.local import LocalDesktop
from worker.settings import WorkerSettings


class LeakyGuest:
    """The stand-in. ``limit`` screenshots per boot answer; the next one is a 500, the one after
    that crashes the server: from then on every request is dropped unanswered, until
    :meth:`reboot` (a VM revert). ``coda=True`` answers ``/health`` as the project's agent."""

    PNG = image_bytes((64, 40), (0x3B, 0x5A, 0x80), patch=(8, 8, 24, 24))  # not flat: healthy

    def __init__(self, limit: int = 250, *, coda: bool = False) -> None:
        self.limit, self.coda = limit, coda
        self.shots = self.failures = self.boots = 0
        self.dead = False
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.guest = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def reboot(self) -> None:
        self.shots, self.dead = 0, False
        self.boots += 1

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Server(ThreadingHTTPServer):
    guest: LeakyGuest


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        guest = self.server.guest
        if guest.dead:
            return  # crashed: the connection closes without an answer
        if self.path == "/health" and guest.coda:
            self._send(200, b'{"status": "ok", "agent": "coda-guest"}')
        elif self.path.startswith("/screenshot"):
            guest.shots += 1
            if guest.shots > guest.limit + 1:
                guest.dead = True
            elif guest.shots == guest.limit + 1:
                guest.failures += 1
                self._send(500, b'{"error": "Maximum number of clients reached"}')
            else:
                self._send(200, LeakyGuest.PNG, "image/png")
        else:
            self._send(404, b"not found", "text/html")

    def do_POST(self) -> None:
        guest = self.server.guest
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if guest.dead:
            return
        if self.path == "/setup/execute":
            self._send(200, json.dumps({"status": "success", "output": "", "error": "",
                                        "returncode": 0}).encode())
        elif self.path == "/screen_size":
            self._send(200, b'{"width": 64, "height": 40}')
        else:
            self._send(404, b"not found", "text/html")


class GuestVm(Desktop):
    """A desktop whose machine is the stand-in: start and revert boot its server anew, as a VM
    snapshot revert or a new container does."""

    provider_name = "stand-in"

    def __init__(self, server: LeakyGuest) -> None:
        super().__init__(0, ready_timeout_s=5)
        self.server = server
        self.pauses: list[float] = []
        self.sleep = self.pauses.append  # the fixed pause is recorded, not waited out

    def _start(self) -> GuestClient:
        self.server.reboot()
        return GuestClient(self.server.url)

    def _revert(self) -> GuestClient | None:
        self.server.reboot()
        return None

    def _stop(self) -> None:
        pass


class KeptGuestVm(GuestVm):
    """A provider whose reset keeps the guest server running (as the local one does)."""

    revert_restarts_guest = False

    def _revert(self) -> GuestClient | None:
        return None


@pytest.fixture
def leaky() -> Iterator[LeakyGuest]:
    server = LeakyGuest()
    yield server
    server.close()


def test_the_stand_in_fails_as_their_server_does(leaky: LeakyGuest) -> None:
    """Without a budget, polling it the way a 50 ms settle would breaks it: 250 answer, the
    251st is a 500, the 252nd crashes the server."""
    guest = GuestClient(leaky.url)
    try:
        for _ in range(250):
            guest.screenshot()
        with pytest.raises(GuestError, match="HTTP 500"):
            guest.screenshot()
        with pytest.raises(DesktopBroken) as crash:
            guest.screenshot()
        assert crash.value.reason is BrokenReason.AGENT_GONE
        assert guest.screenshots == 252 and leaky.failures == 1 and leaky.dead
    finally:
        guest.close()


def _steps_until_spent(desktop: Desktop) -> int:
    """Act and settle until the budget refuses the step's screenshot; the steps completed."""
    steps = 0
    while True:
        assert desktop.act(Click(x=5, y=5)).ok
        try:
            shot = desktop.settle_and_observe(timeout_s=5)
        except ScreenshotBudgetSpent:
            return steps
        assert shot is not None and shot.image == LeakyGuest.PNG
        steps += 1


def test_a_leaking_guest_is_stepped_within_its_budget_then_recycled(leaky: LeakyGuest) -> None:
    desktop = GuestVm(leaky)
    desktop.reset()  # one readiness probe, one first observation
    assert desktop.guest is not None and desktop.guest.kind is GuestKind.OSWORLD
    assert desktop.screenshots_this_boot == 2

    steps = _steps_until_spent(desktop)
    assert steps == 198 and steps > leaky.limit / 2
    assert leaky.failures == 0 and not leaky.dead  # the failure was never reached
    assert desktop.screenshots_this_boot == leaky.shots == 200
    # each settle waited OSWorld's fixed pause and took one screenshot: no polling
    assert desktop.pauses == [OSWORLD_PAUSE_S] * (steps + 1)

    desktop.reset()  # the spent boot is recycled with a typed reason, the guest never crashed
    assert desktop.replacements == 1 and desktop.last_broken is not None
    assert desktop.last_broken.reason is BrokenReason.SCREENSHOT_BUDGET
    assert "screenshot budget" in desktop.last_broken.detail
    assert leaky.boots == 2 and leaky.failures == 0
    assert desktop.screenshots_this_boot == leaky.shots == 2
    assert desktop.settle_and_observe(timeout_s=5) is not None


def test_the_budget_and_pause_come_from_the_settings(leaky: LeakyGuest) -> None:
    settings = WorkerSettings(osworld_screenshot_budget=10, osworld_settle_s=0.5)
    desktop = GuestVm(leaky)
    desktop.budget = settings.screenshot_budget()
    desktop.reset()
    assert _steps_until_spent(desktop) == 8 and leaky.shots == 10
    assert set(desktop.pauses) == {0.5}
    assert desktop.settle(timeout_s=0.2) and desktop.pauses[-1] == 0.2  # capped, no screenshot
    assert leaky.shots == 10
    assert desktop.guest is not None
    probes: list[str] = []

    def gone() -> None:  # asked between probes: never, when the budget is spent
        probes.append("again")

    h = desktop.guest.wait_ready(timeout=30, gone=gone)
    assert not h.ok and h.reason is BrokenReason.SCREENSHOT_BUDGET and not probes
    assert leaky.shots == 10
    with pytest.raises(ValidationError):
        WorkerSettings(osworld_screenshot_budget=251)  # past their server's failure


def test_a_new_boot_starts_a_new_count(leaky: LeakyGuest) -> None:
    desktop = GuestVm(leaky)
    desktop.reset()
    desktop.settle_and_observe()
    assert desktop.screenshots_this_boot == 3
    desktop.reset()  # the health check counts on the old boot; the revert boots the guest anew
    assert desktop.screenshots_this_boot == leaky.shots == 2 and desktop.replacements == 0


def test_a_reset_that_keeps_the_guest_keeps_the_count(leaky: LeakyGuest) -> None:
    assert LocalDesktop.revert_restarts_guest is False
    desktop = KeptGuestVm(leaky)
    desktop.reset()
    desktop.reset()  # health check, readiness probe, first observation: same boot
    assert desktop.screenshots_this_boot == leaky.shots == 5


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_own_agent_keeps_the_quiet_period_polling() -> None:
    """The project's agent does not leak: the settle polls small screenshots every 50 ms until
    the screen is quiet, and no budget refuses any (it is set, and exceeded)."""
    server = LeakyGuest(limit=10_000, coda=True)
    desktop = GuestVm(server)
    fake = FakeClock()
    desktop.clock, desktop.sleep = fake.clock, fake.sleep
    desktop.budget.per_boot = 3
    try:
        desktop.reset()
        assert desktop.guest is not None and desktop.guest.kind is GuestKind.CODA
        for _ in range(3):
            assert desktop.settle_and_observe(timeout_s=5) is not None
        assert set(fake.sleeps) == {0.05} and len(fake.sleeps) >= 3 * 4  # 0.2 s quiet each
        assert desktop.screenshots_this_boot == server.shots > 3 * 4
    finally:
        server.close()
