"""A client for a desktop's guest server: the project's agent, or OSWorld's / ScienceBoard's
server on their images (port 5000, no token), driven unmodified.

The kind is detected once (``/health`` answers only on the project's agent). Against OSWorld's
server, screenshots are serialised (two at once corrupt each other there) and actions go through
``/execute`` as ``python -c "import pyautogui; ..."`` exactly as their client sends them.
Transport failures become :class:`DesktopBroken` with a typed reason.

Every screenshot request is counted (``screenshots``, since the guest server's boot: the desktop
calls :meth:`GuestClient.new_boot` when it restarts the guest). OSWorld's server leaks one X
connection per screenshot and fails near 250 of them (a 500, then a crash); with a
``screenshot_budget`` set, the client refuses the screenshot that would go past it with
:class:`ScreenshotBudgetSpent` (a :class:`DesktopBroken`: the desktop is recycled) instead of
sending it. The project's agent does not leak: no budget applies to it.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from PIL import Image
from pydantic import BaseModel, TypeAdapter, ValidationError

from coda.actions import Action, Answer, Done, Fail, to_pyautogui
from coda.contracts.desktop import (
    ActResult,
    BrokenReason,
    CelestiaReply,
    CelestiaRequest,
    CheckReply,
    ChimeraxReply,
    ChimeraxRequest,
    CloseAppsReply,
    CommandReply,
    DesktopBroken,
    GrassReply,
    GrassRequest,
    GuestKind,
    Health,
    ImageFormat,
    Observation,
    OptRequest,
    PopupInfo,
    WindowInfo,
    WriteRequest,
)
from coda.logging import get_logger
from coda.screenshots import encode, is_blank, scale

ReplyT = TypeVar("ReplyT", bound=BaseModel)
OSWORLD_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
OSWORLD_PROBE_S = 1.0
"""Readiness probes of OSWorld's server (each one a screenshot) are this far apart at least."""

GRASS_ROUTE = "/coda/grass"
CELESTIA_ROUTE = "/coda/celestia"

log = get_logger("worker.providers")
WINDOWS: TypeAdapter[list[WindowInfo]] = TypeAdapter(list[WindowInfo])
POPUPS: TypeAdapter[list[PopupInfo]] = TypeAdapter(list[PopupInfo])


class ScreenshotBudgetSpent(DesktopBroken):
    """The screenshot budget of this boot of a leaking guest server is spent: the screenshot
    was not sent, and the desktop must be recycled (restarted) before the next one (typed
    reason ``screenshot_budget``)."""

    def __init__(self, taken: int, budget: int) -> None:
        super().__init__(BrokenReason.SCREENSHOT_BUDGET,
                         f"screenshot budget of this boot spent ({taken} of {budget}): the "
                         "guest's server leaks an X connection per screenshot; recycle the desktop")
        self.taken = taken
        self.budget = budget


