"""Load shedding decides what is never refused by a mark on the route (:func:`keeps_work`),
not by how its URL ends."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from master.app import create_app
from master.settings import MasterSettings
from master.shedding import InFlight, LoadShedding, keeps_work, kept


async def test_a_full_process_serves_the_marked_routes_only() -> None:
    app = FastAPI()

    @app.post("/v1/work/{job_id}/done")
    @keeps_work
    async def done(job_id: str) -> dict[str, str]:
        return {"kept": job_id}

    @app.post("/v1/other/heartbeat")  # its URL says heartbeat, but no mark: refused
    async def other() -> dict[str, str]:
        return {}

    full = InFlight(1)
    full.count = 1  # every turn taken
    shed = LoadShedding(app, in_flight=full, queue_wait_s=0, retry_after_s=3,
                        keeping=kept(app.routes))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=shed),
                                 base_url="http://master") as http:
        r = await http.post("/v1/work/7/done")
        assert r.status_code == 200 and r.json() == {"kept": "7"}
        r = await http.post("/v1/other/heartbeat")
        assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert full.count == 1  # the kept request gave its turn back


def test_the_master_marks_what_keeps_work_done() -> None:
    app = create_app(MasterSettings(dev=True, shed_max_in_flight=8), migrate=False)
    [shedding] = [m for m in app.user_middleware if m.cls is LoadShedding]
    assert sorted(f"{sorted(r.methods or [])[0]} {r.path}"
                  for r in shedding.kwargs["keeping"]) == [
        "POST /v1/jobs/heartbeat", "POST /v1/jobs/{job_id}/complete",
        "POST /v1/jobs/{job_id}/fail", "POST /v1/jobs/{job_id}/heartbeat",
        "POST /v1/workers/{worker_id}/heartbeat"]
