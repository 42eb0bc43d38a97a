"""``coda up`` supervises what it starts, as compose's ``restart: unless-stopped`` does on a
server: a child that dies (a vLLM server, a model service, the worker, the trainer, the
embedded PostgreSQL or Redis) is started again after a backoff; one that keeps dying
(:attr:`RestartPolicy.max_restarts` restarts within :attr:`RestartPolicy.window_s`) stops the
whole stack with the tail of its log (:class:`GaveUp`).

:meth:`RestartPolicy.decide` is the policy, a pure function of the times of a child's earlier
restarts; :class:`Supervisor` applies it to :class:`Child` objects (what is alive, how to start
it again, where its log is), one :meth:`Supervisor.check` at a time, and says what it did
(:meth:`Supervisor.report`, shown by the live view and logged)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coda.contracts.master_api import SupervisedChild
from coda.logging import get_logger
from coda.procs import log_tail

log = get_logger("coda_app.supervise")


@dataclass(frozen=True)
class RestartPolicy:
    """Backoff ``backoff_s * 2**n`` (at most ``backoff_max_s``) before the restart that
    follows ``n`` restarts within the window; give up when ``max_restarts`` restarts happened
    within the last ``window_s`` seconds."""

    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_restarts: int = 5
    window_s: float = 300.0

    def decide(self, restarts: Sequence[float], now: float) -> float | None:
        """Seconds to wait before starting again a child that died at ``now`` (monotonic),
        given the times of its earlier restarts; None: it keeps dying, give up."""
        recent = sum(1 for t in restarts if now - t < self.window_s)
        if recent >= self.max_restarts:
            return None
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** recent))


class GaveUp(RuntimeError):
    """A child kept dying: the stack stops. ``tail`` is the end of its log."""

    def __init__(self, name: str, restarts: int, window_s: float, log_path: Path | None,
                 tail: str) -> None:
        super().__init__(f"{name} died {restarts + 1} times within {window_s:.0f} s: giving "
                         f"up (log {log_path})")
        self.name = name
        self.log_path = log_path
        self.tail = tail


@dataclass
class Child:
    """One supervised process: ``alive()``, ``restart()`` (start it again; may block until
    it is ready), its log."""

    name: str
    alive: Callable[[], bool]
    restart: Callable[[], None]
    log_path: Path | None = None
    restarts: list[float] = field(default_factory=list)
    """Monotonic times of its restarts."""
    restart_at: float | None = None
    """When it is due to start again (it is down and waiting out its backoff)."""


class Supervisor:
    """Restarts dead children by :class:`RestartPolicy`; :meth:`check` once in a while."""

    def __init__(self, children: Sequence[Child], policy: RestartPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.children = list(children)
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.closed = False

    def close(self) -> None:
        """Stopping on purpose: restart nothing more."""
        self.closed = True

    def check(self) -> None:
        """Notice the children that died, restart those whose backoff is over; :class:`GaveUp`
        when one keeps dying."""
        for child in self.children:
            if self.closed:
                return
            now = self.clock()
            if child.restart_at is None:
                if child.alive():
                    continue
                delay = self.policy.decide(child.restarts, now)
                if delay is None:
                    tail = log_tail(child.log_path, 3000) if child.log_path else ""
                    log.error("stack.gave_up", name=child.name, restarts=len(child.restarts),
                              window_s=self.policy.window_s, log=str(child.log_path),
                              log_tail=tail[-1500:])
                    raise GaveUp(child.name, len(child.restarts), self.policy.window_s,
                                 child.log_path, tail)
                child.restart_at = now + delay
                log.warning("stack.child_died", name=child.name, restart_in_s=delay,
                            restarts=len(child.restarts), log=str(child.log_path))
            elif now >= child.restart_at:
                child.restarts.append(now)
                child.restart_at = None
                try:
                    child.restart()
                except (RuntimeError, OSError) as exc:  # it died again: the next check sees it
                    log.warning("stack.restart_failed", name=child.name, error=str(exc)[:500])
                    continue
                log.warning("stack.child_restarted", name=child.name,
                            restarts=len(child.restarts))

    def report(self) -> list[str]:
        """A line per child that died: ``planner: restarted 2x``, or ``planner: down,
        restart 3 in 4 s`` while it waits out its backoff."""
        now = self.clock()
        out = []
        for child in self.children:
            if child.restart_at is not None:
                out.append(f"{child.name}: down, restart {len(child.restarts) + 1} in "
                           f"{max(0.0, child.restart_at - now):.0f} s")
            elif child.restarts:
                out.append(f"{child.name}: restarted {len(child.restarts)}x")
        return out

    def status(self) -> list[SupervisedChild]:
        """Each child, whether it runs and its restarts (the master's status shows them)."""
        return [SupervisedChild(name=c.name, running=c.restart_at is None and c.alive(),
                                restarts=len(c.restarts)) for c in list(self.children)]
