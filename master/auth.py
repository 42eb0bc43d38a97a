"""Bearer tokens: one admin token (submit, cancel, versions) and worker tokens (jobs)."""

from __future__ import annotations

import hmac
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False)


class Role(StrEnum):
    ADMIN = "admin"
    WORKER = "worker"
    ANONYMOUS = "anonymous"


def _role(request: Request, creds: HTTPAuthorizationCredentials | None) -> Role:
    if creds is None:
        return Role.ANONYMOUS
    s = request.app.state.settings
    token = creds.credentials.encode()
    if hmac.compare_digest(token, s.admin_token.encode()):
        return Role.ADMIN
    if any(hmac.compare_digest(token, t.encode()) for t in s.worker_tokens):
        return Role.WORKER
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid token",
                        headers={"WWW-Authenticate": "Bearer"})


async def _caller(request: Request,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Role:
    return _role(request, creds)


async def require_admin(role: Annotated[Role, Depends(_caller)]) -> Role:
    if role is Role.ANONYMOUS:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "admin token required",
                            headers={"WWW-Authenticate": "Bearer"})
    if role is not Role.ADMIN:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin token required")
    return role


async def require_worker(role: Annotated[Role, Depends(_caller)]) -> Role:
    if role is Role.ANONYMOUS:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "worker token required",
                            headers={"WWW-Authenticate": "Bearer"})
    return role


async def require_reader(request: Request, role: Annotated[Role, Depends(_caller)]) -> Role:
    if role is Role.ANONYMOUS and not request.app.state.settings.public_status:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "token required",
                            headers={"WWW-Authenticate": "Bearer"})
    return role


Admin = Annotated[Role, Depends(require_admin)]
WorkerAuth = Annotated[Role, Depends(require_worker)]
Reader = Annotated[Role, Depends(require_reader)]
