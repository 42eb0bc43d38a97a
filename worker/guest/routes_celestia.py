"""Celestia's state dump, read inside the desktop: ``POST /coda/celestia`` forwards one request
to the dump server of ScienceBoard's Celestia fork (``GET /version``, ``POST /dump`` with the
task's ``query`` entities), which the project's build binds to 127.0.0.1 only
(``deploy/celestia/patches``): this route, behind the agent's token, is its only way out of
the desktop. The request is a contract (``CelestiaRequest`` in :mod:`coda.contracts.desktop`),
sent by the worker's ``GuestClient.celestia``.

The dump (the fork's ``CelestiaCore::getStatus``) is ``{"time": {"value", "scale", "pause"},
"entity": {name: {"position", "object", "distance", "radius", "visible", "hidden", "mark"}},
"config": {"render": {...}, "orbit": {...}, "label": {...}, "resolution", "starStyle",
"autoMagnitude"}}``; a body or deep-sky object Celestia does not know makes it answer 400,
while a star it does not know kills it (the fork's release build aborts), so a star is relayed
only when Celestia's own catalogues name it (:mod:`.celestia_stars`).

Answers: 200 with ``{"result": ...}`` (the dump's JSON, or the version's text), 400 naming
``query[i].name`` for a star Celestia's catalogues do not name, 502 when Celestia answered
with an error or not JSON, 503 when nothing listens on the port, 504 when it did not answer in
time. Where the serving process's catalogues cannot be found (no ``/proc``, a server without
``celestia.cfg`` in its working directory), a star is relayed unchecked."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from coda.contracts.desktop import CelestiaOp, CelestiaRequest, SelectionType
from worker.guest import celestia_stars
from worker.guest.responses import guest_errors

router = APIRouter(prefix="/coda", tags=["coda"])

MAX_REPLY_BYTES = 1 << 20  # the patched server's buffer


def unknown_star(body: CelestiaRequest) -> str | None:
    """Why the query must not reach Celestia: a star its catalogues do not name (None: it may)."""
    stars = [(i, e.name) for i, e in enumerate(body.query) if e.type is SelectionType.STAR]
    catalogue = celestia_stars.catalogue_for(body.port) if stars else None
    for i, name in stars:
        if catalogue is not None and not catalogue.knows(name):
            return (f"query[{i}].name: {name!r} is not a star this Celestia's catalogues name "
                    f"(a name, HIP/HD/SAO/TYC or # number of a star it has); the fork aborts "
                    f"on a star it cannot find, so the query is not sent")
    return None


@router.post("/celestia", responses=guest_errors(400, 502, 503, 504))
def celestia(body: CelestiaRequest) -> Any:
    """Read Celestia's state dump (``dump``) or its dump server's version (``version``)."""
    url = f"http://127.0.0.1:{body.port}"
    refused = unknown_star(body) if body.op is CelestiaOp.DUMP else None
    if refused is not None:
        return JSONResponse({"error": refused}, status_code=400)
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
