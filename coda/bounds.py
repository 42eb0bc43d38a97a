"""Bounds of the numbers that cross a process boundary, as shared annotated types.

Every number a peer writes (a worker's step or result, a trainer's metrics, a judge's verdict,
a group's state) is bounded at the write to what its storage and every reader of it hold: a
PostgreSQL ``integer`` column or a ``::int`` cast of a JSON field (2^31 - 1), a step index the
dashboard and the datasets store as ``int32``, a token id a tensor holds, a screen coordinate
X can address, a time in milliseconds. A value past its bound is refused with a 422 naming the
field, so nothing is stored that a later read cannot give back (a replay, a lease, a dataset
export). Floats are finite everywhere (JSON has no NaN or infinity, and the services' strict
JSON parser refuses them; ``allow_inf_nan=False`` keeps a Python caller from making one).

This module imports nothing of the project: any contract (and :mod:`coda.actions`) uses it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT32_MAX = 2**31 - 1
"""PostgreSQL ``integer`` (and a ``::int`` cast of a JSON number)."""
INT64_MAX = 2**63 - 1
"""PostgreSQL ``bigint``."""
MAX_STEP_INDEX = 100_000
"""A step index (0-based) of an episode: far above any step budget (1,000), well inside int32."""
MAX_SCREEN_SIDE = 16_384
"""Pixels on one side of a screen or screenshot."""
MAX_MILLIS = 30 * 24 * 3600 * 1000.0
"""A duration in milliseconds (30 days: longer than any lease, step or episode)."""
MAX_WAIT_S = 3600.0
"""Seconds a task's setup step may wait."""
MAX_TOKENS = 32_768
"""Tokens one sampled plan may have (the services' ``max_tokens`` bound)."""
MAX_SLOTS = 10_000
"""Slots of one worker."""
MAX_ERROR_TEXT = 10_000
"""Characters of an error message a peer reports or stores (a failed job's, a GRASS command's);
a longer one is cut to it."""
MAX_METRICS_READ = 10_000
"""Trainer updates one read of the training metrics returns."""
MAX_GROUP_SIZE = 64
"""Candidates of one GRPO group (the planner samples at most 64 plans per call)."""
MAX_LIST = 1_000
"""Items of a list a peer reports (setup steps, checker results, windows)."""

Index = Annotated[int, Field(ge=0, le=MAX_STEP_INDEX)]
"""A 0-based step index."""
StepNumber = Annotated[int, Field(ge=1, le=MAX_STEP_INDEX + 1)]
"""A 1-based step number (the judge numbers steps from 1)."""
Attempt = Annotated[int, Field(ge=1, le=INT32_MAX)]
"""Which lease of a job (``jobs.attempts``: integer)."""
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""How many of something (stored or cast as integer)."""
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
"""Any integer a PostgreSQL ``integer`` holds."""
Pixels = Annotated[int, Field(ge=1, le=MAX_SCREEN_SIDE)]
"""A width or height in pixels."""
Coordinate = Annotated[int, Field(ge=0, le=MAX_SCREEN_SIDE - 1)]
"""A pixel on a screen, from its left or top edge."""
Millis = Annotated[float, Field(ge=0, le=MAX_MILLIS, allow_inf_nan=False)]
"""A duration in milliseconds."""
WaitSeconds = Annotated[float, Field(ge=0, le=MAX_WAIT_S, allow_inf_nan=False)]
"""A wait in seconds."""
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A score or a reward in [0, 1]."""
Finite = Annotated[float, Field(allow_inf_nan=False)]
"""Any finite float (a metric, a loss)."""
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""A token id of a vocabulary (a tensor of int32 or int64 holds it)."""
LogProb = Annotated[float, Field(le=0, allow_inf_nan=False)]
"""A finite log-probability."""
