"""``coda up``'s supervision: the backoff / give-up policy (pure) and the supervisor applying
it to children, on a clock the test moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda_app.supervise import Child, GaveUp, RestartPolicy, Supervisor
from coda_app.up import wants_demo


def test_backoff_doubles_up_to_its_cap_and_gives_up_past_the_limit() -> None:
    p = RestartPolicy(backoff_s=1, backoff_max_s=8, max_restarts=5, window_s=100)
    assert p.decide([], now=1000) == 1
    assert p.decide([999], now=1000) == 2
    assert p.decide([997, 999], now=1000) == 4
    assert p.decide([996, 997, 999], now=1000) == 8
    assert p.decide([995, 996, 997, 999], now=1000) == 8  # capped
    assert p.decide([990, 995, 996, 997, 999], now=1000) is None  # 5 within the window
    # restarts older than the window are forgiven: a child that ran a while starts afresh
    assert p.decide([100, 200, 300, 400, 500], now=1000) == 1
    assert p.decide([850, 950, 960, 970, 980], now=1000) == 8  # 4 recent: 16, capped at 8


class FakeProcess:
    def __init__(self) -> None:
        self.up = True
        self.starts = 0

    def alive(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.starts += 1
        self.up = True


def test_supervisor_restarts_after_the_backoff_and_gives_up_with_the_log_tail(
        tmp_path: Path) -> None:
    now = [0.0]
    log = tmp_path / "planner.log"
    log.write_text("loading...\nTraceback: out of memory\n")
    planner, worker = FakeProcess(), FakeProcess()
    sup = Supervisor([Child("planner", planner.alive, planner.restart, log),
                      Child("worker", worker.alive, worker.restart)],
                     RestartPolicy(backoff_s=1, backoff_max_s=4, max_restarts=3, window_s=60),
                     clock=lambda: now[0])
    sup.check()
    assert sup.report() == []
    planner.up = False
    sup.check()  # noticed: down, waiting out 1 s
    assert planner.starts == 0 and sup.report() == ["planner: down, restart 1 in 1 s"]
    assert [c.running for c in sup.status()] == [False, True]
    now[0] = 1.0
    sup.check()
    assert planner.starts == 1 and sup.report() == ["planner: restarted 1x"]
    assert [(c.name, c.running, c.restarts) for c in sup.status()] == [
        ("planner", True, 1), ("worker", True, 0)]
    for expected_delay in (2.0, 4.0):  # it keeps dying: the backoff doubles
        planner.up = False
        sup.check()
        now[0] += expected_delay - 0.5
        sup.check()
        assert not planner.up  # not yet
        now[0] += 0.5
        sup.check()
        assert planner.up
    assert planner.starts == 3 and worker.starts == 0  # the other child is untouched
    planner.up = False
    with pytest.raises(GaveUp) as err:  # the 4th death within 60 s: the stack stops
        sup.check()
    assert err.value.name == "planner" and "out of memory" in err.value.tail
    assert "died 4 times" in str(err.value)
    sup.close()


def test_a_closed_supervisor_restarts_nothing() -> None:
    proc = FakeProcess()
    sup = Supervisor([Child("trainer", proc.alive, proc.restart)],
                     RestartPolicy(backoff_s=0), clock=lambda: 0.0)
    sup.close()
    proc.up = False
    sup.check()
    assert proc.starts == 0


@pytest.mark.parametrize(("demo", "master_only", "wanted"), [
    (None, False, True), (None, True, False), (True, True, True), (False, False, False)])
def test_master_only_queues_no_demo_unless_asked(demo: bool | None, master_only: bool,
                                                 wanted: bool) -> None:
    assert wants_demo(demo, master_only=master_only) is wanted
