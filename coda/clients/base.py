"""A small typed JSON client over httpx with bearer auth, retries on transient errors and
errors that carry the server's message."""

from __future__ import annotations

from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

M = TypeVar("M", bound=BaseModel)

RETRY_STATUS = frozenset({502, 503, 504})


class ServiceError(RuntimeError):
    """A non-2xx answer; ``status`` and ``detail`` come from the server."""

    def __init__(self, status: int, detail: Any, url: str) -> None:
        super().__init__(f"{status} from {url}: {detail}")
        self.status = status
        self.detail = detail
        self.url = url


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ServiceError):
        return exc.status in RETRY_STATUS
    return isinstance(exc, httpx.TransportError)


class JsonClient:
    """Base class: ``await client.request("POST", "/v1/x", body, Model)``."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._own = client is None
        self.http = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=headers,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )
        if client is not None and token:
            self.http.headers.update(headers)
        self.retries = retries

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    async def send(self, method: str, path: str, body: BaseModel | dict[str, Any] | None = None,
                   *, params: dict[str, Any] | None = None, **kw: Any) -> httpx.Response:
        payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.retries), wait=wait_exponential(0.1, max=2),
            retry=retry_if_exception(_transient), reraise=True,
        ):
            with attempt:
                resp = await self.http.request(method, path, json=payload, params=params, **kw)
                if resp.status_code >= 400:
                    try:
                        detail = resp.json().get("detail", resp.text)
                    except ValueError:
                        detail = resp.text
                    raise ServiceError(resp.status_code, detail, str(resp.request.url))
        return resp

    async def request(self, method: str, path: str, body: BaseModel | dict[str, Any] | None,
                      model: type[M], **kw: Any) -> M:
        resp = await self.send(method, path, body, **kw)
        return model.model_validate_json(resp.content)
