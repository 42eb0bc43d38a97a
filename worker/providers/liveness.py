"""Whose a desktop is, and whether its owner still lives: the owner marks the docker and vsphere
providers put on their containers and VMs, and the liveness mark a worker renews on them.

A desktop's marks name the worker (its name, ``CODA_WORKER_NAME``) and the worker process
(an instance id made once at its start): two processes given one name, on one host (the same
default name, its host name) or not, are told apart. The owning process renews a liveness mark
on each of its desktops every ``alive_interval_s`` (a thread of the provider; a failed renewal
is logged, never an episode's failure) and says at the desktop's start how long its mark holds
(``alive_ttl_s``). Another process finds the desktop by its name (clean-up at start, a slot's
first start) and decides (:func:`verdict`, :func:`sort_out`):

* another worker's name, or no owner mark: never touched (the worker refuses to go on);
* its own process's: its own;
* the same worker name, another instance, no liveness mark (a desktop of an older CODA worker,
  which marked only the name): stale, as before the instance existed;
* the same worker name, another instance: watched. A mark renewed while watched is a live
  process's (refused, never touched); a mark older than its TTL, or not renewed for a TTL of
  watching, is a dead process's (stale: removed). The age is read on one clock for writer and
  reader where there is one (vSphere's), the watch needs none.

A clash is :class:`~worker.providers.base.ProviderConflict`, naming the prefix option and the
other owner with its instance (:func:`conflict_message`).
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from worker.providers.base import ProviderConfigError, log

ALIVE_INTERVAL_S = 30.0
ALIVE_TTL_S = 120.0


def new_instance() -> str:
    """An id of one worker process (12 hex digits of a random UUID)."""
    return uuid.uuid4().hex[:12]


def check_alive(interval_s: float, ttl_s: float) -> None:
    """ProviderConfigError unless both are positive and the TTL spans two renewals at least."""
    if interval_s <= 0:
        raise ProviderConfigError("provider_options.alive_interval_s: must be positive")
    if ttl_s < 2 * interval_s:
        raise ProviderConfigError(f"provider_options.alive_ttl_s: {ttl_s:g} s is shorter than "
                                  f"two renewals ({interval_s:g} s each)")


def stamp(value: float) -> str:
    """A liveness time as a mark's text (milliseconds: every renewal changes it)."""
    return f"{value:.3f}"


