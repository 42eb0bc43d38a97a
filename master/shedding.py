"""Load shedding: past its capacity a master process answers 503 with ``Retry-After`` for
what it cannot serve in time, instead of queueing requests until their clients time out.

A pure ASGI middleware, the outermost of the master's (a refusal costs no routing, no auth,
no body read). At most ``shed_max_in_flight`` API requests (``/v1/...``) are served at once;
one past it waits up to ``shed_queue_wait_s`` for a turn (first come, first served), then is
refused: 503, ``Retry-After: shed_retry_after_s`` (twice the loop's lag when that is longer).
While the event loop runs later than ``shed_max_loop_lag_s`` (:class:`LoopLag`: requests
already wait that long before a handler sees them) no request waits for a turn and only a
quarter of the turns are given. Heartbeats, completions and failures (routes marked
:func:`keeps_work`: refusing them would throw work away; there are few of them, one
heartbeat call per worker and period) are never refused. Health, readiness, metrics and the
status pages are never refused. A request counts from its first byte to its answer (its
upload included); a lease request long-polling for work gives its turn up while it waits
(:func:`idle`), so idle workers do not fill the master.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from coda.logging import get_logger

log = get_logger("coda.master.shedding")

SCOPE_KEY = "coda.in_flight"
"""Set in the ASGI scope of a request holding a turn: the :class:`InFlight` it holds."""


KEEPS_WORK = "coda_keeps_work"
"""The mark :func:`keeps_work` sets on a route's endpoint."""

F = TypeVar("F", bound=Callable[..., Any])


def keeps_work(endpoint: F) -> F:
    """Mark a route that keeps work already done (a lease's heartbeat, a job's completion or
    failure): never refused (it counts as in flight). Under the route's decorator."""
    setattr(endpoint, KEEPS_WORK, True)
    return endpoint


def kept(routes: Iterable[BaseRoute]) -> list[Route]:
    """The routes among ``routes`` whose endpoint :func:`keeps_work` marked."""
    return [r for r in routes
            if isinstance(r, Route) and getattr(r.endpoint, KEEPS_WORK, False)]


