"""Stands in for the Docker Engine (no engine here): replays a recorded Engine API transcript
over real HTTP, so the real Docker SDK drives it. Each request must be the next recorded one
(method, path, a subset of its query and JSON body); its recorded answer is sent back. What did
not match is kept in ``mismatches`` and answered 500."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def fill(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, v in values.items():
            value = value.replace("{" + key + "}", v)
        return value
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):
        return {fill(k, values): fill(v, values) for k, v in value.items()}
    return value


def subset(expected: Any, actual: Any) -> bool:
    """Every key of ``expected`` is in ``actual`` with a matching value; lists of strings
    match as multisets (the SDK does not promise an order), other lists element by element."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return False
        if all(isinstance(x, str) for x in expected + actual):
            return sorted(expected) == sorted(actual)
        return all(subset(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


class ReplayEngine:
    def __init__(self, calls: list[dict[str, Any]], values: dict[str, str]) -> None:
        self.calls = fill(calls, values)
        self.index = 0
        self.seen: list[dict[str, Any]] = []
        self.mismatches: list[str] = []
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = engine.answer(self.command, self.path, raw)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _handle

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> ReplayEngine:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, target: str, raw: bytes) -> tuple[int, Any]:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = json.loads(raw) if raw else None
        with self._lock:
            self.seen.append({"method": method, "path": parts.path, "query": query, "body": body})
            if self.index >= len(self.calls):
                self.mismatches.append(f"{method} {target}: after the end of the transcript")
                return 500, {"message": "unexpected request"}
            want = self.calls[self.index]
            ok = (want["method"] == method and want["path"] == parts.path
                  and subset(want.get("query", {}), query)
                  and subset(want.get("body", {}), body or {}))
            if not ok:
                self.mismatches.append(f"{method} {target} {body}: expected {want['method']} "
                                       f"{want['path']} {want.get('query')} {want.get('body')}")
                return 500, {"message": "request does not match the transcript"}
            self.index += 1
            return int(want.get("status", 200)), want.get("json")
