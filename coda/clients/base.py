"""A small typed JSON client over httpx with bearer auth, retries on transient errors and
errors that carry the server's message; and the ONE retry policy every CODA HTTP caller uses
(:func:`http_retry`, tenacity: exponential backoff with jitter, ``Retry-After`` honoured)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

M = TypeVar("M", bound=BaseModel)

RETRY_STATUS = frozenset({502, 503, 504})
MAX_RETRY_AFTER_S = 60.0
MAX_PATIENT_BACKOFF_S = 4.0
RETRY_AFTER_JITTER = 0.5


def after_hint(seconds: float, refusals: int = 1) -> float:
    """How long to wait when a server said ``Retry-After: seconds`` to the ``refusals``-th
    try in a row: that long, doubled for every refusal before it (a server still overloaded
    gets fewer retries, not a storm of them), plus up to ``RETRY_AFTER_JITTER`` of it more so
    that the many clients one overloaded server refused at once do not all come back at the
    same instant; at most ``MAX_RETRY_AFTER_S``."""
    base = seconds * 2.0 ** min(max(refusals - 1, 0), 16)
    return min(base * (1.0 + random.uniform(0.0, RETRY_AFTER_JITTER)), MAX_RETRY_AFTER_S)


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (capped), or None."""
    value = response.headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


class _Wait:
    """Exponential backoff with jitter, unless the failure says how long to wait
    (an exception with a ``retry_after`` attribute, from the server's header: that long,
    with jitter, :func:`after_hint`)."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.backoff = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = getattr(exc, "retry_after", None)
        if hinted is not None:
            return after_hint(float(hinted), state.attempt_number)
        return float(self.backoff(state))


def http_retry(attempts: int, transient: Callable[[BaseException], bool], *,
               backoff_s: float = 0.1, max_backoff_s: float = 8.0,
               within_s: float | None = None) -> AsyncRetrying:
    """Up to ``attempts`` tries of the block while ``transient(exc)`` (with ``within_s``: as
    many as fit in that many seconds, at least ``attempts``); the last error is re-raised.
    ``async for attempt in http_retry(...): with attempt: ...``."""
    stop = stop_after_attempt(max(1, attempts))
    if within_s is not None:
        stop = stop & stop_after_delay(within_s)  # type: ignore[assignment]
    return AsyncRetrying(stop=stop, wait=_Wait(backoff_s, max_backoff_s),
                         retry=retry_if_exception(transient), reraise=True)


class ServiceError(RuntimeError):
    """A non-2xx answer; ``status`` and ``detail`` come from the server."""

    def __init__(self, status: int, detail: Any, url: str,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} from {url}: {detail}")
        self.status = status
        self.detail = detail
        self.url = url
        self.retry_after = retry_after


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
        patience_s: float | None = None,
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
        """Attempts per call (1 = no retry)."""
        self.patience_s = patience_s
        """With it, a call retries a server that does not answer (or answers 502 / 503 / 504)
        for this many seconds, with backoff up to ``MAX_PATIENT_BACKOFF_S`` between tries: a
        worker waits out a master restart instead of failing its episode."""

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
        patient = self.patience_s is not None
        async for attempt in http_retry(
                self.retries, _transient, within_s=self.patience_s,
                max_backoff_s=MAX_PATIENT_BACKOFF_S if patient else 2.0):
            with attempt:
                resp = await self.http.request(method, path, json=payload, params=params, **kw)
                if resp.status_code >= 400:
                    try:
                        data = resp.json()
                    except ValueError:
                        data = None
                    detail = data.get("detail", data) if isinstance(data, dict) else resp.text
                    raise ServiceError(resp.status_code, detail, str(resp.request.url),
                                       retry_after(resp))
        return resp

    async def request(self, method: str, path: str, body: BaseModel | dict[str, Any] | None,
                      model: type[M], **kw: Any) -> M:
        resp = await self.send(method, path, body, **kw)
        return model.model_validate_json(resp.content)
