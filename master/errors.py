"""What the master's operations refuse with; ``master.app`` maps each to its HTTP status."""

from __future__ import annotations

import uuid
from typing import Any


class LeaseLost(Exception):
    """The job (or group) is not held with this token (expired, requeued, finished or
    cancelled): 409."""

    def __init__(self, job_id: uuid.UUID, status: str | None) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} is not leased with this token (job status: {status or 'unknown'})")


class JobNotFound(Exception):
    """404."""


class StepRefused(Exception):
    """A step report the lease does not allow (another attempt, or a job without steps): 409;
    one that sets what only the master sets (``field`` names it, e.g. ``step.label``): 422."""

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.field = field


class InvalidResult(ValueError):
    """A completion whose result does not fit the job's kind (nothing was changed): 422."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("invalid result")
        self.errors = errors


class BatchNotFound(Exception):
    """A batch or an episode that does not exist: 404."""


class EpisodeNotFound(LookupError):
    pass


class WorkerNotFound(Exception):
    """404."""


class VersionExists(Exception):
    """409."""


class Unavailable(Exception):
    """A store the master needs did not answer (PostgreSQL restarting, Redis stopped, a name
    that does not resolve): 503 with ``Retry-After``, never a 500. ``dependency`` names it
    (``postgres``, ``redis``, ``artifacts`` or ``a dependency`` when the error does not say)."""

    def __init__(self, dependency: str, cause: BaseException) -> None:
        self.dependency = dependency
        self.cause = cause
        super().__init__(f"{dependency} is unavailable ({type(cause).__name__}: "
                         f"{str(cause)[:300] or 'no message'}); retry later")
