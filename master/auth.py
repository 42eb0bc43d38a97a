"""The master's roles on the shared token kit (:mod:`coda.service.auth`): one admin token
(submit, cancel, versions), worker tokens (jobs, artifacts, groups), and public reads of the
status unless ``CODA_PUBLIC_STATUS=false``. Tokens are checked before a body is read."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from fastapi import Depends

from coda.service.auth import ANONYMOUS, require
from master.settings import MasterSettings
from master.tokens import MasterTokenAuth


class Role(StrEnum):
    ADMIN = "admin"
    WORKER = "worker"
    ANONYMOUS = ANONYMOUS


def token_auth(settings: MasterSettings) -> MasterTokenAuth:
    """The master's tokens by role (worker tokens revoked at run time refused:
    :mod:`master.tokens`)."""
    admin, workers = settings.tokens()
    return MasterTokenAuth({Role.ADMIN: [admin], Role.WORKER: workers}, worker_role=Role.WORKER,
                           public_reads=settings.public_status)


Admin = Annotated[str, Depends(require(Role.ADMIN))]
WorkerAuth = Annotated[str, Depends(require(Role.WORKER, Role.ADMIN))]
Reader = Annotated[str, Depends(require(Role.ADMIN, Role.WORKER, public=True))]
