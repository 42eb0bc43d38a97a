"""Bearer tokens with roles, checked before a request body is read.

A route states what it needs with a dependency from :func:`require` (``Depends(require(
"admin"))``, on the route or its router); that dependency carries a :class:`Requirement`.
:class:`AuthGate`, an ASGI middleware, finds the requirement of the route a request will
reach (:mod:`coda.service.routes`) and answers 401/403
*before* the body is received, so a caller without a valid token never gets a body parsed,
validated or buffered. The dependency then hands the caller's role to the route (and puts the
bearer scheme into the OpenAPI document).

Tokens are compared in constant time; a service builds one :class:`TokenAuth` from its
settings (role -> tokens) and passes it to :func:`coda.service.create_service_app`.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from coda.service.errors import safe_json
from coda.service.routes import RouteInfo, RouteTable

ANONYMOUS = "anonymous"
_bearer = HTTPBearer(auto_error=False, description="CODA bearer token")
_WWW = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Requirement:
    """Roles a route accepts; ``public``: anonymous callers too, when the app allows public
    reads (:attr:`TokenAuth.public_reads`)."""

    roles: frozenset[str]
    public: bool = False

    def describe(self) -> str:
        return " or ".join(sorted(self.roles))


class AuthError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class TokenAuth:
    """Which token has which role. ``tokens`` maps a role to its tokens."""

    def __init__(self, tokens: Mapping[str, Iterable[str]], *, public_reads: bool = False) -> None:
        self._tokens = [(role, t.encode()) for role, ts in tokens.items() for t in ts if t]
        self.public_reads = public_reads

    def role_of(self, token: str) -> str | None:
        """The role of ``token`` (constant-time compares against every token), else None."""
        given = token.encode("utf-8", "surrogateescape")
        found = None
        for role, known in self._tokens:
            if hmac.compare_digest(given, known) and found is None:
                found = role
        return found

    def check(self, req: Requirement, authorization: str | None) -> str:
        """The caller's role for ``req``, or :class:`AuthError` (401 / 403)."""
        token = bearer_token(authorization)
        if token is None:
            if req.public and self.public_reads:
                return ANONYMOUS
            raise AuthError(status.HTTP_401_UNAUTHORIZED, f"{req.describe()} token required")
        role = self.role_of(token)
        if role is None:
            raise AuthError(status.HTTP_401_UNAUTHORIZED, "invalid token")
        if role not in req.roles:
            raise AuthError(status.HTTP_403_FORBIDDEN, f"{req.describe()} token required")
        return role


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require(*roles: str, public: bool = False) -> Any:
    """A dependency for a route that needs one of ``roles`` (see module doc); it returns the
    caller's role (``"anonymous"`` for a public read without token)."""
    requirement = Requirement(frozenset(roles), public)

    async def dependency(request: Request,
                         _: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> str:
        state = request.scope.get("state") or {}
        if "coda_role" in state:  # already checked by the gate
            return str(state["coda_role"])
        auth: TokenAuth | None = getattr(request.app.state, "auth", None)
        if auth is None:
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, "no auth configured")
        try:
            return auth.check(requirement, request.headers.get("authorization"))
        except AuthError as exc:
            raise HTTPException(exc.status_code, exc.message, headers=_WWW) from exc

    dependency.coda_requirement = requirement  # type: ignore[attr-defined]
    return dependency


def requirement_of(dependant: Any) -> Requirement | None:
    """The :class:`Requirement` among a route's dependencies (searched recursively)."""
    stack = list(getattr(dependant, "dependencies", []))
    while stack:
        dep = stack.pop()
        req = getattr(dep.call, "coda_requirement", None)
        if isinstance(req, Requirement):
            return req
        stack.extend(dep.dependencies)
    return None


class AuthGate:
    """Checks the :class:`Requirement` of the route a request will reach before anything
    reads its body."""

    def __init__(self, app: ASGIApp, auth: TokenAuth, routes: RouteTable) -> None:
        self.app = app
        self.auth = auth
        self.routes = routes
        self._requirements: dict[str, Requirement | None] = {}

    def _requirement(self, info: RouteInfo) -> Requirement | None:
        key = f"{sorted(info.methods)} {info.path_format}"
        if key not in self._requirements:
            self._requirements[key] = requirement_of(info.dependant)
        return self._requirements[key]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = self.routes.find(scope)
        req = self._requirement(info) if info is not None else None
        if req is not None:
            header = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                           if k == b"authorization"), None)
            try:
                role = self.auth.check(req, header)
            except AuthError as exc:
                await safe_json({"detail": exc.message}, exc.status_code,
                                _WWW)(scope, receive, send)
                return
            scope.setdefault("state", {})["coda_role"] = role
        await self.app(scope, receive, send)