class InFlight:
    """How many requests a process serves now, at most ``limit``, with a first-come,
    first-served line of requests waiting for a turn."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.waiting = 0
        self._line: deque[asyncio.Future[bool]] = deque()

    async def take(self, budget_s: float, *, priority: bool = False) -> bool:
        """A turn, waiting at most ``budget_s`` for one; False when none came in time. A
        ``priority`` request always gets one at once (it counts, and is never refused)."""
        if priority:
            self.count += 1
            return True
        if self.count < self.limit and not self.waiting:
            self.count += 1
            return True
        if budget_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self._line.append(turn)
        self.waiting += 1

        def too_late() -> None:
            if not turn.done():
                turn.set_result(False)

        timer = loop.call_later(budget_s, too_late)
        try:
            return await turn  # True: handed a turn by give()
        except asyncio.CancelledError:  # the client went away while waiting
            if turn.done() and not turn.cancelled() and turn.result():
                self.give()  # a turn was handed over just before: pass it on
            raise
        finally:
            timer.cancel()
            self.waiting -= 1

    def give(self) -> None:
        """End a turn: handed to the first request still waiting, else freed."""
        while self._line:
            turn = self._line.popleft()
            if not turn.done():
                turn.set_result(True)
                return
        self.count -= 1

    def force(self) -> None:
        """Take a turn back without waiting (a long-poll that found work)."""
        self.count += 1


class LoopLag:
    """How late this process's event loop runs what is due, measured every ``tick_s``: a
    request arriving now waits about that long (behind the loop's backlog) before any handler
    sees it, a wait the in-flight count cannot see. A late tick counts at once and fades over
    a few ticks."""

    def __init__(self, tick_s: float = 0.02) -> None:
        self.tick_s = tick_s
        self.now = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.tick_s)
            late = max(0.0, loop.time() - start - self.tick_s)
            self.now = max(late, self.now * 0.7)


@contextlib.asynccontextmanager
async def idle(scope: Scope) -> AsyncIterator[None]:
    """Give up this request's turn while it waits for something (a long-poll) and take it
    back after: a waiting request costs the process nothing and must not hold a turn."""
    held: InFlight | None = scope.get(SCOPE_KEY)
    if held is None:
        yield
        return
    held.give()
    try:
        yield
    finally:
        held.force()


class ShedMetrics:
    def __init__(self, registry: CollectorRegistry, in_flight: InFlight) -> None:
        self.shed = Counter("coda_requests_shed_total",
                            "API requests refused with 503 + Retry-After (this process)",
                            registry=registry)
        gauge = Gauge("coda_requests_in_flight", "API requests being served (this process)",
                      registry=registry)
        gauge.set_function(lambda: in_flight.count)
        waiting = Gauge("coda_requests_waiting", "API requests waiting for a turn (this process)",
                        registry=registry)
        waiting.set_function(lambda: in_flight.waiting)


class LoadShedding:
    """The middleware: a turn per API request, or 503 with ``Retry-After``."""

    def __init__(self, app: ASGIApp, *, in_flight: InFlight, queue_wait_s: float,
                 retry_after_s: int, metrics: ShedMetrics | None = None,
                 lag: LoopLag | None = None, max_lag_s: float = 0.0,
                 prefix: str = "/v1/", keeping: Sequence[Route] = ()) -> None:
        self.app = app
        self.keeping = list(keeping)  # the routes :func:`keeps_work` marked
        self.in_flight = in_flight
        self.lag = lag
        self.max_lag_s = max_lag_s
        # while the loop lags, a quarter of the turns are given: a lone request (a test on a
        # busy machine) is still served, a crowd is refused at once
        self.lagging_limit = max(1, in_flight.limit // 4)
        self.queue_wait_s = queue_wait_s
        self.retry_after_s = max(1, retry_after_s)
        self.metrics = metrics
        self.prefix = prefix
        self._shed_since_log = 0
        # refusals encoded once per Retry-After: refusing must cost as little as possible
        self._answers: dict[int, tuple[list[tuple[bytes, bytes]], bytes]] = {}

    def answer(self) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The refusal's headers and body (each encoded once): ``Retry-After`` is the setting,
        or twice the loop's lag when that is longer (a backlog of seconds asks its clients to
        stay away longer), at most 60 s."""
        lag = self.lag.now if self.lag is not None else 0.0
        seconds = min(60, max(self.retry_after_s, math.ceil(2 * lag)))
        if seconds not in self._answers:
            body = json.dumps({"detail": f"master overloaded: retry after {seconds} s"}).encode()
            self._answers[seconds] = ([(b"content-type", b"application/json"),
                                       (b"content-length", str(len(body)).encode()),
                                       (b"retry-after", str(seconds).encode())], body)
        return self._answers[seconds]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        # what keeps work already done (a lease's heartbeat, an episode's completion) is
        # never refused: refusing it would throw an episode away; new work is refused first
        keeps = self.keeps(scope)
        lagging = (not keeps and self.lag is not None and self.max_lag_s > 0
                   and self.lag.now > self.max_lag_s)
        if (lagging and self.in_flight.count >= self.lagging_limit) or \
                not await self.in_flight.take(0.0 if lagging else self.queue_wait_s,
                                              priority=keeps):
            await self._refuse(scope, receive, send)
            return
        scope[SCOPE_KEY] = self.in_flight
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.give()

    def keeps(self, scope: Scope) -> bool:
        """Whether the request is for a route marked :func:`keeps_work` (its path, whatever
        the method: one a marked route does not take is refused by routing, not here)."""
        return any(r.matches(scope)[0] is not Match.NONE for r in self.keeping)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics is not None:
            self.metrics.shed.inc()
        if self._shed_since_log % 1000 == 0:  # a line per thousand refusals, not per refusal
            log.warning("master.shedding", in_flight=self.in_flight.count,
                        waiting=self.in_flight.waiting, refused_before=self._shed_since_log,
                        path=scope.get("path"))
        self._shed_since_log += 1
        headers, body = self.answer()
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
