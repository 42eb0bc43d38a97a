"""What the agent's routes answer besides their success, for the OpenAPI document. The error
bodies keep OSWorld's shapes (``{"error": ...}``, ``{"status": "error", "message": ...}`` or
plain text), which its clients read; they are described here so that a client generator or a
fuzzer knows every answer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from coda.service import ErrorBody


class GuestError(BaseModel):
    """An error in OSWorld's shape: ``error``, or ``status`` + ``message`` (+ ``reason``:
    ``x_unavailable`` when the display is gone)."""

    model_config = ConfigDict(extra="allow")

    error: str | None = None
    status: str | None = None
    message: str | None = None
    reason: str | None = None


DESCRIPTIONS = {
    400: "a field that cannot be used", 404: "no such file, directory or window",
    500: "the command could not run (OSWorld's clients expect a 500 here)",
    502: "the remote end failed (a download, ChimeraX)", 503: "the display or a tool is "
    "not available", 504: "the accessibility tree or the application took too long",
}
TEXT: dict[str, Any] = {"text/plain": {"schema": {"type": "string"}}}


def guest_errors(*codes: int, text: bool = False) -> dict[int | str, dict[str, Any]]:
    """Error answers of a route: OSWorld-shaped JSON, or plain text where the route says so."""
    if text:
        return {code: {"description": DESCRIPTIONS[code], "content": TEXT} for code in codes}
    return {code: {"model": GuestError, "description": DESCRIPTIONS[code]} for code in codes}


AUTHENTICATED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "no or a wrong bearer token"},
    503: {"model": GuestError, "description": "the display is gone (reason x_unavailable)"},
}
"""Every route behind the token: refused without it, and 503 when the X connection breaks."""

Responses = dict[int | str, dict[str, Any]]

IMAGES: Responses = {200: {"description": "the screenshot (format as asked)",
                "content": {"image/png": {}, "image/webp": {}, "image/jpeg": {}}}}
FILE: Responses = {200: {"description": "the file", "content": {"application/octet-stream": {}}}}
TEXT_OK: Responses = {200: {"description": "done", "content": TEXT}}
