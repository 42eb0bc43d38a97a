"""OSWorld's guest routes, with the request and response shapes their clients expect.

Facts from OSWorld's ``desktop_env/server/main.py`` (as ScienceBoard ships it): JSON bodies for
commands, form fields for ``/file`` and ``/window_size``, multipart for ``/setup/upload``, plain
text answers for the setup routes, ``POST /screen_size``. Bad input gets a 4xx naming the field;
this agent never answers 500 except where OSWorld's clients expect it (a command that failed).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Form, Query, UploadFile
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from coda.contracts.desktop import MEDIA_TYPES, CommandReply, ImageFormat
from coda.logging import get_logger
from worker.guest import a11y, commands
from worker.guest.capture import DisplayUnavailable
from worker.guest.responses import FILE, IMAGES, TEXT_OK, guest_errors
from worker.guest.state import StateDep

router = APIRouter(tags=["osworld"])
log = get_logger("worker.guest")


class CommandBody(BaseModel):
    command: str | list[str] = Field(description="a shell string or an argument list")
    shell: bool = False
    timeout: float | None = Field(default=None, gt=0,
                                  description="seconds (capped by the agent's own bound)")


class PathBody(BaseModel):
    path: str = Field(min_length=1)


class WindowBody(BaseModel):
    window_name: str = Field(min_length=1)
    strict: bool = False
    by_class: bool = False


class DownloadBody(BaseModel):
    url: str = Field(min_length=1)
    path: str = Field(min_length=1)


def _expand(path: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(path)))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "message": message}, status_code=status)


def display_error(exc: DisplayUnavailable) -> JSONResponse:
    """503 with the reason clients map to x_crashed (logged: the display is gone)."""
    log.warning("guest.display_unavailable", error=str(exc))
    return JSONResponse({"status": "error", "reason": "x_unavailable", "message": str(exc)},
                        status_code=503)


@router.get("/screenshot", response_model=None, responses=IMAGES)
def screenshot(
    state: StateDep,
    format: Annotated[ImageFormat, Query(description="png (default), webp or jpeg")] = "png",
    width: Annotated[int | None, Query(ge=16, le=8192)] = None,
    height: Annotated[int | None, Query(ge=16, le=8192)] = None,
    quality: Annotated[int | None, Query(ge=1, le=100)] = None,
) -> Response:
    """The full screen with the cursor drawn in; optional format and scaled size."""
    try:
        shot = state.capture.shot(fmt=format, width=width, height=height, quality=quality)
    except DisplayUnavailable as exc:
        return display_error(exc)
    return Response(shot.data, media_type=MEDIA_TYPES[format], headers={
        "X-Screen-Width": str(shot.screen_width), "X-Screen-Height": str(shot.screen_height),
        "X-Elapsed-Ms": f"{shot.elapsed_ms:.1f}"})


@router.post("/execute", response_model=CommandReply, responses=guest_errors(500))
@router.post("/setup/execute", response_model=CommandReply, responses=guest_errors(500))
def execute(body: CommandBody, state: StateDep) -> Any:
    """Run a command to completion: ``{status, output, error, returncode}``."""
    limit = state.settings.command_timeout_s
    timeout = min(body.timeout or limit, limit)
    cmd = commands.normalize(body.command, body.shell)
    try:
        done = commands.run(cmd, shell=body.shell, timeout=timeout, env=state.env,
                            cwd=state.env.get("HOME"))
    except (commands.CommandTimeout, OSError, ValueError) as exc:
        return _error(500, str(exc))
    return CommandReply(output=done.output, error=done.error, returncode=done.returncode)


@router.post("/setup/launch", response_model=None, responses={**TEXT_OK, **guest_errors(500)})
def launch(body: CommandBody, state: StateDep) -> Response:
    """Start a program without waiting for it."""
    cmd = commands.normalize(body.command, body.shell)
    try:
        commands.launch(cmd, shell=body.shell, env=state.env)
    except (OSError, ValueError) as exc:
        return _error(500, str(exc))
    shown = cmd if isinstance(cmd, str) else " ".join(cmd)
    return PlainTextResponse(f"{shown} launched successfully")


@router.get("/screen_size")
@router.post("/screen_size")
def screen_size(state: StateDep) -> Any:
    try:
        w, h = state.x.screen_size()
    except DisplayUnavailable as exc:
        return display_error(exc)
    return {"width": w, "height": h}


@router.post("/window_size", responses=guest_errors(404))
def window_size(state: StateDep, app_class_name: Annotated[str, Form(min_length=1)]) -> Any:
    """Size of the first window whose WM_CLASS matches (form field ``app_class_name``)."""
    wanted = app_class_name.lower()
    for w in state.x.windows():
        if wanted in (c.lower() for c in w.wm_class):
            return {"width": w.width, "height": w.height}
    return JSONResponse({"error": f"no window of class {app_class_name!r}"}, status_code=404)


@router.get("/cursor_position")
def cursor_position(state: StateDep) -> Any:
    try:
        return list(state.x.cursor_position())
    except DisplayUnavailable as exc:
        return display_error(exc)


@router.get("/platform", response_model=None, responses=TEXT_OK)
def get_platform() -> Response:
    return PlainTextResponse(platform.system())


@router.get("/accessibility", responses=guest_errors(504))
def accessibility(state: StateDep) -> Any:
    """The AT-SPI tree ``{"AT": xml}``, bounded in time (503 without an AT-SPI bus)."""
    try:
        xml = a11y.dump(timeout=state.settings.accessibility_timeout_s, env=state.env,
                        max_depth=state.a11y_depth)
    except a11y.AccessibilityTimeout as exc:
        return _error(504, str(exc))
    except a11y.AccessibilityError as exc:
        return _error(503, str(exc))
    return {"AT": xml}


@router.post("/file", response_model=None, responses={**FILE, **guest_errors(400, 404)})
def get_file(file_path: Annotated[str | None, Form()] = None) -> Response:
    """The file named by form field ``file_path``, as an attachment."""
    if not file_path:
        return JSONResponse({"error": "file_path is required"}, status_code=400)
    path = _expand(file_path)
    if not path.is_file():
        return JSONResponse({"error": "File not found"}, status_code=404)
    return FileResponse(path, filename=path.name, media_type="application/octet-stream")


@router.post("/setup/upload", response_model=None,
             responses={**TEXT_OK, **guest_errors(400)})
def upload(file_path: Annotated[str | None, Form()] = None,
           file_data: UploadFile | None = None) -> Response:
    """Store multipart ``file_data`` at form field ``file_path``."""
    if not file_path or file_data is None:
        return JSONResponse({"error": "file_path and file_data are required"}, status_code=400)
    path = _expand(file_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            shutil.copyfileobj(file_data.file, out)
    except OSError as exc:
        return JSONResponse({"error": f"file_path: cannot write {path}: {exc.strerror}"},
                            status_code=400)
    return PlainTextResponse("File Uploaded")


@router.post("/setup/open_file", response_model=None,
             responses={**TEXT_OK, **guest_errors(404, 503, text=True)})
def open_file(body: PathBody, state: StateDep) -> Response:
    path = _expand(body.path)
    if not path.exists():
        return PlainTextResponse(f"File not found: {path}", status_code=404)
    try:
        commands.launch(["xdg-open", str(path)], shell=False, env=state.env)
    except OSError as exc:
        return PlainTextResponse(f"Failed to open {path}. Error: {exc}", status_code=503)
    return PlainTextResponse("File opened successfully")


def _wmctrl(body: WindowBody, op: str, state: StateDep, done: str) -> Response:
    """OSWorld's window routes: ``wmctrl -[x][F]<a|c> name``, 200 whatever wmctrl found."""
    flags = f"-{'x' if body.by_class else ''}{'F' if body.strict else ''}{op}"
    try:
        subprocess.run(["wmctrl", flags, body.window_name], env=state.env, timeout=10,
                       capture_output=True, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return PlainTextResponse(f"wmctrl failed: {exc}", status_code=503)
    return PlainTextResponse(done)


@router.post("/setup/activate_window", response_model=None,
             responses={**TEXT_OK, **guest_errors(503, text=True)})
def activate_window(body: WindowBody, state: StateDep) -> Response:
    return _wmctrl(body, "a", state, "Window activated successfully")


@router.post("/setup/close_window", response_model=None,
             responses={**TEXT_OK, **guest_errors(503, text=True)})
def close_window(body: WindowBody, state: StateDep) -> Response:
    return _wmctrl(body, "c", state, "Window closed successfully.")


@router.post("/setup/download_file", response_model=None,
             responses={**TEXT_OK, **guest_errors(502, text=True)})
def download_file(body: DownloadBody) -> Response:
    path = _expand(body.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    error = ""
    for _ in range(3):
        try:
            with httpx.stream("GET", body.url, follow_redirects=True, timeout=60) as resp:
                resp.raise_for_status()
                with path.open("wb") as out:
                    for chunk in resp.iter_bytes():
                        out.write(chunk)
            return PlainTextResponse("File downloaded successfully")
        except httpx.HTTPError as exc:
            error = str(exc)
    return PlainTextResponse(f"Failed to download {body.url}. Error: {error}", status_code=502)


@router.post("/desktop_path", responses=guest_errors(404))
def desktop_path() -> Any:
    path = Path.home() / "Desktop"
    if path.is_dir():
        return {"desktop_path": str(path)}
    return JSONResponse({"error": "desktop path not found"}, status_code=404)


@router.post("/list_directory", responses=guest_errors(400))
def list_directory(body: PathBody) -> Any:
    root = _expand(body.path)
    if not root.is_dir():
        return JSONResponse({"error": "The provided path is not a directory"}, status_code=400)

    def tree(d: Path) -> dict[str, Any]:
        children: list[dict[str, Any]] = []
        for entry in sorted(d.iterdir()):
            children.append(tree(entry) if entry.is_dir() and not entry.is_symlink()
                            else {"type": "file", "name": entry.name})
        return {"type": "directory", "name": d.name, "children": children}

    return {"directory_tree": tree(root)}
