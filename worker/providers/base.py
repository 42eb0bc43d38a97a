"""The provider contract (in the spirit of Gymnasium's ``Env``): a provider hands out one
:class:`Desktop` per slot; a desktop is ``reset`` to a clean state, ``observe``d, ``act``ed on and
``close``d. Each provider implements four hooks (start, revert, stop, health of its machine);
readiness probing, broken-desktop replacement and the guest calls are shared here.

A broken desktop (agent gone, VM not answering, X crashed) is detected by :meth:`Desktop.health`
or by any call raising :class:`DesktopBroken`; :meth:`Desktop.reset` then replaces it (a full
stop and start) before handing it out again.

Screenshots are spent by guest kind (:class:`ScreenshotBudget`). Against the project's agent the
settle polls small screenshots every 50 ms until the screen is quiet. OSWorld's / ScienceBoard's
server leaks an X connection per screenshot and fails near 250 of them per boot, so against it
the settle waits a fixed pause, as their own client does after every action, and takes one
screenshot (the next step's); a boot may take ``per_boot`` screenshots, and the one past it is
refused (:class:`~worker.providers.client.ScreenshotBudgetSpent`): the attempt fails with a
typed reason and the next :meth:`Desktop.reset` recycles the desktop instead of crashing its
guest. ``Desktop.screenshots_this_boot`` counts them.
"""

from __future__ import annotations

import abc
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from coda.actions import Action
from coda.contracts.desktop import (
    ActResult,
    BrokenReason,
    DesktopBroken,
    GuestKind,
    Health,
    ImageFormat,
    Observation,
)
from coda.logging import get_logger
from worker.providers.client import GuestClient

log = get_logger("worker.providers")


