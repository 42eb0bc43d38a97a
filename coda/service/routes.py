"""The app's routes as the request pipeline needs them before routing: which route a request
will reach (its path template, for metrics) and what it requires (for the auth gate).

FastAPI (0.163) keeps an included router as one wrapped entry; :func:`iter_route_contexts`
yields its routes with their effective path, methods and dependencies (router dependencies
included), so routes added through ``include_router`` are seen like routes of the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi.routing import iter_route_contexts
from starlette.types import Scope


@dataclass(frozen=True)
class RouteInfo:
    path_format: str
    prefix: str
    """The literal start of the path (before the first parameter): a cheap pre-filter."""
    regex: Any
    methods: frozenset[str]
    dependant: Any


class RouteTable:
    """Built on first use from ``router`` (the app's router; routes are all added by then)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self._routes: list[RouteInfo] | None = None

    def routes(self) -> list[RouteInfo]:
        if self._routes is None:
            found = []
            for ctx in iter_route_contexts(self.router.routes):
                regex = getattr(ctx, "path_regex", None)
                path_format = ctx.path_format
                if regex is None or path_format is None:
                    continue
                methods = frozenset(ctx.methods or ())
                if "GET" in methods:
                    methods |= {"HEAD"}
                found.append(RouteInfo(path_format, path_format.split("{", 1)[0], regex,
                                       methods, getattr(ctx, "dependant", None)))
            self._routes = found
        return self._routes

    def find(self, scope: Scope) -> RouteInfo | None:
        """The route ``scope`` will reach (path and method), or None."""
        path = scope.get("path", "")
        method = scope.get("method", "")
        for info in self.routes():
            if (path.startswith(info.prefix) and (not info.methods or method in info.methods)
                    and info.regex.match(path)):
                return info
        return None
