"""The load generator's HTTP clients: a raw keep-alive HTTP/1.1 connection on asyncio streams
(little client CPU) and an httpx one, behind one ``post``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx


class ClientError(Exception):
    """A request did not get an HTTP response (connection or timeout)."""


class RawHttp:
    """One keep-alive HTTP/1.1 connection (asyncio streams): a slot's own connection, with a
    fraction of a general client's CPU cost so the generator does not become the bottleneck."""

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        parts = httpx.URL(url)
        self.host, self.port = parts.host, parts.port or 80
        self.head = (f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\n").encode()
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes, str | None]:
        """Status, body and the ``Retry-After`` header (None without one)."""
        data = json.dumps(body).encode()
        request = b"".join((f"POST {path} HTTP/1.1\r\n".encode(), self.head,
                            f"Content-Length: {len(data)}\r\n\r\n".encode(), data))
        try:
            return await asyncio.wait_for(self._exchange(request), self.timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            await self.aclose()
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc

    async def _exchange(self, request: bytes) -> tuple[int, bytes, str | None]:
        if self.writer is None or self.writer.is_closing() or (
                self.reader is not None and self.reader.at_eof()):
            await self.aclose()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None and self.writer is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        if "content-length" in headers:
            payload = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            payload = await self._chunked()
        else:
            payload = b""
        if headers.get("connection") == "close":
            await self.aclose()
        return status, payload, headers.get("retry-after")

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        out: list[bytes] = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return b"".join(out)
            out.append(chunk[:-2])

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):  # the master closed it first
                await self.writer.wait_closed()
        self.reader = self.writer = None


class HttpxHttp:
    """The same interface over ``httpx.AsyncClient`` (one client per slot: a pool of many
    connections costs httpx a scan of all of them per request)."""

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=timeout_s,
                                        headers={"Authorization": f"Bearer {token}"})

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes, str | None]:
        try:
            resp = await self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc
        return resp.status_code, resp.content, resp.headers.get("retry-after")

    async def aclose(self) -> None:
        await self.client.aclose()