def wait_quiet(small: Callable[[], bytes], *, timeout_s: float, poll_s: float, quiet_s: float,
               full: Callable[[], Observation] | None = None,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> tuple[bool, Observation | None]:
    """Poll ``small()`` (a cheap screenshot) until it has not changed for ``quiet_s``, at most
    ``timeout_s``: (whether it settled, ``full()`` taken at the first unchanged poll of the
    final quiet period). A change after that capture drops it; the quiet period is only
    complete after a poll that follows the capture, so the capture shows the settled screen."""
    deadline = clock() + timeout_s
    previous = small()
    changed = clock()
    captured: Observation | None = None
    while clock() < deadline:
        sleep(poll_s)
        current = small()
        now = clock()
        if current != previous:
            previous, changed, captured = current, now, None
        elif full is not None and captured is None:
            captured = full()
        elif now - changed >= quiet_s:
            return True, captured
    return False, None


GUEST_HOME = "/home/user"  # the user home of OSWorld's and ScienceBoard's images

OSWORLD_PAUSE_S = 2.0
"""OSWorld's ``DesktopEnv.step(action, pause=2)`` sleeps ``pause`` after the action, then takes
the one screenshot of its observation."""
OSWORLD_SCREENSHOT_BUDGET = 200
"""Their server fails at about 250 screenshots per boot (a 500 at the 251st, a crash at the
252nd, measured); 200 leaves room for screenshots other clients of the guest take."""


class ProviderConfigError(ValueError):
    """The provider options do not fit the provider (names the option)."""


class ProviderConflict(RuntimeError):
    """Another worker uses this worker's desktop names (the same clone or container prefix):
    the worker refuses to go on rather than touch desktops it does not own. The message names
    the other worker and what to change."""


def owner_slug(owner: str) -> str:
    """A worker's name as it can appear in a VM's or a container's name: letters, digits,
    ``.``, ``_`` and ``-`` (anything else ``-``), at most 40 characters."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", owner).strip("-.") or "worker"
    return slug[:40]


@dataclass
class ScreenshotBudget:
    """How a desktop spends screenshots on a guest whose server leaks one X connection per
    screenshot (OSWorld's, ScienceBoard's): the settle waits ``pause_s`` (capped by its
    timeout) and takes one screenshot; one boot of the guest server is sent at most
    ``per_boot`` screenshots (readiness probes, observations, checkers' included)."""

    pause_s: float = OSWORLD_PAUSE_S
    per_boot: int | None = OSWORLD_SCREENSHOT_BUDGET


@dataclass
class GuestLayout:
    """How task files address this desktop: path and command rewrites (a local slot's home is
    not ``/home/user``), the port ScienceBoard's patched applications serve their state on
    inside the desktop (``«PORTLIKE»``, 8000 on their images) and the URL the worker reaches
    that port at (through a VM's address or a container's port mapping)."""

    portlike: int = 8000
    app_url: str = "http://127.0.0.1:8000"
    rewrites: list[tuple[str, str]] = field(default_factory=list)
    programs: dict[str, str] = field(default_factory=dict)
    """Programs a task names by a bare name that this desktop runs from elsewhere, matched as
    a whole program name (never as a substring): ``chimerax`` -> a local build's launcher."""

    def rewrite(self, value: str) -> str:
        for old, new in self.rewrites:
            value = value.replace(old, new)
        return value.replace("«PORTLIKE»", str(self.portlike))


class Desktop(abc.ABC):
    """One desktop slot. Subclasses implement ``_start``, ``_revert``, ``_stop`` and may
    refine ``_machine_health``."""

    provider_name = "desktop"
    revert_restarts_guest = True
    """Whether ``_revert`` boots the guest server anew (a VM snapshot, a new container), which
    starts a new screenshot count; a provider whose revert keeps the server running says no."""

    def __init__(self, slot: int, *, ready_timeout_s: float = 120.0) -> None:
        self.slot = slot
        self.ready_timeout_s = ready_timeout_s
        self.guest: GuestClient | None = None
        self.layout = GuestLayout()
        self.replacements = 0
        self.last_broken: Health | None = None
        self.budget = ScreenshotBudget()
        self.sleep: Callable[[float], None] = time.sleep  # the settle's waits (tests: a fake)
        self.clock: Callable[[], float] = time.monotonic

    # hooks ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def _start(self) -> GuestClient:
        """Bring the machine (display, VM, container) up from nothing; return its guest."""

    @abc.abstractmethod
    def _revert(self) -> GuestClient | None:
        """Return a running machine to its clean state (snapshot, template home, new container);
        return a new guest client when its address changed. Raises :class:`DesktopBroken` when
        that is impossible."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop everything this desktop started; safe to call twice."""

    def _machine_health(self) -> Health:
        """The hypervisor's / container's view; default: nothing to add."""
        return Health(ok=True)

    def _down(self) -> Health | None:
        """Checked between readiness probes: a cheap sign that the machine is gone (so
        waiting is pointless), or None. Default: none."""
        return None

    # contract ------------------------------------------------------------------------------

    def reset(self, *, options: dict[str, Any] | None = None) -> Observation:
        """Clean state, probed ready; a broken desktop is replaced first. Returns the first
        observation."""
        started = time.monotonic()
        before = self.screenshots_this_boot
        if self.guest is None:
            self.guest = self._start()
        else:
            h = self.health()
            if not h.ok:
                self._replace(h)
            else:
                try:
                    moved = self._revert()
                    if moved is not None:
                        self.guest.close()
                        self.guest = moved
                    elif self.revert_restarts_guest:
                        self.guest.new_boot()
                except DesktopBroken as exc:
                    self._replace(Health(ok=False, reason=exc.reason, detail=exc.detail))
        self._guest().screenshot_budget = self.budget.per_boot
        self._wait_ready()
        log.info("desktop.reset", provider=self.provider_name, slot=self.slot,
                 seconds=round(time.monotonic() - started, 3), screenshots_before=before,
                 screenshots_this_boot=self.screenshots_this_boot)
        return self.observe(**(options or {}).get("observe", {}))

    def observe(self, *, fmt: ImageFormat = "png", width: int | None = None,
                height: int | None = None) -> Observation:
        return self._guest().observe(fmt=fmt, width=width, height=height)

    def act(self, action: Action) -> ActResult:
        return self._guest().act(action)

    @property
    def screenshots_this_boot(self) -> int:
        """Screenshots sent to the guest server since it last booted (logs, metrics)."""
        return self.guest.screenshots if self.guest is not None else 0

    def _paced(self, timeout_s: float) -> bool:
        """Against a leaking guest (OSWorld's server): wait the fixed pause instead of polling
        (True); against the project's agent: nothing (False)."""
        if self._guest().kind is not GuestKind.OSWORLD:
            return False
        self.sleep(min(self.budget.pause_s, timeout_s))
        return True

    def settle(self, *, timeout_s: float = 10.0, poll_s: float = 0.05, quiet_s: float = 0.2,
               width: int = 320) -> bool:
        """Wait until the screen stops changing (small screenshots unchanged for ``quiet_s``),
        at most ``timeout_s``; whether it settled. Applications such as TeXstudio handle keys
        typed during a state change (a panel closing, focus moving) out of step with the
        change, so the next action waits for the previous one to take effect; the quiet period
        covers an application that is busy and has not repainted yet. Against a leaking guest
        the fixed pause of :class:`ScreenshotBudget` instead, without a screenshot (True)."""
        if self._paced(timeout_s):
            return True
        settled, _ = wait_quiet(lambda: self.observe(width=width).image, timeout_s=timeout_s,
                                poll_s=poll_s, quiet_s=quiet_s, clock=self.clock,
                                sleep=self.sleep)
        return settled

    def settle_and_observe(self, *, timeout_s: float = 10.0, poll_s: float = 0.05,
                           quiet_s: float = 0.2, width: int = 320) -> Observation | None:
        """:meth:`settle`, and the full observation of the settled screen, taken during the
        quiet period (which is waited out anyway) instead of after it; None when the screen
        did not settle. Against a leaking guest: the fixed pause, then one observation."""
        if self._paced(timeout_s):
            return self.observe()
        _, shot = wait_quiet(lambda: self.observe(width=width).image, timeout_s=timeout_s,
                             poll_s=poll_s, quiet_s=quiet_s, full=self.observe, clock=self.clock,
                             sleep=self.sleep)
        return shot

    def health(self) -> Health:
        """Machine first, then the guest (agent answers, display up, screen not blank)."""
        h = self._machine_health()
        if h.ok:
            h = self._guest().health() if self.guest is not None else Health(
                ok=False, reason=BrokenReason.START_FAILED, detail="never started")
        if not h.ok:
            self.last_broken = h
            log.warning("desktop.broken", provider=self.provider_name, slot=self.slot,
                        reason=h.reason, detail=h.detail)
        return h

    def close(self) -> None:
        if self.guest is not None:
            self.guest.close()
            self.guest = None
        self._stop()

    # shared --------------------------------------------------------------------------------

    def _guest(self) -> GuestClient:
        if self.guest is None:
            raise DesktopBroken(BrokenReason.START_FAILED, "reset() the desktop first")
        return self.guest

    def _replace(self, why: Health) -> None:
        log.warning("desktop.replace", provider=self.provider_name, slot=self.slot,
                    reason=why.reason, detail=why.detail)
        self.last_broken = why
        self.replacements += 1
        if self.guest is not None:
            self.guest.close()
            self.guest = None
        self._stop()
        self.guest = self._start()

    def _wait_ready(self) -> None:
        h = self._guest().wait_ready(timeout=self.ready_timeout_s, gone=self._down)
        if not h.ok:
            assert h.reason is not None
            raise DesktopBroken(h.reason, f"not ready after {self.ready_timeout_s:g} s: {h.detail}")


D = TypeVar("D", bound=Desktop)


class Provider(abc.ABC, Generic[D]):
    """Creates the desktops of a fleet of slots and hands them out.

    :meth:`probe` says whether the infrastructure behind them (a vCenter, a Docker engine,
    ``vmrun``, the programs of a local desktop) can make desktops now; a failure of that
    infrastructure, here or in any desktop call, is :class:`~coda.contracts.desktop.
    ProviderDown` (the worker waits it out and charges no episode for it), while a desktop
    that breaks is :class:`~coda.contracts.desktop.DesktopBroken` (the episode's attempt)."""

    name = "provider"

    def __init__(self) -> None:
        self._desktops: dict[int, D] = {}

    def probe(self) -> None:
        """Whether desktops can be made now, cheaply (no desktop is started); the first
        successful probe also removes what an earlier run of this worker left behind. Raises
        :class:`~coda.contracts.desktop.ProviderDown` naming what is wrong, and
        :class:`ProviderConflict` when another worker uses this worker's desktop names.
        Default: nothing to check."""

    @abc.abstractmethod
    def _make(self, slot: int) -> D:
        """A desktop for ``slot`` (not started: the first ``reset`` starts it)."""

    def desktop(self, slot: int) -> D:
        if slot not in self._desktops:
            self._desktops[slot] = self._make(slot)
        return self._desktops[slot]

    def close(self) -> None:
        for d in self._desktops.values():
            d.close()
        self._desktops.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
