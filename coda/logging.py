"""Structured logging (structlog over stdlib logging), one call per process."""

from __future__ import annotations

import logging
import os
import sys

import structlog

LOG_FORMAT_ENV = "CODA_LOG_FORMAT"
"""``json`` or ``console`` forces a format; otherwise JSON unless stderr is a terminal."""


def wants_json(json_logs: bool | None = None) -> bool:
    """The format to use: the argument, else ``CODA_LOG_FORMAT``, else JSON unless a TTY."""
    if json_logs is not None:
        return json_logs
    forced = os.environ.get(LOG_FORMAT_ENV, "").strip().lower()
    if forced in ("json", "console"):
        return forced == "json"
    return not sys.stderr.isatty()


def configure_logging(level: str = "INFO", *, json_logs: bool | None = None) -> None:
    """Route stdlib and structlog records to stderr as human-readable lines (a terminal) or
    JSON lines (otherwise, or when asked: ``json_logs`` / ``CODA_LOG_FORMAT``)."""
    json_logs = wants_json(json_logs)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    # JSON lines carry the traceback as text (format_exc_info); the console renderer
    # pretty-prints exc_info itself
    renderers: list[structlog.types.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json_logs
        else [structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "uvicorn.access", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.stdlib.get_logger(name)
