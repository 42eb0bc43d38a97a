"""GRASS GIS's GUI state, read inside the GUI: ``POST /coda/grass`` forwards one operation to
the state reader the GRASS adapter loads into the GUI's process
(``worker/tasks/adapters/grass/wxgui_state.py``), over its Unix socket in the desktop user's
home (``$HOME/.coda/grass-gui.sock``, mode 0600). Nothing listens on a port: this route, behind
the agent's token, is the reader's only way out of the desktop. The request and the reply are
contracts (``GrassRequest``, ``GrassReply`` in :mod:`coda.contracts.desktop`), sent and read by
the worker's ``GuestClient.grass``.

Answers: 200 with the reader's reply (``ok`` false with the reader's error when the operation
failed in the GUI), 503 when no GUI with the reader is running, 504 when it did not answer in
time."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from coda.bounds import MAX_ERROR_TEXT
from coda.contracts.desktop import GrassReply, GrassRequest
from worker.guest.responses import guest_errors
from worker.guest.state import StateDep

router = APIRouter(prefix="/coda", tags=["coda"])

SOCKET_NAME = ".coda/grass-gui.sock"
MAX_REPLY_BYTES = 32 * 1024 * 1024


def socket_path(env: dict[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home()) / SOCKET_NAME


def ask(path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request/reply on the reader's socket (OSError: nothing there; TimeoutError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = bytearray()
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REPLY_BYTES:
                raise ValueError(f"the reader's reply is over {MAX_REPLY_BYTES} bytes")
    reply = json.loads(data)
    if not isinstance(reply, dict):
        raise ValueError("the reader's reply is not a JSON object")
    return reply


@router.post("/grass", responses=guest_errors(502, 503, 504))
def grass(body: GrassRequest, state: StateDep) -> Any:
    """Run one operation of GRASS GIS's GUI state reader (:class:`GrassOp`)."""
    path = socket_path(state.env)
    request = {"op": body.op.value, "args": {**body.args, "timeout_s": body.timeout_s}}
    try:
        reply = ask(path, request, body.timeout_s + 5)
    except TimeoutError:
        return JSONResponse({"error": f"GRASS GIS's GUI did not answer {body.op.value!r} "
                                      f"within {body.timeout_s:g} s"}, status_code=504)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        return JSONResponse({"error": f"no GRASS GIS GUI with CODA's state reader is running "
                                      f"({path}: {exc.strerror})"}, status_code=503)
    except (OSError, ValueError) as exc:
        return JSONResponse({"error": f"GRASS GIS's state reader at {path}: {exc}"},
                            status_code=502)
    error = reply.get("error")
    return GrassReply(ok=bool(reply.get("ok")), result=reply.get("result"),
                      error=None if error is None else str(error)[:MAX_ERROR_TEXT])
