"""Celestia's state dump, read inside the desktop: ``POST /coda/celestia`` forwards one request
to the dump server of ScienceBoard's Celestia fork (``GET /version``, ``POST /dump`` with the
task's ``query`` entities), which the project's build binds to 127.0.0.1 only
(``deploy/celestia/patches``): this route, behind the agent's token, is its only way out of
the desktop. The request is a contract (``CelestiaRequest`` in :mod:`coda.contracts.desktop`),
sent by the worker's ``GuestClient.celestia``.

The dump (the fork's ``CelestiaCore::getStatus``) is ``{"time": {"value", "scale", "pause"},
"entity": {name: {"position", "object", "distance", "radius", "visible", "hidden", "mark"}},
"config": {"render": {...}, "orbit": {...}, "label": {...}, "resolution", "starStyle",
"autoMagnitude"}}``; an entity Celestia does not know makes it answer 400.

Answers: 200 with ``{"result": ...}`` (the dump's JSON, or the version's text), 502 when
Celestia answered with an error or not JSON, 503 when nothing listens on the port, 504 when
it did not answer in time."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from coda.contracts.desktop import CelestiaOp, CelestiaRequest
from worker.guest.responses import guest_errors

router = APIRouter(prefix="/coda", tags=["coda"])

MAX_REPLY_BYTES = 1 << 20  # the patched server's buffer


@router.post("/celestia", responses=guest_errors(502, 503, 504))
def celestia(body: CelestiaRequest) -> Any:
    """Read Celestia's state dump (``dump``) or its dump server's version (``version``)."""
    url = f"http://127.0.0.1:{body.port}"
    try:
        if body.op is CelestiaOp.VERSION:
            resp = httpx.get(f"{url}/version", timeout=body.timeout_s)
        else:
            # one write (the fork's server reads a request as it arrives)
            payload = json.dumps([e.model_dump(mode="json") for e in body.query])
            resp = httpx.post(f"{url}/dump", content=payload.encode(), timeout=body.timeout_s,
                              headers={"Content-Type": "application/json"})
    except httpx.TimeoutException:
        return JSONResponse({"error": f"Celestia's dump server on port {body.port} did not "
                                      f"answer within {body.timeout_s:g} s"}, status_code=504)
    except httpx.HTTPError as exc:
        return JSONResponse({"error": f"no Celestia dump server on port {body.port}: {exc}"},
                            status_code=503)
    if resp.status_code != 200:
        return JSONResponse({"error": f"Celestia answered {resp.status_code} "
                                      f"({resp.text[:200]!r}): an entity it does not know?"},
                            status_code=502)
    if body.op is CelestiaOp.VERSION:
        return {"result": resp.text.strip()}
    if len(resp.content) >= MAX_REPLY_BYTES:
        return JSONResponse({"error": "Celestia's dump fills its server's buffer"},
                            status_code=502)
    try:
        return {"result": resp.json()}
    except ValueError as exc:
        return JSONResponse({"error": f"Celestia's dump is not JSON: {exc}"}, status_code=502)