def parse_time(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class Mark:
    """What a desktop says of its owner: the worker's name, its process's instance id, when
    the owner last renewed it and how long it said that holds (None: not marked), and its
    state (power state, container status) for messages."""

    owner: str | None = None
    instance: str | None = None
    alive: float | None = None
    ttl: float | None = None
    state: str = ""


class Verdict(enum.Enum):
    MINE = "mine"  # this process's own
    FOREIGN = "foreign"  # another worker's name, or no owner mark: never touched
    STALE = "stale"  # this worker name's, of a process that is gone: may be removed
    ALIVE = "alive"  # this worker name's, of a live process: never touched
    WATCH = "watch"  # this worker name's, not decided yet


def verdict(mark: Mark, *, owner: str, instance: str, now: float, first_alive: float | None,
            watched_s: float, ttl_s: float) -> Verdict:
    """The decision on one desktop: ``first_alive`` is its liveness mark when the watch began,
    ``watched_s`` how long it has been watched, ``now`` the time on the marks' clock and
    ``ttl_s`` the reader's TTL, for a mark that does not say its own."""
    if mark.owner is None or mark.owner != owner:
        return Verdict.FOREIGN
    if mark.instance == instance:
        return Verdict.MINE
    if mark.instance is None:  # an older CODA worker marked only its name
        return Verdict.STALE
    if mark.alive is not None and first_alive is not None and mark.alive != first_alive:
        return Verdict.ALIVE  # renewed while watched
    limit = mark.ttl if mark.ttl is not None and mark.ttl > 0 else ttl_s
    if watched_s >= limit or (mark.alive is not None and now - mark.alive >= limit):
        return Verdict.STALE
    return Verdict.WATCH


REFUSED = (Verdict.FOREIGN, Verdict.ALIVE)


def sort_out(read: Callable[[], dict[str, Mark]], *, owner: str, instance: str, ttl_s: float,
             now: Callable[[], float], clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> dict[str, tuple[Verdict, Mark]]:
    """The verdicts on the desktops ``read`` returns (by name, read again at every look):
    desktops this worker name's other processes marked are watched until each is decided,
    at most a TTL; the watch ends early on the first one that must be refused. A desktop gone
    meanwhile is left out."""
    started = clock()
    firsts: dict[str, float | None] = {}
    longest = ttl_s
    while True:
        marks = read()
        watched = clock() - started
        at = now()
        out: dict[str, tuple[Verdict, Mark]] = {}
        for name, mark in marks.items():
            first = firsts.setdefault(name, mark.alive)
            out[name] = (verdict(mark, owner=owner, instance=instance, now=at,
                                 first_alive=first, watched_s=watched, ttl_s=ttl_s), mark)
            longest = max(longest, mark.ttl or 0.0)
        waiting = [n for n, (v, _) in out.items() if v is Verdict.WATCH]
        if not waiting or any(v in REFUSED for v, _ in out.values()):
            return out
        log.info("desktops.watching", desktops=waiting, watched_s=round(watched, 1))
        sleep(min(max(longest / 20, 0.2), 5.0))


def conflict_message(*, option: str, prefix: str, kind: str, owner: str, instance: str,
                     found: list[tuple[str, Verdict, Mark]], now: float, fix: str) -> str:
    """Why a worker refuses its prefix: the desktops of it that another worker owns, that
    carry no owner mark, or that a live process of its own name uses, each named with its
    owner (and that process's instance, and how long ago it renewed its mark)."""
    foreign = sorted({m.owner for _, v, m in found if v is Verdict.FOREIGN and m.owner})
    live = sorted({(m.owner or "", m.instance or "") for _, v, m in found if v is Verdict.ALIVE})
    unmarked = any(v is Verdict.FOREIGN and not m.owner for _, v, m in found)
    who = []
    if foreign:
        who.append(f"worker {', '.join(repr(o) for o in foreign)}")
    who += [f"another live process of worker {o!r} (instance {i})" for o, i in live]
    if unmarked:
        who.append(f"{kind} without an owner mark (made by hand or by an older CODA worker)")

    def entry(name: str, v: Verdict, m: Mark) -> str:
        parts = [m.owner or "no owner mark"]
        if v is Verdict.ALIVE:
            parts.append(f"instance {m.instance}")
            if m.alive is not None:
                parts.append(f"alive mark renewed {max(now - m.alive, 0):.0f} s ago")
        return f"{name} ({', '.join(parts + ([m.state] if m.state else []))})"

    listed = ", ".join(entry(*f) for f in found[:10])
    return (f"{option} {prefix!r} is in use by {' and '.join(who)}: {listed}; this worker "
            f"({owner!r}, instance {instance}) never touches {kind} that another worker owns "
            f"or that a live worker process uses: {fix}")


class Renewer:
    """A daemon thread that calls ``renew`` every ``interval_s`` until stopped; an error of
    ``renew`` is logged, and the next round comes anyway."""

    def __init__(self, provider: str, interval_s: float, renew: Callable[[], None]) -> None:
        self.provider = provider
        self.interval_s = interval_s
        self.renew = renew
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._stop,), daemon=True,
                                            name=f"{self.provider}-alive")
            self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - a round's top: logged, the next comes
                log.warning("desktops.alive_failed", provider=self.provider,
                            error=f"{type(exc).__name__}: {str(exc)[:300]}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing (a round under way is waited for at most ``timeout`` seconds)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