class GuestError(RuntimeError):
    """The guest answered, but with an error for this request."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class GuestClient:
    """Synchronous client for one desktop (``base_url`` like ``http://10.0.0.5:5000``)."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0,
                 kind: GuestKind | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        self._kind = kind
        self._shot_lock = threading.Lock()
        self.screenshots = 0
        """Screenshot requests sent since the guest server's boot (:meth:`new_boot`)."""
        self.screenshot_budget: int | None = None
        """The most screenshots one boot of a leaking guest (OSWorld's server) may be sent;
        None: no limit. Never applied to the project's agent."""

    # transport ---------------------------------------------------------------------------

    def request(self, method: str, path: str, *, timeout: float | None = None,
                **kwargs: Any) -> httpx.Response:
        """One HTTP call; transport failures become :class:`DesktopBroken`."""
        try:
            if timeout is not None:
                kwargs["timeout"] = timeout
            return self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise DesktopBroken(BrokenReason.AGENT_GONE,
                                f"{self.base_url}{path}: connection refused ({exc})") from exc
        except httpx.TimeoutException as exc:
            raise DesktopBroken(BrokenReason.NOT_ANSWERING,
                                f"{self.base_url}{path}: no answer in time") from exc
        except httpx.TransportError as exc:
            raise DesktopBroken(BrokenReason.AGENT_GONE, f"{self.base_url}{path}: {exc}") from exc

    def _ok(self, resp: httpx.Response) -> httpx.Response:
        if resp.status_code == 503 and "x_unavailable" in resp.text:
            raise DesktopBroken(BrokenReason.X_CRASHED, resp.text[:300])
        if resp.status_code >= 400:
            raise GuestError(resp.status_code, resp.text[:500])
        return resp

    def _reply(self, resp: httpx.Response, model: type[ReplyT], path: str) -> ReplyT:
        """A 2xx answer read as ``model``; one that is not is the guest's error."""
        try:
            return model.model_validate_json(self._ok(resp).content)
        except ValidationError as exc:
            raise GuestError(resp.status_code, f"{path} answered {exc}"[:500]) from exc

    def close(self) -> None:
        self._http.close()

    def new_boot(self) -> None:
        """The guest server was restarted (VM reverted, container recreated): count anew."""
        self.screenshots = 0

    @property
    def budget_spent(self) -> bool:
        """Whether the next screenshot would go past the budget of a leaking guest."""
        return (self.screenshot_budget is not None and self._kind is GuestKind.OSWORLD
                and self.screenshots >= self.screenshot_budget)

    # discovery and health ----------------------------------------------------------------

    @property
    def kind(self) -> GuestKind:
        if self._kind is None:
            resp = self.request("GET", "/health", timeout=5)
            is_coda = resp.status_code in (200, 503) and "coda-guest" in resp.text
            self._kind = GuestKind.CODA if is_coda else GuestKind.OSWORLD
        return self._kind

    def health(self, *, timeout: float = 5.0) -> Health:
        """Agent up, display up, screen not one flat colour."""
        try:
            if self.kind is GuestKind.CODA:
                resp = self.request("GET", "/health", timeout=timeout)
                if resp.status_code != 200:
                    return Health(ok=False, reason=BrokenReason.X_CRASHED, detail=resp.text[:300])
            img = Image.open(io.BytesIO(self.screenshot(timeout=timeout)))
        except DesktopBroken as exc:
            return Health(ok=False, reason=exc.reason, detail=exc.detail)
        except GuestError as exc:
            return Health(ok=False, reason=BrokenReason.X_CRASHED, detail=str(exc))
        if is_blank(img.convert("RGB")):
            return Health(ok=False, reason=BrokenReason.BLANK_SCREEN,
                          detail="the screen is one flat colour")
        return Health(ok=True)

    def wait_ready(self, *, timeout: float, interval: float = 0.1,
                   gone: Callable[[], Health | None] | None = None) -> Health:
        """Probe :meth:`health` until it passes or ``timeout`` seconds have gone; ``gone``
        may report that waiting longer is pointless (the machine itself is down)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            h = self.health(timeout=max(0.5, min(5.0, left)))
            if h.ok or left <= 0 or self.budget_spent:
                return h
            down = gone() if gone is not None else None
            if down is not None:
                return down
            pause = max(interval, OSWORLD_PROBE_S) if self._kind is GuestKind.OSWORLD else interval
            time.sleep(min(pause, max(left, 0)))

    # observation and actions -------------------------------------------------------------

    def screenshot(self, *, fmt: ImageFormat = "png", width: int | None = None,
                   height: int | None = None, timeout: float | None = None) -> bytes:
        if self.kind is GuestKind.CODA:
            params = {k: v for k, v in {"format": fmt, "width": width,
                                        "height": height}.items() if v is not None}
            self.screenshots += 1
            return self._ok(self.request("GET", "/screenshot", params=params,
                                         timeout=timeout)).content
        with self._shot_lock:  # OSWorld's server corrupts concurrent screenshots
            if self.budget_spent:
                assert self.screenshot_budget is not None
                log.warning("desktop.screenshot_budget_spent", guest=self.base_url,
                            screenshots=self.screenshots, budget=self.screenshot_budget)
                raise ScreenshotBudgetSpent(self.screenshots, self.screenshot_budget)
            self.screenshots += 1  # counted when sent: a failed one leaks all the same
            png = self._ok(self.request("GET", "/screenshot", timeout=timeout)).content
        if fmt == "png" and not width and not height:
            return png
        img = Image.open(io.BytesIO(png)).convert("RGB")
        return encode(scale(img, width, height), fmt)

    def observe(self, *, fmt: ImageFormat = "png", width: int | None = None,
                height: int | None = None) -> Observation:
        start = time.perf_counter()
        data = self.screenshot(fmt=fmt, width=width, height=height)
        img = Image.open(io.BytesIO(data))
        sw, sh = self.screen_size() if (width or height) else img.size
        return Observation(image=data, format=fmt, width=img.width, height=img.height,
                           screen_width=sw, screen_height=sh,
                           elapsed_ms=(time.perf_counter() - start) * 1000)

    def act(self, action: Action) -> ActResult:
        start = time.perf_counter()
        if isinstance(action, Done | Fail | Answer):
            return ActResult(ok=True, elapsed_ms=0.0)
        if self.kind is GuestKind.CODA:
            resp = self._ok(self.request("POST", "/coda/act",
                                         json={"action": action.model_dump(mode="json")},
                                         timeout=max(90.0, getattr(action, "seconds", 0) + 30)))
            return ActResult.model_validate(resp.json())
        out = self.execute(["python", "-c", OSWORLD_PREFIX + to_pyautogui(action)], timeout=90)
        return ActResult(ok=out.ok, elapsed_ms=(time.perf_counter() - start) * 1000,
                         error=None if out.ok else out.error[-500:])

    # OSWorld routes ----------------------------------------------------------------------

    def execute(self, command: str | list[str], *, shell: bool = False,
                timeout: float = 130.0) -> CommandReply:
        """``/setup/execute``: the command's output, error and return code."""
        resp = self.request("POST", "/setup/execute",
                            json={"command": command, "shell": shell}, timeout=timeout)
        return self._reply(resp, CommandReply, "/setup/execute")

    def restore(self) -> None:
        """``/coda/restore`` (the project's agent): the home made a fresh copy of the
        template the agent is configured with, and the temporary directories emptied."""
        self._ok(self.request("POST", "/coda/restore", timeout=180))

    def check(self, path: str, body: dict[str, Any], *, timeout: float) -> CheckReply:
        """A ScienceBoard check (``/lean/check``, ``/tex/check``): passed, and why not."""
        return self._reply(self.request("POST", path, json=body, timeout=timeout), CheckReply,
                           path)

    def launch(self, command: str | list[str], *, shell: bool = False) -> str:
        resp = self._ok(self.request("POST", "/setup/launch",
                                     json={"command": command, "shell": shell}))
        return resp.text

    def read_file(self, path: str) -> bytes | None:
        """The file's bytes, None when it does not exist."""
        resp = self.request("POST", "/file", data={"file_path": path})
        if resp.status_code == 404:
            return None
        return self._ok(resp).content

    def upload(self, path: str, data: bytes) -> None:
        self._ok(self.request("POST", "/setup/upload", data={"file_path": path},
                              files={"file_data": (path.rsplit("/", 1)[-1], data)}))

    def open_file(self, path: str) -> None:
        self._ok(self.request("POST", "/setup/open_file", json={"path": path}))

    def window(self, op: str, name: str, *, strict: bool = False, by_class: bool = False) -> None:
        """``op`` is ``activate`` or ``close`` (OSWorld's wmctrl routes)."""
        self._ok(self.request("POST", f"/setup/{op}_window", json={
            "window_name": name, "strict": strict, "by_class": by_class}))

    def screen_size(self) -> tuple[int, int]:
        body = self._ok(self.request("POST", "/screen_size")).json()
        return int(body["width"]), int(body["height"])

    # ScienceBoard routes (also on the project's agent) ------------------------------------

    def append(self, path: str, content: str) -> None:
        """``/append``: ``content`` added to the desktop's file ``path``."""
        self._post("/append", WriteRequest(path=path, content=content))

    def set_a11y_depth(self, depth: int) -> None:
        """``/opt``: the accessibility tree's depth limit."""
        self._post("/opt", OptRequest(depth=depth))

    def chimerax(self, port: int, command: str) -> ChimeraxReply:
        """``/chimerax/run``: one command for ChimeraX's REST remote control on ``port``."""
        resp = self._post("/chimerax/run", ChimeraxRequest(port=port, command=command))
        return self._reply(resp, ChimeraxReply, "/chimerax/run")

    def _post(self, path: str, body: BaseModel, *, timeout: float = 240.0) -> httpx.Response:
        return self._ok(self.request("POST", path, json=body.model_dump(mode="json"),
                                     timeout=timeout))

    # the project's agent only ------------------------------------------------------------

    def windows(self) -> list[WindowInfo] | None:
        """Top-level windows, or None when the guest cannot list them (OSWorld's server)."""
        if self.kind is not GuestKind.CODA:
            return None
        return WINDOWS.validate_json(self._ok(self.request("GET", "/coda/windows")).content)

    def popups(self) -> list[PopupInfo] | None:
        """Menus and tooltips on screen, or None when the guest cannot list them (OSWorld's)."""
        if self.kind is not GuestKind.CODA:
            return None
        return POPUPS.validate_json(self._ok(self.request("GET", "/coda/popups")).content)

    def close_apps(self) -> CloseAppsReply:
        """Kill every process the agent started; what it killed and the windows left."""
        resp = self._ok(self.request("POST", "/coda/close_apps", timeout=60))
        return CloseAppsReply.model_validate_json(resp.content)

    def grass(self, request: GrassRequest) -> GrassReply:
        """``/coda/grass``: one operation of GRASS GIS's GUI state reader."""
        resp = self.request("POST", GRASS_ROUTE, json=request.model_dump(mode="json"),
                            timeout=request.timeout_s + 30)
        return self._reply(resp, GrassReply, GRASS_ROUTE)

    def celestia(self, request: CelestiaRequest) -> CelestiaReply:
        """``/coda/celestia``: Celestia's state dump, or its dump server's version."""
        resp = self.request("POST", CELESTIA_ROUTE, json=request.model_dump(mode="json"),
                            timeout=request.timeout_s + 30)
        return self._reply(resp, CelestiaReply, CELESTIA_ROUTE)
