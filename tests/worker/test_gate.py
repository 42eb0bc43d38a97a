"""The desktop slots' gate on its own: the backoff between probes, and the states a worker
reports while its provider is down and after (the worker process under real faults:
test_infra_faults.py, test_vsphere_fault_episodes.py, test_docker_faults.py)."""

from __future__ import annotations

import asyncio

import pytest

from coda.contracts.desktop import BrokenReason, ProviderDown, ProviderFault
from tests.fixtures.waiting import wait_for_async
from worker.gate import ProviderGate, backoff


@pytest.mark.parametrize(("failures", "pause"), [
    (0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (60, 30.0)])
def test_the_pause_doubles_up_to_its_bound(failures: int, pause: float) -> None:
    assert backoff(1.0, 30.0, failures) == pause


def _down(detail: str = "vSphere vc:443: refused") -> ProviderDown:
    return ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.NOT_ANSWERING, detail)


async def test_the_gate_opens_after_a_probe_passes_and_says_why_it_was_closed() -> None:
    outcomes: list[ProviderDown | None] = [_down(), _down(), None]
    changes: list[str] = []

    async def probe() -> None:
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome

    gate = ProviderGate(probe, probe_first_s=0.01, probe_max_s=0.02,
                        on_change=lambda: changes.append("change"))
    assert not gate.is_open and gate.state.fault is None  # closed until the first probe
    stopping = asyncio.Event()
    task = asyncio.create_task(gate.run(stopping))
    try:
        async def opened() -> bool:
            return gate.is_open

        await wait_for_async(opened, "the gate open", 10, interval=0.01)
        assert gate.state.ok and gate.failures == 0 and len(gate.downtimes) == 1
        assert len(changes) == 3  # down, down again, up: each beat at once

        gate.down(_down("vSphere vc:443: login of 'coda' refused"), given_back=True)
        assert not gate.is_open and gate.state.given_back == 1 and gate.flaps == 1
        assert gate.state.detail.endswith("refused") and gate.state.since is not None
        await wait_for_async(opened, "open again", 10, interval=0.01)
        gate.confirmed()
        assert gate.flaps == 0
    finally:
        stopping.set()
        await asyncio.gather(task, return_exceptions=True)
