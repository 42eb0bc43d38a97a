"""No server-side request forgery: with the optional remote-store packages (aiohttp, s3fs)
installed, a screenshot ref or an adapter uri never makes a service contact a URL of the
request's choosing; a remote artifact store is reached only under its configured base URL,
without following redirects. A local HTTP server records every request it gets."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from coda.artifacts import ArtifactStore
from planner_service.app import create_app
from tests.fixtures.images import image_bytes
from tests.fixtures.services import TOKENS, RunningService, asgi_client

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Recorder:
    """A real HTTP server on a free port; ``answers`` path -> (status, headers, body)."""

    url: str = ""
    hits: list[tuple[str, str]] = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)
    delay_s: float = 0.0


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield from _serve()


@pytest.fixture
def other_recorder() -> Iterator[Recorder]:
    yield from _serve()


def _serve() -> Iterator[Recorder]:
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            rec.hits.append((self.command, self.path))
            if rec.delay_s:
                time.sleep(rec.delay_s)
            status, headers, body = rec.answers.get(self.path, (404, {}, b"not found"))
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


def test_the_remote_store_packages_are_installed() -> None:
    import aiohttp
    import s3fs

    assert aiohttp.__version__ and s3fs.__version__


REF_URLS = ["{url}/shot.png", "{url}/sha256/ab/" + "ab" * 32 + ".png", "s3://bucket/x.png",
            "gs://bucket/x.png", "memory://x.png", "file:///etc/passwd", "/etc/passwd"]
ROUTES = [("planner", "/v1/plan", lambda s: {"instruction": "x", "screenshot": s}),
          ("executor", "/v1/act", lambda s: {"instruction": "x", "thought": "t",
                                              "screenshot": s}),
          ("judge", "/v1/judge", lambda s: {"instruction": "x", "steps": [{"screenshot": s}]})]


@pytest.mark.parametrize(("role", "path", "make"), ROUTES, ids=[r for r, _, _ in ROUTES])
async def test_urls_given_as_refs_are_never_fetched(
        request: pytest.FixtureRequest, recorder: Recorder, role: str, path: str,
        make: Callable[[dict[str, str]], dict[str, Any]]) -> None:
    svc: RunningService = request.getfixturevalue(f"{role}_service")
    recorder.answers["/shot.png"] = (200, {"Content-Type": "image/png"}, image_bytes())
    async with svc.http() as http:
        for ref in REF_URLS:
            resp = await http.post(path, json=make({"ref": ref.format(url=recorder.url)}))
            assert resp.status_code == 422, resp.text
            assert resp.json()["detail"][0]["loc"][-1] == "ref"
    assert recorder.hits == []


@pytest.mark.parametrize("uri", ["{url}/adapter", "s3://bucket/adapter", "local:///",
                                 "memory://adapter", "{url}"])
async def test_adapter_uris_are_never_fetched(planner_service: RunningService,
                                              recorder: Recorder, uri: str) -> None:
    async with planner_service.http(token="admin") as http:
        resp = await http.post("/v1/adapters", json={"version": "ssrf",
                                                     "uri": uri.format(url=recorder.url)})
    assert resp.status_code == 422, resp.text
    assert recorder.hits == []


@pytest.fixture
async def http_store_planner(recorder: Recorder, tiny_backend: Any, tmp_path: Path,
                             ) -> AsyncIterator[httpx.AsyncClient]:
    """A planner whose artifact store is ``<recorder>/store`` (through aiohttp)."""
    settings = _settings(f"{recorder.url}/store", tmp_path, artifact_timeout_s=1.0)
    async with asgi_client(create_app(settings, backend=tiny_backend)) as http:
        yield http


def _settings(artifacts_url: str, work: Path, **over: Any) -> Any:
    from planner_service.settings import PlannerSettings

    return PlannerSettings(model="unused", artifacts_url=artifacts_url,
                           adapter_cache_dir=str(work / "cache"), **TOKENS.env(), **over)


def _key(data: bytes) -> str:
    return ArtifactStore("memory://coda-keys").put(data, "image/png")


async def test_a_remote_store_is_reached_under_its_base_url_only(
        http_store_planner: httpx.AsyncClient, recorder: Recorder,
        other_recorder: Recorder) -> None:
    shot = image_bytes((56, 56))
    key = _key(shot)
    recorder.answers[f"/store/{key}"] = (200, {"Content-Type": "image/png"}, shot)
    body = {"instruction": "x", "screenshot": {"ref": key}, "sampling": {"max_tokens": 2}}
    resp = await http_store_planner.post("/v1/plan", json=body)
    assert resp.status_code == 200, resp.text
    assert recorder.hits and all(p == f"/store/{key}" for _, p in recorder.hits)

    # a redirect away from the store is not followed
    moved = _key(image_bytes((57, 56)))
    other_recorder.answers["/x.png"] = (200, {"Content-Type": "image/png"}, shot)
    recorder.answers[f"/store/{moved}"] = (302, {"Location": f"{other_recorder.url}/x.png"},
                                           b"")
    body["screenshot"] = {"ref": moved}
    resp = await http_store_planner.post("/v1/plan", json=body)
    assert resp.status_code == 422, resp.text
    assert other_recorder.hits == []
    assert recorder.url not in resp.text  # the store's URL is not revealed

    # a key the store does not have
    body["screenshot"] = {"ref": _key(image_bytes((58, 56)))}
    resp = await http_store_planner.post("/v1/plan", json=body)
    assert resp.status_code == 422 and "no artifact with this key" in resp.text


async def test_a_slow_remote_store_is_a_502_not_a_stall(http_store_planner: httpx.AsyncClient,
                                                        recorder: Recorder) -> None:
    shot = image_bytes((56, 56))
    key = _key(shot)
    recorder.answers[f"/store/{key}"] = (200, {"Content-Type": "image/png"}, shot)
    recorder.delay_s = 3.0  # the store read times out after artifact_timeout_s = 1
    body = {"instruction": "x", "screenshot": {"ref": key}, "sampling": {"max_tokens": 2}}
    resp = await http_store_planner.post("/v1/plan", json=body)
    assert resp.status_code == 502, resp.text
    assert "artifact store could not be read" in resp.text and recorder.url not in resp.text
    recorder.delay_s = 0.0
    assert (await http_store_planner.get("/readyz")).status_code == 200


async def test_an_s3_store_is_reached_under_its_bucket_only(
        recorder: Recorder, tiny_backend: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """s3fs (botocore) pointed at the recording server: only the configured bucket/prefix."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", recorder.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    settings = _settings("s3://screens/run-1", tmp_path, artifact_timeout_s=2.0)
    key = _key(image_bytes((56, 56)))
    async with asgi_client(create_app(settings, backend=tiny_backend)) as http:
        resp = await http.post("/v1/plan", json={"instruction": "x",
                                                 "screenshot": {"ref": key}})
        for ref in ("s3://elsewhere/x.png", f"{recorder.url}/x.png"):
            bad = await http.post("/v1/plan", json={"instruction": "x",
                                                    "screenshot": {"ref": ref}})
            assert bad.status_code == 422
    assert resp.status_code == 422, resp.text  # the store answers 404: no such artifact
    assert recorder.hits, "the configured S3 endpoint was asked"
    assert all(path.startswith("/screens/run-1/sha256/") or path.startswith("/screens?")
               or path.startswith("/screens/?") for _, path in recorder.hits), recorder.hits
