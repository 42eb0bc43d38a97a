"""Infrastructure errors as typed 503 answers: an error of PostgreSQL, Redis or the network
under them (a restart, a stop, a name that no longer resolves, a closed connection; a deadlock
PostgreSQL broke by rolling one transaction back) becomes :class:`master.errors.Unavailable`,
answered 503 with ``Retry-After`` (clients retry it), never a 500: nothing of the request was
committed. Which store failed is read from the error's type, else from where it was raised."""

from __future__ import annotations

import traceback

import asyncpg
from fastapi import FastAPI, Request, Response
from redis.exceptions import RedisError

from coda.logging import get_logger
from coda.service import safe_json
from master.errors import Unavailable

log = get_logger("coda.master.unavailable")

INFRASTRUCTURE: tuple[type[Exception], ...] = (
    RedisError,
    asyncpg.exceptions.PostgresConnectionError,  # class 08: the connection failed or is gone
    asyncpg.exceptions.InterfaceError,  # a connection closed under a query
    # a pooled connection whose server said goodbye (a restart's "terminating connection due to
    # administrator command") while it sat idle, handed out before its closed socket was seen:
    # "cannot switch to state 12; another operation (2) is in progress" (state 2: asyncpg
    # discarding what the server sent unasked); asyncpg aborts the connection
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.OperatorInterventionError,  # class 57: shutting down, starting up
    asyncpg.exceptions.InsufficientResourcesError,  # class 53: too many connections, disk full
    asyncpg.exceptions.TransactionRollbackError,  # class 40: a deadlock or serialization
    # failure between concurrent requests, rolled back whole: a retry goes through
    OSError,  # refused, reset, unreachable, a name that does not resolve, timed out
)
"""What the master answers 503: the errors of its stores and of the network under them."""

_MODULES = (("asyncpg", "postgres"), ("redis", "redis"), ("fsspec", "artifacts"),
            ("coda.artifacts", "artifacts"))
STORES = frozenset(name for _, name in _MODULES)


def dependency_of(exc: BaseException) -> str:
    """Which store an infrastructure error came from: by its type, else by the innermost
    frame of a store's client library it passed through."""
    if isinstance(exc, RedisError):
        return "redis"
    if isinstance(exc, asyncpg.exceptions.PostgresError | asyncpg.exceptions.InterfaceError
                  | asyncpg.exceptions.InternalClientError):
        return "postgres"
    found = "a dependency"
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        for prefix, name in _MODULES:
            if module == prefix or module.startswith(prefix + "."):
                found = name
    return found


def install(app: FastAPI, retry_after_s: int) -> None:
    """Answer every infrastructure error (and :class:`Unavailable`) 503 with
    ``Retry-After: retry_after_s``. A ``RuntimeError`` raised through a store's client library
    (the event loop's "unable to perform operation on <TCPTransport closed=True>" when a
    connection closed under a query) is one too; any other stays a 500."""

    async def unavailable(request: Request, exc: Exception) -> Response:
        typed = exc if isinstance(exc, Unavailable) else Unavailable(dependency_of(exc), exc)
        log.warning("master.unavailable", dependency=typed.dependency, path=request.url.path,
                    error=f"{type(typed.cause).__name__}: {str(typed.cause)[:300]}")
        return safe_json({"detail": str(typed)}, 503, {"retry-after": str(retry_after_s)})

    async def runtime(request: Request, exc: Exception) -> Response:
        if dependency_of(exc) in STORES:
            return await unavailable(request, exc)
        raise exc  # not a store's: the 500 of the request's top (logged with its traceback)

    app.add_exception_handler(Unavailable, unavailable)
    for kind in INFRASTRUCTURE:
        app.add_exception_handler(kind, unavailable)
    app.add_exception_handler(RuntimeError, runtime)
