"""Desktop contracts shared by the worker and the guest agent.

A provider hands out desktops; each observation, health report, setup report and checker outcome
the worker records is one of these models. A broken desktop is reported with a typed
:class:`BrokenReason`; a setup step or checker the project does not know is a typed
``unsupported`` outcome naming the type, never a crash and never a silent pass.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from coda.bounds import INT32_MAX, MAX_ERROR_TEXT, MAX_LIST, Count, Millis, Pixels

ImageFormat = Literal["png", "webp", "jpeg"]
MEDIA_TYPES: dict[str, str] = {"png": "image/png", "webp": "image/webp", "jpeg": "image/jpeg"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GuestKind(StrEnum):
    """Which server answers on a desktop: the project's agent or OSWorld's (ScienceBoard's)."""

    CODA = "coda"
    OSWORLD = "osworld"


class BrokenReason(StrEnum):
    """Why a desktop cannot be used; the provider replaces it."""

    AGENT_GONE = "agent_gone"  # connection refused: the guest server is not running
    NOT_ANSWERING = "not_answering"  # the guest server (or the VM) does not answer in time
    X_CRASHED = "x_crashed"  # the display server is gone or refuses connections
    BLANK_SCREEN = "blank_screen"  # screenshots stay one flat colour (not booted, no X session)
    VM_OFF = "vm_off"  # the hypervisor reports the machine not running
    NO_GUEST_IP = "no_guest_ip"  # VMware Tools never reported an address
    START_FAILED = "start_failed"  # a process, VM or container could not be started
    SCREENSHOT_BUDGET = "screenshot_budget"  # a leaking guest's screenshots of this boot spent


class DesktopBroken(RuntimeError):
    """Raised by providers and guest clients when a desktop cannot serve a request."""

    def __init__(self, reason: BrokenReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


SESSION_EXIT_CONFIG = 2
SESSION_EXIT_START = 6
SESSION_EXIT_CODES = {"xvfb": 3, "wm": 4, "agent": 5}
"""The desktop session's exit code when that process died (``worker.guest.session``: 2, it
refused to start, bad settings; 6, a process did not start): the container's exit code."""
SESSION_EXIT_REASONS = {3: BrokenReason.X_CRASHED, 4: BrokenReason.X_CRASHED,
                        5: BrokenReason.AGENT_GONE, SESSION_EXIT_CONFIG: BrokenReason.START_FAILED,
                        SESSION_EXIT_START: BrokenReason.START_FAILED}
"""What a session's exit code means to a provider (any other code: the container was killed,
ran out of memory or removed: ``vm_off``)."""


class ProviderFault(StrEnum):
    """Why a worker's desktop provider cannot make desktops at all: a fault of the
    infrastructure, never of an episode. The worker gives the job back without counting the
    attempt, stops leasing episodes, probes the provider with backoff and resumes by itself
    when it answers."""

    UNREACHABLE = "unreachable"  # vCenter / ESXi, the Docker engine, vmrun: no answer
    CREDENTIALS_REFUSED = "credentials_refused"  # the login was refused
    MISSING = "missing"  # the template, its snapshot, the image or a program is not there
    MISCONFIGURED = "misconfigured"  # an option that cannot work: a ca_file that cannot be
    # read, an untrusted certificate or thumbprint, an endpoint that is not vSphere


class ProviderDown(DesktopBroken):
    """The provider's infrastructure failed (:class:`ProviderFault`), not the desktop: the
    worker waits it out instead of spending the episode's attempts. ``reason`` is the typed
    desktop reason the same failure has always carried (``start_failed``, ``not_answering``);
    ``detail`` names what is wrong (the host:port, the template, the file)."""

    def __init__(self, fault: ProviderFault, reason: BrokenReason, detail: str) -> None:
        super().__init__(reason, detail)
        self.fault = fault


class ProviderState(_Model):
    """A worker's view of its desktop provider, sent with its heartbeats and shown by the
    status page: ok, or the fault it waits out."""

    ok: bool = True
    fault: ProviderFault | None = None
    detail: str = Field(default="", max_length=2000, description="what is wrong, named")
    since: datetime | None = Field(default=None, description="when the fault was first seen")
    given_back: int = Field(default=0, ge=0, le=INT32_MAX,
                            description="jobs given back uncounted during this fault")
    next_probe_s: float | None = Field(default=None, ge=0, le=86_400,
                                       description="seconds until the next probe")


class Health(_Model):
    ok: bool
    reason: BrokenReason | None = None
    detail: str = ""


class Observation(_Model):
    """One screenshot of a desktop, as the planner and executor will see it (the image is
    base64 in JSON)."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    image: bytes = Field(repr=False, description="encoded image")
    format: ImageFormat = "png"
    width: Pixels = Field(description="image width in pixels (after scaling)")
    height: Pixels
    screen_width: Pixels = Field(description="the desktop's own size; actions use it")
    screen_height: Pixels
    elapsed_ms: Millis = Field(default=0.0, description="time the screenshot took")

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]


class ActResult(_Model):
    """What happened to one action sent to a desktop."""

    ok: bool
    elapsed_ms: Millis
    error: str | None = None


class StepStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"  # the step ran and did not succeed
    UNSUPPORTED = "unsupported"  # a step type the project does not know
    UNAVAILABLE = "unavailable"  # known, but this desktop lacks what it needs (e.g. an app API)


class SetupStepResult(_Model):
    index: int = Field(ge=0, le=MAX_LIST)
    func: str
    status: StepStatus
    detail: str = ""
    elapsed_ms: Millis = 0.0


class SetupReport(_Model):
    steps: list[SetupStepResult] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.status is StepStatus.OK for s in self.steps)

    @property
    def first_problem(self) -> SetupStepResult | None:
        return next((s for s in self.steps if s.status is not StepStatus.OK), None)


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNSUPPORTED = "unsupported"  # a checker type the project does not know
    UNAVAILABLE = "unavailable"  # known, but this desktop lacks what it needs
    ERROR = "error"  # the checker could not run (guest error, bad task field)


class CheckResult(_Model):
    type: str
    status: CheckStatus
    detail: str = ""


class CheckVerdict(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNDECIDED = "undecided"  # a checker could not decide (unsupported, unavailable, error)
    NO_CHECKER = "no_checker"  # the task has no checker: left to the judge


class CheckOutcome(_Model):
    """The task's own checkers on the final state, combined as the task format says."""

    verdict: CheckVerdict
    results: list[CheckResult] = Field(default_factory=list)

    @property
    def success(self) -> bool | None:
        """True / False when the checkers decided, None when the judge must."""
        if self.verdict is CheckVerdict.SUCCESS:
            return True
        if self.verdict is CheckVerdict.FAILURE:
            return False
        return None


EndKind = Literal["DONE", "FAIL", "ANS", "TIMEOUT"]
"""How an episode ended: the agent said DONE, FAIL or gave an answer, or the budget ran out."""


class EpisodeEnd(_Model):
    """How the agent ended the episode (ScienceBoard's stop types) and its answer, if any."""

    kind: EndKind
    answer: str | None = None


# The project's guest agent: what its own routes answer (``/health``, ``/coda/windows``,
# ``/coda/close_apps``; ``/coda/act`` answers an ActResult). X11 sizes: window ids are 32-bit,
# positions signed 16-bit, sizes unsigned 16-bit.

X_POSITION = 2**15
X_SIZE = 2**16 - 1


class WindowInfo(_Model):
    """A top-level window the window manager lists (EWMH ``_NET_CLIENT_LIST``)."""

    id: int = Field(ge=0, le=2**32 - 1, description="X window id")
    title: str
    wm_class: list[str] = Field(max_length=MAX_LIST, description="WM_CLASS: instance, class")
    pid: int | None = Field(ge=0, le=INT32_MAX, description="_NET_WM_PID, when set")
    x: int = Field(ge=-X_POSITION, le=X_POSITION - 1)
    y: int = Field(ge=-X_POSITION, le=X_POSITION - 1)
    width: int = Field(ge=0, le=X_SIZE)
    height: int = Field(ge=0, le=X_SIZE)


class PopupInfo(_Model):
    """A mapped override-redirect window at the root: a menu, a submenu, a drop-down list or a
    tooltip the window manager does not list, on screen now."""

    id: int = Field(ge=0, le=2**32 - 1, description="X window id")
    x: int = Field(ge=-X_POSITION, le=X_POSITION - 1)
    y: int = Field(ge=-X_POSITION, le=X_POSITION - 1)
    width: int = Field(ge=0, le=X_SIZE)
    height: int = Field(ge=0, le=X_SIZE)


class CloseAppsReply(_Model):
    """What closing the agent's processes did: how many were killed, which windows are left."""

    killed: Count
    windows: list[WindowInfo]


class CommandReply(BaseModel):
    """A command run to completion by ``/setup/execute`` (OSWorld's ``/execute``, answered by
    both agents): ``returncode`` None where the server did not say (unknown fields of
    OSWorld's server are ignored)."""

    model_config = ConfigDict(extra="ignore")

    status: str = Field(default="success", max_length=64)
    output: str = ""
    error: str = ""
    returncode: int | None = Field(default=None, ge=-INT32_MAX, le=INT32_MAX)

    @property
    def ok(self) -> bool:
        """It ran and exited 0."""
        return self.status == "success" and self.returncode == 0


class CheckReply(_Model):
    """A ScienceBoard check the guest runs (``/lean/check``, ``/tex/check``): ``pass``, and
    why not."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    passed: bool = Field(alias="pass")
    detail: str | None = None


class GuestHealth(_Model):
    """The agent's readiness: ``ok`` with the screen's size, or ``x_unavailable`` (503)."""

    status: Literal["ok", "x_unavailable"]
    agent: str = Field(description="coda-guest: tells the project's agent from OSWorld's server")
    version: str | None = None
    width: Pixels | None = None
    height: Pixels | None = None
    detail: str | None = Field(default=None, description="why the display is unavailable")


# The routes the guest client posts to: the project's agent's readers of an application's state
# inside the desktop (``/coda/grass``, ``/coda/celestia``) and the routes ScienceBoard added to
# OSWorld's server (``/append``, ``/opt``, ``/chimerax/run``), which both servers answer.

GRASS_MAX_ARGS_BYTES = 64 * 1024


class GrassOp(StrEnum):
    """An operation of GRASS GIS's GUI state reader (``worker/tasks/adapters/grass/
    wxgui_state.py`` answers exactly these; tests/worker/test_grass_launch.py holds them
    equal)."""

    READY = "ready"
    DUMP = "dump"
    MAP = "map"
    LAYER = "layer"
    SCALE = "scale"
    GCMD = "gcmd"
    RESTART = "restart"
    RECTS = "rects"


class GrassRequest(_Model):
    """``POST /coda/grass``: one operation of the GUI's state reader (see the reader's module
    for each)."""

    op: GrassOp
    args: dict[str, Any] = Field(default_factory=dict, description="the operation's arguments")
    timeout_s: float = Field(default=30.0, gt=0, le=300,
                             description="bound on the operation in the GUI")

    @field_validator("args")
    @classmethod
    def _small(cls, v: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(v)) > GRASS_MAX_ARGS_BYTES:
            raise ValueError(f"args: more than {GRASS_MAX_ARGS_BYTES} bytes")
        return v


class GrassReply(_Model):
    """The reader's reply: ``ok`` with the operation's result, or its error in the GUI."""

    ok: bool
    result: Any = None
    error: str | None = Field(default=None, max_length=MAX_ERROR_TEXT)


MAX_CELESTIA_ENTITIES = 64


class CelestiaOp(StrEnum):
    VERSION = "version"
    DUMP = "dump"


class SelectionType(IntEnum):
    """Celestia's ``SelectionType`` (``celengine/selection.h``), as the tasks' queries use it."""

    STAR = 1
    BODY = 2
    DEEP_SKY = 3


class CelestiaEntity(_Model):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    type: SelectionType


class CelestiaRequest(_Model):
    """``POST /coda/celestia``: the state dump of Celestia's dump server, or its version."""

    port: int = Field(ge=1024, le=65535, description="the dump server's port («PORTLIKE»)")
    op: CelestiaOp = CelestiaOp.DUMP
    query: list[CelestiaEntity] = Field(default_factory=list, max_length=MAX_CELESTIA_ENTITIES,
                                        description="the entities the dump describes")
    timeout_s: float = Field(default=20.0, gt=0, le=120)


class CelestiaReply(_Model):
    """The dump's JSON, or the version's text."""

    result: Any


class WriteRequest(BaseModel):
    """``POST /write`` and ``/append`` (ScienceBoard's): text into a file of the desktop."""

    path: str = Field(min_length=1)
    content: str = ""


class OptRequest(BaseModel):
    """``POST /opt`` (ScienceBoard's): the accessibility tree's depth limit."""

    depth: int = Field(default=50, ge=1, le=1000)


class ChimeraxRequest(BaseModel):
    """``POST /chimerax/run`` (ScienceBoard's): one command for ChimeraX's REST remote
    control on the desktop."""

    port: int = Field(default=8000, ge=1, le=65535)
    command: str = ""


class ChimeraxReply(BaseModel):
    """ChimeraX's answer to a command (``remotecontrol rest start json true``): ``error``
    None when it succeeded, its log's messages by level (its other fields are ignored)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    error: Any = None
    log_messages: dict[str, Any] = Field(default_factory=dict, alias="log messages")

    @property
    def notes(self) -> list[str]:
        """The log's ``note`` messages."""
        return [str(note) for note in self.log_messages.get("note") or []]
