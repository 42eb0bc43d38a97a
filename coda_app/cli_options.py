"""Options and defaults that several ``coda`` commands share."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_HOME = Path(os.environ.get("CODA_HOME", ".coda"))
"""The data dir of a local ``coda up`` (Postgres, Redis, artifacts, ``secrets.json``, logs)."""


class LogFormat(StrEnum):
    AUTO = "auto"
    CONSOLE = "console"
    JSON = "json"


LogFormatOption = Annotated[LogFormat, typer.Option(
    "--log-format", envvar="CODA_LOG_FORMAT", case_sensitive=False,
    help="auto: human-readable lines on a terminal, JSON lines otherwise")]


def json_logs(fmt: LogFormat) -> bool | None:
    return {LogFormat.AUTO: None, LogFormat.CONSOLE: False, LogFormat.JSON: True}[fmt]
