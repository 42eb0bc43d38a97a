"""Typed client of the judge service.

``InstructionCheckRequest`` / ``InstructionCheck`` live in :mod:`coda.contracts.services_api`
and are re-exported here for the callers that import them with the client.
"""

from __future__ import annotations

from coda.clients.base import JsonClient
from coda.contracts.services_api import (
    InstructionCheck,
    InstructionCheckRequest,
    JudgePolicy,
    JudgeRequest,
    JudgeResponse,
    JudgeStep,
)


class JudgeClient(JsonClient):
    """``await JudgeClient(url).judge(instruction, steps)``."""

    async def judge(self, instruction: str, steps: list[JudgeStep],
                    policy: JudgePolicy | None = None) -> JudgeResponse:
        body = JudgeRequest(instruction=instruction, steps=steps,
                            policy=policy or JudgePolicy())
        return await self.request("POST", "/v1/judge", body, JudgeResponse)

    async def judge_request(self, body: JudgeRequest) -> JudgeResponse:
        return await self.request("POST", "/v1/judge", body, JudgeResponse)

    async def check_instruction(self, body: InstructionCheckRequest) -> InstructionCheck:
        return await self.request("POST", "/v1/instructions/check", body, InstructionCheck)


__all__ = ["InstructionCheck", "InstructionCheckRequest", "JudgeClient"]
