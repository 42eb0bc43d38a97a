"""The desktop slots' gate: open while the desktop provider can make desktops, closed while its
infrastructure is down (:class:`~coda.contracts.desktop.ProviderDown`: vCenter unreachable,
credentials refused, a template or image missing, the Docker engine away).

Closed, no slot leases an episode: the job that met the fault was given back uncounted, and the
queue keeps the rest for workers that can run them (or for this one, later). Meanwhile the
gate probes the provider (:meth:`~worker.providers.base.Provider.probe`, in a thread) with
backoff, ``probe_first_s`` doubling up to ``probe_max_s``, and opens by itself when a probe
passes. The worker starts closed and opens after its first probe, so a worker whose provider
is broken from the start leases nothing. Its :attr:`state` goes to the master with every
heartbeat (the dashboard shows it); a change of state beats at once (``on_change``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from coda.contracts.desktop import ProviderDown, ProviderState
from coda.logging import get_logger

log = get_logger("worker.gate")


async def either(event: asyncio.Event, stopping: asyncio.Event) -> bool:
    """Wait until ``event`` is set (True) or ``stopping`` is (False)."""
    if event.is_set() or stopping.is_set():
        return event.is_set() and not stopping.is_set()
    waits = {asyncio.create_task(event.wait()), asyncio.create_task(stopping.wait())}
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return event.is_set() and not stopping.is_set()


def backoff(first_s: float, max_s: float, failures: int) -> float:
    """The pause before the next probe after ``failures`` failed ones in a row (pure)."""
    return float(min(max_s, first_s * 2.0 ** max(0, min(failures - 1, 30))))


class ProviderGate:
    """``await gate.wait_open()`` before a desktop slot leases; ``gate.down(exc)`` when a job
    met a :class:`ProviderDown`; ``await gate.run(stopping)`` probes while closed."""

    def __init__(self, probe: Callable[[], Awaitable[None]], *, probe_first_s: float,
                 probe_max_s: float, on_change: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.probe = probe
        self.probe_first_s = probe_first_s
        self.probe_max_s = probe_max_s
        self.on_change = on_change
        self.clock = clock
        self.state = ProviderState(ok=False, detail="not probed yet")
        self.opened = asyncio.Event()
        self.closed = asyncio.Event()
        self.closed.set()  # the first probe opens it
        self.failures = 0  # probes failed in a row
        self.flaps = 0  # jobs given back since a job last ran past its provider
        self.down_since: float | None = None
        self.downtimes: list[float] = []  # seconds from each fault to the probe that passed

    @property
    def is_open(self) -> bool:
        return self.opened.is_set()

    async def wait_open(self, stopping: asyncio.Event) -> bool:
        """Wait until the gate opens (True) or the worker stops (False)."""
        return await either(self.opened, stopping)

    def down(self, exc: ProviderDown, *, given_back: bool = False) -> None:
        """The provider failed (a probe, or a job's desktop): close, and say why."""
        first = self.opened.is_set() or self.down_since is None
        if first:
            self.down_since = self.clock()
            self.failures = 0
        self.opened.clear()
        self.closed.set()
        self.failures += 1
        self.flaps += int(given_back)
        self.state = ProviderState(
            ok=False, fault=exc.fault, detail=exc.detail[:2000],
            since=self.state.since if not first and self.state.since else datetime.now(UTC),
            given_back=(0 if first else self.state.given_back) + int(given_back),
            next_probe_s=round(self._pause(), 3))
        if first:
            log.warning("worker.provider_down", fault=exc.fault.value, reason=exc.reason.value,
                        detail=exc.detail[:500], given_back=given_back,
                        action="leasing no episode; probing the provider with backoff")
        self.on_change()

    def up(self) -> None:
        """A probe passed: open."""
        if self.down_since is not None and self.state.fault is not None:
            took = self.clock() - self.down_since
            self.downtimes.append(took)
            log.info("worker.provider_ready", fault=self.state.fault.value,
                     down_s=round(took, 3), given_back=self.state.given_back,
                     probes=self.failures)
        else:
            log.info("worker.provider_ready")
        self.down_since = None
        self.failures = 0
        self.state = ProviderState(ok=True)
        self.closed.clear()
        self.opened.set()
        self.on_change()

    def confirmed(self) -> None:
        """A job ran past its provider (its desktop was made, whatever became of the job):
        the provider's backoff starts again from the first pause."""
        self.flaps = 0

    def _pause(self) -> float:
        """Before the next probe: the backoff of the probes failed in a row and of the jobs
        given back since one last ran past the provider (a provider whose probe passes while
        its desktops still fail is not leased from in a tight loop)."""
        return backoff(self.probe_first_s, self.probe_max_s, self.failures + self.flaps)

    async def run(self, stopping: asyncio.Event) -> None:
        """While the worker runs: whenever the gate is closed, probe until a probe passes
        (the first at once; after a fault, a pause first)."""
        while await either(self.closed, stopping):
            if self.failures:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self._pause())
                if stopping.is_set():
                    return
            try:
                await self.probe()
            except ProviderDown as exc:
                self.down(exc)
                continue
            self.up()
