"""Whose a desktop is, decided without an engine or a vCenter (worker/providers/liveness.py):
the verdict on one owner mark, the watch that tells a live process of the same worker name
from a dead one (on a fake clock), the refusal's message, the renewing thread, and the
settings that bound it. The same decisions on real VMs and containers, between real worker
processes: tests/worker/test_two_workers.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import ValidationError

from tests.fixtures.waiting import wait_for
from worker.providers.base import ProviderConfigError
from worker.providers.docker import DockerProvider
from worker.providers.factory import make_provider
from worker.providers.liveness import (
    Mark,
    Renewer,
    Verdict,
    check_alive,
    conflict_message,
    sort_out,
    verdict,
)
from worker.providers.vsphere import VsphereProvider
from worker.settings import WorkerSettings

ME = {"owner": "host-1", "instance": "aaaa"}


def _verdict(mark: Mark, *, now: float = 1000.0, first: float | None = None,
             watched: float = 0.0, ttl: float = 120.0) -> Verdict:
    return verdict(mark, **ME, now=now, first_alive=mark.alive if first is None else first,
                   watched_s=watched, ttl_s=ttl)


def test_another_workers_desktop_or_an_unmarked_one_is_never_this_workers() -> None:
    assert _verdict(Mark(owner="host-2", instance="bbbb", alive=0.0)) is Verdict.FOREIGN
    assert _verdict(Mark(owner=None)) is Verdict.FOREIGN
    assert _verdict(Mark(owner="host-1", instance="aaaa", alive=0.0)) is Verdict.MINE


def test_a_desktop_of_an_older_worker_of_this_name_is_stale() -> None:
    """An older CODA marked only the worker's name: as before, that worker's to remove."""
    assert _verdict(Mark(owner="host-1")) is Verdict.STALE


def test_another_process_of_this_name_is_watched_until_renewed_or_expired() -> None:
    fresh = Mark(owner="host-1", instance="bbbb", alive=990.0)
    assert _verdict(fresh) is Verdict.WATCH  # 10 s old, TTL 120 s: not decided yet
    assert _verdict(fresh, first=980.0) is Verdict.ALIVE  # renewed while watched
    assert _verdict(fresh, now=1110.0) is Verdict.STALE  # a TTL old on the marks' clock
    # the reader's clock far behind: the mark looks fresh, but it was not renewed for a TTL
    assert _verdict(fresh, now=0.0, watched=120.0) is Verdict.STALE
    assert _verdict(fresh, now=0.0, watched=119.0) is Verdict.WATCH
    # the writer said how long its mark holds: that counts, not the reader's TTL
    short = Mark(owner="host-1", instance="bbbb", alive=990.0, ttl=5.0)
    assert _verdict(short) is Verdict.STALE
    long = Mark(owner="host-1", instance="bbbb", alive=800.0, ttl=600.0)
    assert _verdict(long) is Verdict.WATCH


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def _sort(marks: Any, fake: FakeTime, ttl: float = 10.0) -> dict[str, tuple[Verdict, Mark]]:
    return sort_out(marks, **ME, ttl_s=ttl, now=fake.now, clock=fake.now, sleep=fake.sleep)


def test_the_watch_ends_at_the_first_renewal_of_a_live_process() -> None:
    fake = FakeTime()
    looks = []

    def read() -> dict[str, Mark]:
        looks.append(fake.t)
        alive = 1000.0 if len(looks) < 3 else fake.t  # the owner renews between looks 2 and 3
        return {"p-0": Mark(owner="host-1", instance="bbbb", alive=alive, state="running"),
                "p-1": Mark(owner="host-1", instance="cccc", alive=995.0)}

    out = _sort(read, fake)
    assert out["p-0"][0] is Verdict.ALIVE and len(looks) == 3
    assert out["p-1"][0] is Verdict.WATCH  # not decided, and it does not matter: refused


def test_a_mark_nobody_renews_is_stale_after_its_ttl_and_a_gone_desktop_left_out() -> None:
    fake = FakeTime()
    looks: list[float] = []

    def read() -> dict[str, Mark]:
        looks.append(fake.t)
        marks = {"p-0": Mark(owner="host-1", instance="bbbb", alive=999.0),
                 "p-1": Mark(owner="host-1")}
        if len(looks) < 2:  # destroyed by its owner after the first look
            marks["p-2"] = Mark(owner="host-1", instance="cccc", alive=999.0)
        return marks

    out = _sort(read, fake)
    assert {n: v for n, (v, _) in out.items()} == {"p-0": Verdict.STALE, "p-1": Verdict.STALE}
    assert 9.0 <= fake.t - 1000.0 <= 10.0 + max(fake.slept)  # a TTL of its own age, no more


def test_another_workers_desktop_is_refused_without_a_watch() -> None:
    fake = FakeTime()
    out = _sort(lambda: {"p-0": Mark(owner="host-2", instance="x", alive=1000.0),
                         "p-1": Mark(owner="host-1", instance="bbbb", alive=1000.0)}, fake)
    assert out["p-0"][0] is Verdict.FOREIGN and fake.slept == []


def test_the_refusal_names_the_prefix_option_and_the_other_owner_with_its_instance() -> None:
    found = [("p-0", Verdict.ALIVE, Mark(owner="host-1", instance="bbbb", alive=990.0,
                                         state="poweredOn")),
             ("p-1", Verdict.FOREIGN, Mark(owner="host-2", state="poweredOn")),
             ("p-2", Verdict.FOREIGN, Mark(state="poweredOff"))]
    text = conflict_message(option="clone_prefix", prefix="p", kind="VMs", **ME, found=found,
                            now=1000.0, fix="do this")
    assert text.startswith("clone_prefix 'p' is in use by worker 'host-2' and another live "
                           "process of worker 'host-1' (instance bbbb) and VMs without an "
                           "owner mark"), text
    assert "p-0 (host-1, instance bbbb, alive mark renewed 10 s ago, poweredOn)" in text
    assert "p-1 (host-2, poweredOn)" in text and "p-2 (no owner mark, poweredOff)" in text
    assert text.endswith("this worker ('host-1', instance aaaa) never touches VMs that another "
                         "worker owns or that a live worker process uses: do this")


def test_the_renewer_renews_until_stopped_and_outlives_a_failed_round() -> None:
    rounds: list[int] = []
    failed = threading.Event()

    def renew() -> None:
        rounds.append(1)
        if len(rounds) == 2:
            failed.set()
            raise OSError("the engine went away")

    r = Renewer("test", 0.01, renew)
    r.start()
    r.start()  # once
    wait_for(lambda: len(rounds) >= 4, "rounds after a failed one", 30)
    assert failed.is_set()
    r.stop()
    done = len(rounds)
    r.stop()
    assert len(rounds) == done  # no round after stop


def test_liveness_settings_are_bounded_and_passed_to_the_providers() -> None:
    with pytest.raises(ProviderConfigError, match=r"alive_ttl_s: 5 s is shorter than two"):
        check_alive(3.0, 5.0)
    with pytest.raises(ProviderConfigError, match=r"alive_interval_s"):
        check_alive(0.0, 5.0)
    with pytest.raises(ValidationError, match="alive_ttl_s"):
        WorkerSettings(alive_interval_s=30, alive_ttl_s=40)
    s = WorkerSettings()
    assert (s.alive_interval_s, s.alive_ttl_s) == (30.0, 120.0)
    p = make_provider("docker", {}, owner="w", instance="abc", alive=(2.0, 9.0))
    assert isinstance(p, DockerProvider)
    assert (p.settings.instance, p.settings.alive_interval_s, p.settings.alive_ttl_s) == (
        "abc", 2.0, 9.0)
    v = make_provider("vsphere", {"host": "vc", "user": "u", "password": "p", "template": "t",
                                  "alive_ttl_s": 60}, owner="w", instance="abc", alive=(2.0, 9.0))
    assert isinstance(v, VsphereProvider) and v.settings.alive_ttl_s == 60  # the option wins
    one, other = make_provider("docker", {}), make_provider("docker", {})
    assert isinstance(one, DockerProvider) and isinstance(other, DockerProvider)
    assert one.settings.instance != other.settings.instance  # one per process (provider)
    with pytest.raises(ProviderConfigError, match="alive_ttl_s"):
        make_provider("docker", {"alive_interval_s": 10, "alive_ttl_s": 15})
