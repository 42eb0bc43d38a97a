"""Task coverage: which tasks of a folder can run with a real verdict on a provider. Written by
``coda tasks coverage`` (``worker.tasks.coverage``), read by the master's status and dashboard
(``CODA_COVERAGE_FILE``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AppCoverage(BaseModel):
    app: str
    tasks: int = Field(default=0, ge=0, description="task files of this application")
    loaded: int = Field(default=0, ge=0, description="... that load")
    implemented: int = Field(default=0, ge=0,
                             description="... whose every setup step and checker exists")
    runnable: int = Field(default=0, ge=0,
                          description="... that can run with a real verdict on the provider")
    reasons: dict[str, list[str]] = Field(default_factory=dict,
                                          description="reason -> task names")


class CoverageReport(BaseModel):
    provider: str
    folder: str
    apps: list[AppCoverage]
    total: AppCoverage
