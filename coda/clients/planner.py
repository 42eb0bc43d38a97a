"""Typed client of the planner service."""

from __future__ import annotations

from coda.clients.base import JsonClient
from coda.contracts.services_api import (
    AdapterInfo,
    AdapterList,
    AdapterLoad,
    PlanRequest,
    PlanResponse,
)


class PlannerClient(JsonClient):
    """``await PlannerClient(url).plan(PlanRequest(...))`` and the adapter routes."""

    async def plan(self, body: PlanRequest) -> PlanResponse:
        return await self.request("POST", "/v1/plan", body, PlanResponse)

    async def load_adapter(self, version: str, uri: str, *,
                           make_default: bool = True) -> AdapterInfo:
        body = AdapterLoad(version=version, uri=uri, make_default=make_default)
        return await self.request("POST", "/v1/adapters", body, AdapterInfo)

    async def list_adapters(self) -> AdapterList:
        return await self.request("GET", "/v1/adapters", None, AdapterList)

    async def unload_adapter(self, version: str) -> None:
        await self.send("DELETE", f"/v1/adapters/{version}")
