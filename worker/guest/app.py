"""The agent's FastAPI app."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from coda.service import create_service_app
from worker import __version__
from worker.guest import (
    routes_celestia,
    routes_coda,
    routes_grass,
    routes_osworld,
    routes_scienceboard,
)
from worker.guest.capture import DisplayUnavailable, keep_large_buffers
from worker.guest.responses import AUTHENTICATED
from worker.guest.settings import GuestSettings
from worker.guest.state import GuestState, require_token


async def _display_gone(_: Request, exc: Exception) -> JSONResponse:
    """The X connection broke under a route: 503 with the reason clients map to x_crashed."""
    assert isinstance(exc, DisplayUnavailable)
    return routes_osworld.display_error(exc)


def create_app(settings: GuestSettings) -> FastAPI:
    """The agent for one display; refuses to build without a token unless throw-away."""
    settings.check_token()
    keep_large_buffers()
    state = GuestState.create(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.runner.start()
        try:
            yield
        finally:
            state.close()

    app, _ = create_service_app(
        name="coda-guest", version=__version__, lifespan=lifespan,
        description="Desktop agent: OSWorld's guest routes plus token, readiness, fast "
                    "screenshots, typed actions.",
        max_body_bytes=settings.max_upload_bytes)
    app.state.guest = state
    app.add_exception_handler(DisplayUnavailable, _display_gone)
    app.include_router(routes_coda.health_router)
    auth = [Depends(require_token)]
    for router in (routes_osworld.router, routes_scienceboard.router, routes_coda.router,
                   routes_grass.router, routes_celestia.router):
        app.include_router(router, dependencies=auth, responses=AUTHENTICATED)
    return app
