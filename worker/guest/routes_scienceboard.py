"""The routes ScienceBoard added to OSWorld's server (its ``vm_config/server.py``), so its task
checkers and application managers work against this agent too: ``/read``, ``/write``,
``/append``, ``/opt``, ``/chimerax/run``, ``/lean/check`` and ``/tex/check``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from coda.contracts.desktop import CheckReply, ChimeraxRequest, OptRequest, WriteRequest
from worker.guest import commands
from worker.guest.responses import TEXT_OK, guest_errors
from worker.guest.state import StateDep

router = APIRouter(tags=["scienceboard"])


class LeanBody(BaseModel):
    header: str = Field(min_length=1)


class TexBody(BaseModel):
    path: str = Field(default="/home/user", min_length=1, description="directory to build in")
    file: str = Field(default="main", min_length=1, description="name without .tex")
    bibtex: bool = False


@router.get("/read", response_model=None, responses={**TEXT_OK, **guest_errors(404)})
def read(path: Annotated[str, Query(min_length=1)]) -> Any:
    p = Path(path)
    if not p.is_file():
        return JSONResponse({"error": f"no such file: {path}"}, status_code=404)
    return PlainTextResponse(p.read_text(encoding="utf-8", errors="replace"))


def _write(body: WriteRequest, mode: str) -> Any:
    p = Path(body.path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open(mode, encoding="utf-8") as out:
            out.write(body.content)
    except OSError as exc:
        return JSONResponse({"error": f"path: cannot write {p}: {exc.strerror}"},
                            status_code=400)
    return PlainTextResponse("OK")


@router.post("/write", response_model=None, responses={**TEXT_OK, **guest_errors(400)})
def write(body: WriteRequest) -> Any:
    return _write(body, "w")


@router.post("/append", response_model=None, responses={**TEXT_OK, **guest_errors(400)})
def append(body: WriteRequest) -> Any:
    return _write(body, "a")


@router.post("/opt", response_model=None, responses=TEXT_OK)
def opt(body: OptRequest, state: StateDep) -> Response:
    """Depth limit of the accessibility tree."""
    state.a11y_depth = body.depth
    return PlainTextResponse("OK")


@router.post("/chimerax/run", responses=guest_errors(502))
def chimerax_run(body: ChimeraxRequest) -> Any:
    """Forward a command to ChimeraX's REST remote control on this desktop."""
    try:
        resp = httpx.get(f"http://localhost:{body.port}/run", params={"command": body.command},
                         timeout=240)
        return resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return JSONResponse({"error": f"ChimeraX remote control on port {body.port}: {exc}",
                             "log messages": {"note": []}}, status_code=502)


@router.post("/lean/check", response_model=CheckReply, responses=guest_errors(503))
def lean_check(body: LeanBody, state: StateDep) -> Any:
    """Does the project's Basic.lean contain ``header`` and build without ``sorry``?"""
    project = state.settings.lean_project
    basic = project / "Sci" / "Basic.lean"
    if not state.settings.lake.exists():
        return JSONResponse({"error": f"Lean's lake not found at {state.settings.lake}"},
                            status_code=503)
    if not basic.is_file() or body.header not in basic.read_text(encoding="utf-8").split("\n"):
        return CheckReply(passed=False)
    try:
        done = commands.run([str(state.settings.lake), "build"], shell=False, env=state.env,
                            timeout=state.settings.command_timeout_s, cwd=str(project))
    except (commands.CommandTimeout, OSError) as exc:
        return CheckReply(passed=False, detail=str(exc))
    return CheckReply(passed=done.returncode == 0
                      and "declaration uses 'sorry'" not in done.output)


@router.post("/tex/check", response_model=CheckReply, responses=guest_errors(503))
def tex_check(body: TexBody, state: StateDep) -> Any:
    """Compile like ScienceBoard: pdflatex, and with ``bibtex`` also bibtex + pdflatex twice."""
    missing = [t for t in ("pdflatex", "bibtex") if shutil.which(t, path=state.env["PATH"]) is None]
    if missing:
        return JSONResponse({"error": f"not installed: {', '.join(missing)}"}, status_code=503)
    steps = [["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{body.file}.tex"]]
    if body.bibtex:
        steps += [["bibtex", body.file], steps[0], steps[0]]
    for argv in steps:
        try:
            done = commands.run(argv, shell=False, env=state.env, cwd=body.path,
                                timeout=state.settings.tex_timeout_s)
        except (commands.CommandTimeout, OSError) as exc:
            return CheckReply(passed=False, detail=str(exc))
        if done.returncode != 0:
            tail = "\n".join(done.output.strip().splitlines()[-5:])
            return CheckReply(passed=False, detail=f"{argv[0]} exited {done.returncode}: {tail}")
    return CheckReply(passed=True)
