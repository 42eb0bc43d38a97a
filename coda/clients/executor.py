"""Typed client of the executor service."""

from __future__ import annotations

from coda.clients.base import JsonClient
from coda.contracts.services_api import ActBatchRequest, ActBatchResponse, ActRequest, ActResult


class ExecutorClient(JsonClient):
    """``await ExecutorClient(url).act(ActRequest(...))`` -> :class:`ActResult`."""

    async def __aenter__(self) -> ExecutorClient:  # typed as this class, for `async with`
        return self

    async def act(self, req: ActRequest) -> ActResult:
        """Ground one thought into one action (a parse failure is ``result.error``)."""
        return await self.request("POST", "/v1/act", req, ActResult)

    async def act_batch(self, req: ActBatchRequest) -> ActBatchResponse:
        """Ground G thoughts on one state in one backend call; results keep their order."""
        return await self.request("POST", "/v1/act/batch", req, ActBatchResponse)
