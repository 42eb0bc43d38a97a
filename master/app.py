"""The master FastAPI application (``create_app``; ``uvicorn master.app:create_app --factory``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from pydantic import ValidationError

from coda import __version__
from coda.artifacts import ArtifactError, ArtifactStore
from coda.contracts.coverage import CoverageReport
from coda.contracts.master_api import SupervisedChild
from coda.logging import configure_logging, get_logger
from coda.service import create_service_app, safe_json
from coda.tasks import TaskLoadError
from coda.urls import redact_url
from master import errors, maintenance, shutdown, tokens, unavailable
from master.auth import token_auth
from master.db.migrate import upgrade
from master.db.pg import make_pool, ping
from master.metrics import MasterMetrics
from master.queue.keys import Keys
from master.queue.redis_queue import RedisQueue
from master.routes import (
    admin,
    artifacts,
    episodes,
    groups,
    models,
    status,
    training,
    worker_tokens,
)
from master.routes import batches as batch_routes
from master.routes import jobs as job_routes
from master.routes import workers as worker_routes
from master.settings import MasterSettings
from master.shedding import InFlight, LoadShedding, LoopLag, ShedMetrics, kept
from master.state import AppState

log = get_logger("coda.master")


def read_coverage(path: str | None) -> CoverageReport | None:
    """The coverage report the dashboard shows; a file that cannot be read or is no report is
    a clear refusal to start (naming the setting), not a dashboard without it."""
    if path is None:
        return None
    try:
        return CoverageReport.model_validate_json(Path(path).read_bytes())
    except (OSError, ValidationError) as exc:
        raise RuntimeError(f"CODA_COVERAGE_FILE={path}: not a coverage report "
                           f"({type(exc).__name__}: {str(exc)[:300]})") from None


def create_app(settings: MasterSettings | None = None, *, migrate: bool = True,
               supervised: Callable[[], list[SupervisedChild]] | None = None) -> FastAPI:
    """``supervised``: under ``coda up``, what it runs beside the master (the status shows
    it)."""
    s = settings or MasterSettings()
    s.check_secrets()
    coverage = read_coverage(s.coverage_file)
    holder: dict[str, AppState] = {}
    lag = LoopLag()  # how late the event loop runs: load shedding reads it

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if migrate:
            await upgrade(s.database_url)
        pg = await make_pool(s.database_url, size=s.db_pool_size)
        # a blocking pool: past max_connections a caller waits for a connection, not an error
        redis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
            s.redis_url, max_connections=s.redis_max_connections, timeout=30))
        core = AppState(settings=s, pg=pg, redis=redis,
                        queue=RedisQueue(redis, Keys(s.redis_prefix)),
                        store=ArtifactStore(s.artifacts_url, max_bytes=s.max_upload_bytes),
                        auth=auth, metrics=metrics, coverage=coverage, supervised=supervised)
        app.state.core = core
        # revoked worker tokens: loaded now, re-read each maintenance round
        await tokens.load_revocations(pg, auth)
        app.state.settings = s
        holder["core"] = core
        # Everything loaded so far lives as long as the process: keep it out of the cyclic GC's
        # scans, and collect young objects less often (fewer, shorter pauses under load).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*s.gc_thresholds)
        restore_signals = shutdown.set_on_signals(core.stopping)
        stop = asyncio.Event()
        loop = asyncio.create_task(maintenance.run(core, stop))
        watch = asyncio.create_task(lag.run()) if s.shed_max_in_flight else None
        log.info("master.ready", redis_prefix=s.redis_prefix, artifacts=s.artifacts_url,
                 database=redact_url(s.database_url), test_clock=s.test_clock)
        try:
            yield
        finally:
            core.stopping.set()
            restore_signals()
            stop.set()
            await loop
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            await redis.aclose()
            await pg.close()

    async def ready() -> dict[str, str]:
        core = holder["core"]
        await ping(core.pg)
        await core.redis.ping()
        return {"postgres": "ok", "redis": "ok", "queue_built": str(await core.queue.is_built())}

    auth = token_auth(s)
    app, registry = create_service_app(
        name="CODA master", version=__version__, lifespan=lifespan, ready=ready,
        max_body_bytes=s.max_body_bytes, auth=auth,
        description="Batches, episodes, the Redis lease queue, training groups and model versions.",
    )
    metrics = MasterMetrics(registry)
    app.state.settings = s
    routers = [batch_routes.router, episodes.router, job_routes.router, worker_routes.router,
               artifacts.router, groups.router, models.router, status.router, training.router,
               worker_tokens.router]
    if s.test_clock:  # tests only (dev mode): not in a production master, nor its OpenAPI
        routers.append(admin.router)
    for router in routers:
        app.include_router(router)
    if s.shed_max_in_flight:  # outermost: a refusal costs no routing, auth or body read
        in_flight = InFlight(s.shed_max_in_flight)
        app.add_middleware(LoadShedding, in_flight=in_flight, queue_wait_s=s.shed_queue_wait_s,
                           retry_after_s=s.shed_retry_after_s,
                           metrics=ShedMetrics(registry, in_flight), lag=lag,
                           max_lag_s=s.shed_max_loop_lag_s,
                           keeping=kept(r for router in routers for r in router.routes))
    _errors(app, s)
    return app


def _errors(app: FastAPI, s: MasterSettings) -> None:
    def handler(code: int) -> Any:
        async def handle(_: Request, exc: Exception) -> Response:
            return safe_json({"detail": str(exc) or type(exc).__name__}, code)
        return handle

    app.add_exception_handler(errors.LeaseLost, handler(409))
    app.add_exception_handler(errors.JobNotFound, handler(404))
    app.add_exception_handler(errors.BatchNotFound, handler(404))
    app.add_exception_handler(errors.WorkerNotFound, handler(404))
    app.add_exception_handler(ArtifactError, handler(400))
    # Postgres or Redis unreachable, restarting or restarted under us: a typed 503 with
    # Retry-After, which clients retry (master/unavailable.py)
    unavailable.install(app, s.unavailable_retry_after_s)

    async def invalid_result(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, errors.InvalidResult)
        return safe_json({"detail": exc.errors}, 422)

    async def invalid_task(_: Request, exc: Exception) -> Response:
        return safe_json({"detail": [{"loc": ["body"], "msg": str(exc), "type": "task_invalid"}]},
                         422)

    async def step_refused(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, errors.StepRefused)
        if exc.field is None:  # the lease does not allow it
            return safe_json({"detail": str(exc)}, 409)
        return safe_json({"detail": [{"loc": ["body", *exc.field.split(".")], "msg": str(exc),
                                      "type": "value_error"}]}, 422)

    app.add_exception_handler(errors.InvalidResult, invalid_result)
    app.add_exception_handler(errors.StepRefused, step_refused)
    app.add_exception_handler(TaskLoadError, invalid_task)


def main() -> None:  # pragma: no cover - thin wrapper for `python -m master.app`
    import uvicorn

    s = MasterSettings()
    configure_logging(s.log_level)
    uvicorn.run(create_app(s), host="127.0.0.1", port=8000)


if __name__ == "__main__":  # pragma: no cover
    main()
