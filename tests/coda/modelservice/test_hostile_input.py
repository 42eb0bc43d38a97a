"""The three model services under hostile input, one table per class of the issue: a clear
4xx naming the field, never a 500; the same rule on every service. Real processes, real HTTP,
the tiny model."""

from __future__ import annotations

import base64
import json
import random
import shutil
import string
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.coda.test_imagerefs import png_header_only
from tests.fixtures.images import image_b64, image_bytes
from tests.fixtures.services import RunningService

Body = dict[str, Any]
SMALL = {"max_tokens": 2, "seed": 1}


def plan_body(shot: Body) -> Body:
    return {"instruction": "Plot sin(x)", "screenshot": shot, "sampling": dict(SMALL)}


def act_body(shot: Body) -> Body:
    return {"instruction": "Save it", "thought": "Click File.", "screenshot": shot,
            "sampling": dict(SMALL)}


def batch_body(shot: Body) -> Body:
    return {"instruction": "Save it", "thoughts": ["Click File.", "Press ctrl s."],
            "screenshot": shot, "sampling": dict(SMALL)}


def judge_body(shot: Body) -> Body:
    return {"instruction": "Plot", "steps": [{"screenshot": shot, "thought": "t"}],
            "policy": {"votes": 1, "models": ["a"], "multi_resolution": False}}


def check_body(shot: Body) -> Body:
    return {"instruction": "Plot", "app": "KAlgebra", "screenshot": shot}


IMAGE_ROUTES: list[tuple[str, str, Callable[[Body], Body], tuple[Any, ...]]] = [
    ("planner", "/v1/plan", plan_body, ("screenshot",)),
    ("executor", "/v1/act", act_body, ("screenshot",)),
    ("executor", "/v1/act/batch", batch_body, ("screenshot",)),
    ("judge", "/v1/judge", judge_body, ("steps", 0, "screenshot")),
    ("judge", "/v1/instructions/check", check_body, ("screenshot",)),
]
ROUTE_IDS = [f"{r}{p}" for r, p, _, _ in IMAGE_ROUTES]


@pytest.fixture
def services(request: pytest.FixtureRequest) -> Callable[[str], RunningService]:
    """role -> its session process (started on first use)."""
    return lambda role: request.getfixturevalue(f"{role}_service")  # type: ignore[no-any-return]


async def post(svc: RunningService, path: str, body: Body | str, *,
               token: str | None = "inference") -> httpx.Response:
    async with svc.http(token=token) as http:
        if isinstance(body, str):
            return await http.post(path, content=body.encode("utf-8", "surrogatepass"),
                                   headers={"content-type": "application/json"})
        return await http.post(path, json=body)


def locs(resp: httpx.Response) -> list[list[Any]]:
    return [d["loc"] for d in resp.json()["detail"]]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- images: one rule for all five image routes ---------------------------------------------

IMAGE_CASES = [
    ("20000x20000 header", {"b64": b64(png_header_only(20_000, 20_000))}, 413, "b64"),
    ("PNG signature, no image", {"b64": b64(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)}, 422, "b64"),
    ("truncated PNG", {"b64": b64(image_bytes((300, 200))[:100])}, 422, "b64"),
    ("data URL without comma", {"b64": "data:image/png;base64"}, 422, "b64"),
    ("data URL of text", {"b64": "data:text/plain;base64,aGk="}, 422, "b64"),
    ("3000x10", {"b64": b64(image_bytes((3000, 10)))}, 422, "b64"),
    ("missing key", {"ref": f"sha256/ab/{'ab' * 32}.png"}, 422, "ref"),
    ("a URL", {"ref": "http://127.0.0.1:9/x.png"}, 422, "ref"),
    ("a path", {"ref": "/etc/passwd"}, 422, "ref"),
]


@pytest.mark.parametrize(("case", "shot", "status", "part"), IMAGE_CASES,
                         ids=[c[0] for c in IMAGE_CASES])
@pytest.mark.parametrize(("role", "path", "make", "field"), IMAGE_ROUTES, ids=ROUTE_IDS)
async def test_one_image_rule_on_every_route(services: Callable[[str], RunningService],
                                             role: str, path: str, make: Callable[[Body], Body],
                                             field: tuple[Any, ...], case: str, shot: Body,
                                             status: int, part: str) -> None:
    resp = await post(services(role), path, make(shot))
    assert resp.status_code == status, resp.text
    assert ["body", *field, part] in locs(resp)


@pytest.mark.parametrize(("role", "path", "make", "field"), IMAGE_ROUTES, ids=ROUTE_IDS)
async def test_valid_images_of_every_kind_work(services: Callable[[str], RunningService],
                                               role: str, path: str,
                                               make: Callable[[Body], Body],
                                               field: tuple[Any, ...]) -> None:
    svc = services(role)
    for shot in ({"b64": image_b64((56, 56))}, {"b64": "data:image/jpeg;base64," + image_b64(
            (60, 40), fmt="JPEG")}, {"ref": svc.store.keys["webp"]}):
        resp = await post(svc, path, make(shot))
        assert resp.status_code == 200, resp.text


# --- non-standard JSON numbers and unstorable strings ---------------------------------------

def _raw(body: Body, path: tuple[Any, ...], token: str) -> str:
    """``body`` as JSON with the value at ``path`` replaced by a raw JSON token."""
    marker = "__RAW__"
    target: Any = body
    for key in path[:-1]:
        target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
    target[path[-1]] = marker
    return json.dumps(body).replace(f'"{marker}"', token)


SHOT = {"b64": image_b64((56, 56))}
NUMBER_FIELDS = [
    ("planner", "/v1/plan", plan_body, ("sampling", "temperature")),
    ("planner", "/v1/plan", plan_body, ("sampling", "top_p")),
    ("planner", "/v1/plan", plan_body, ("sampling", "seed")),
    ("planner", "/v1/plan", plan_body, ("unknown_field",)),
    ("executor", "/v1/act/batch", batch_body, ("sampling", "temperature")),
    ("judge", "/v1/judge", judge_body, ("policy", "votes")),
    ("judge", "/v1/judge", judge_body, ("policy", "temperature")),
    ("judge", "/v1/judge", judge_body, ("policy", "low_resolution")),
]


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
@pytest.mark.parametrize(("role", "path", "make", "field"), NUMBER_FIELDS,
                         ids=[f"{r}{p}:{'.'.join(map(str, f))}" for r, p, _, f in NUMBER_FIELDS])
async def test_non_standard_numbers_are_refused(services: Callable[[str], RunningService],
                                                role: str, path: str,
                                                make: Callable[[Body], Body],
                                                field: tuple[Any, ...], token: str) -> None:
    resp = await post(services(role), path, _raw(make(dict(SHOT)), field, token))
    assert resp.status_code == 422, resp.text


async def test_non_standard_number_in_make_default(planner_service: RunningService) -> None:
    body = '{"version": "v", "uri": "adapters/x", "make_default": NaN}'
    resp = await post(planner_service, "/v1/adapters", body, token="admin")
    assert resp.status_code == 422, resp.text


STRING_FIELDS = [
    ("planner", "/v1/plan", lambda: plan_body(dict(SHOT)), ("instruction",)),
    ("planner", "/v1/plan", lambda: {**plan_body(dict(SHOT)), "history": [{"thought": "x"}]},
     ("history", 0, "thought")),
    ("planner", "/v1/plan", lambda: plan_body(dict(SHOT)), ("adapter",)),
    ("planner", "/v1/adapters", lambda: {"version": "v1", "uri": "adapters/x"}, ("uri",)),
    ("planner", "/v1/adapters", lambda: {"version": "v1", "uri": "adapters/x"}, ("version",)),
    ("executor", "/v1/act", lambda: act_body(dict(SHOT)), ("thought",)),
    ("executor", "/v1/act/batch", lambda: batch_body(dict(SHOT)), ("thoughts", 1)),
    ("judge", "/v1/judge", lambda: judge_body(dict(SHOT)), ("steps", 0, "thought")),
    ("judge", "/v1/instructions/check", lambda: check_body(dict(SHOT)), ("app",)),
]


@pytest.mark.parametrize("raw", ['"a\\ud800b"', '"a\\u0000b"', '"\\udfff"'],
                         ids=["surrogate", "nul", "low-surrogate"])
@pytest.mark.parametrize(("role", "path", "make", "field"), STRING_FIELDS,
                         ids=[f"{r}{p}:{'.'.join(map(str, f))}" for r, p, _, f in STRING_FIELDS])
async def test_unstorable_strings_are_a_422_naming_the_field(
        services: Callable[[str], RunningService], role: str, path: str,
        make: Callable[[], Body], field: tuple[Any, ...], raw: str) -> None:
    token = "admin" if path == "/v1/adapters" else "inference"
    resp = await post(services(role), path, _raw(make(), field, raw), token=token)
    assert resp.status_code == 422, resp.text
    assert ["body", *field] in locs(resp)
    resp.content.decode("ascii")  # the error itself always encodes


# --- sampling: tiny temperatures, 64-bit seeds, max_tokens by setting ------------------------

@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-5])
@pytest.mark.parametrize(("role", "path", "make"), [
    ("planner", "/v1/plan", plan_body), ("executor", "/v1/act/batch", batch_body)])
async def test_tiny_temperature_is_greedy(services: Callable[[str], RunningService], role: str,
                                          path: str, make: Callable[[Body], Body],
                                          temperature: float) -> None:
    body = make(dict(SHOT))
    body["sampling"]["temperature"] = temperature
    resp = await post(services(role), path, body)
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(("seed", "status"), [(2**64, 422), (10**30, 422), (-1, 422),
                                              (2**63 - 1, 200), (0, 200)])
@pytest.mark.parametrize(("role", "path", "make"), [
    ("planner", "/v1/plan", plan_body), ("executor", "/v1/act", act_body)])
async def test_seed_is_bounded_to_64_bits(services: Callable[[str], RunningService], role: str,
                                          path: str, make: Callable[[Body], Body], seed: int,
                                          status: int) -> None:
    body = make(dict(SHOT))
    body["sampling"]["seed"] = seed
    resp = await post(services(role), path, body)
    assert resp.status_code == status, resp.text
    if status == 422:
        assert ["body", "sampling", "seed"] in locs(resp)


@pytest.mark.parametrize("max_tokens", [65, 4097, 32_768, 32_769])
@pytest.mark.parametrize(("role", "path", "make"), [
    ("planner", "/v1/plan", plan_body), ("executor", "/v1/act", act_body)])
async def test_max_tokens_is_bounded_by_a_setting(services: Callable[[str], RunningService],
                                                  role: str, path: str,
                                                  make: Callable[[Body], Body],
                                                  max_tokens: int) -> None:
    body = make(dict(SHOT))
    body["sampling"]["max_tokens"] = max_tokens  # the session services' setting: 64
    resp = await post(services(role), path, body)
    assert resp.status_code == 422, resp.text
    assert ["body", "sampling", "max_tokens"] in locs(resp)


# --- the prompt is bounded by the model's context ------------------------------------------

def _random_text(chars: int) -> str:
    rng = random.Random(7)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(chars))


@pytest.mark.parametrize(("role", "path", "make", "field"), [
    ("planner", "/v1/plan", plan_body, ("instruction",)),
    ("executor", "/v1/act", act_body, ("instruction",)),
    ("judge", "/v1/judge", judge_body, ("instruction",)),
])
async def test_prompt_beyond_the_context_is_refused(services: Callable[[str], RunningService],
                                                    role: str, path: str,
                                                    make: Callable[[Body], Body],
                                                    field: tuple[Any, ...]) -> None:
    body = make(dict(SHOT))
    body["instruction"] = _random_text(60_000)  # within the 65,536 characters of the contract
    resp = await post(services(role), path, body)
    assert resp.status_code == 413, resp.text
    (error,) = resp.json()["detail"]
    assert error["loc"] == ["body", *field] and "context of 32768 tokens" in error["msg"]


async def test_too_long_text_fields_are_422(planner_service: RunningService) -> None:
    body = plan_body(dict(SHOT))
    body["instruction"] = "x" * 200_000
    resp = await post(planner_service, "/v1/plan", body)
    assert resp.status_code == 422 and ["body", "instruction"] in locs(resp)
    body = plan_body(dict(SHOT))
    body["history"] = [{"thought": "x"}] * 300
    resp = await post(planner_service, "/v1/plan", body)
    assert resp.status_code == 422 and ["body", "history"] in locs(resp)


# --- adapters: URIs limited, failed loads leave nothing, management needs the admin token ----

BAD_URIS = ["http://127.0.0.1:9/adapter", "https://example.org/a", "s3://bucket/adapter",
            "local:///", "local:///etc", "/", "/etc", "/tmp/../etc", "file:///etc",
            "../outside", "adapters/../../x", "adapters/./x", "a" * 1001, "adapters//x/.."]


@pytest.mark.parametrize("uri", BAD_URIS)
async def test_adapter_uri_is_the_store_or_a_root(planner_service: RunningService,
                                                  uri: str) -> None:
    before = _cache_entries(planner_service)
    resp = await post(planner_service, "/v1/adapters", {"version": "evil", "uri": uri},
                      token="admin")
    assert resp.status_code == 422, resp.text
    assert ["body", "uri"] in locs(resp)
    text = resp.text
    for secret in (str(planner_service.store.root), planner_service.settings.adapter_cache_dir):
        assert secret not in text
    assert _cache_entries(planner_service) == before


def _cache_entries(svc: RunningService) -> list[str]:
    from pathlib import Path

    cache = Path(svc.settings.adapter_cache_dir)
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


async def test_a_failed_load_leaves_nothing_in_the_cache(planner_service: RunningService) -> None:
    store = planner_service.store
    broken = store.root / "adapters" / "broken"
    shutil.copytree(store.root / store.adapter_folder, broken, dirs_exist_ok=True)
    for weights in broken.glob("adapter_model.*"):
        weights.write_bytes(b"not a safetensors file")
    before = _cache_entries(planner_service)
    for uri in ("adapters/broken", "adapters/missing", "adapters"):
        resp = await post(planner_service, "/v1/adapters", {"version": "broken", "uri": uri},
                          token="admin")
        assert resp.status_code == 422, resp.text
        assert ["body", "uri"] in locs(resp)
        assert str(store.root) not in resp.text
    assert _cache_entries(planner_service) == before
    async with planner_service.http() as http:
        listing = (await http.get("/v1/adapters")).json()["items"]
    assert [a["version"] for a in listing] == ["base"]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/adapters", {"version": "v9", "uri": "adapters/tiny-lora"}),
    ("DELETE", "/v1/adapters/v9", None),
])
async def test_adapter_management_needs_the_admin_token(planner_service: RunningService,
                                                        method: str, path: str,
                                                        body: Body | None) -> None:
    for token, status in ((None, 401), ("inference", 403), ("not-a-token-at-all", 401)):
        async with planner_service.http(token=token) as http:
            resp = await http.request(method, path, json=body)
        assert resp.status_code == status, (token, resp.text)
    async with planner_service.http() as http:
        assert (await http.get("/v1/adapters")).status_code == 200


@pytest.mark.parametrize(("role", "path"), [(r, p) for r, p, _, _ in IMAGE_ROUTES],
                         ids=ROUTE_IDS)
@pytest.mark.parametrize("body", ["{not json", '{"a": NaN}', "x" * 100_000])
async def test_model_routes_need_a_token_before_any_body(
        services: Callable[[str], RunningService], role: str, path: str, body: str) -> None:
    svc = services(role)
    for token in (None, "wrong-token-0123456789"):
        resp = await post(svc, path, body, token=token)
        assert resp.status_code == 401, resp.text


# --- what the OpenAPI documents says --------------------------------------------------------

@pytest.mark.parametrize(("role", "path", "method", "codes"), [
    ("planner", "/v1/plan", "post", {401, 403, 404, 408, 413, 422, 500, 502, 503, 504}),
    ("planner", "/v1/adapters", "post", {401, 403, 409, 413, 422, 502, 503}),
    ("planner", "/v1/adapters/{version}", "delete", {401, 403, 404, 422, 503}),
    ("executor", "/v1/act", "post", {401, 408, 413, 422, 500, 502, 503, 504}),
    ("executor", "/v1/act/batch", "post", {401, 413, 422, 502, 503}),
    ("judge", "/v1/judge", "post", {401, 413, 422, 502, 503, 504}),
    ("judge", "/v1/instructions/check", "post", {401, 413, 422, 502, 503}),
])
async def test_openapi_documents_the_codes(services: Callable[[str], RunningService], role: str,
                                           path: str, method: str, codes: set[int]) -> None:
    async with services(role).http(token=None) as http:
        spec = (await http.get("/openapi.json")).json()
    documented = {int(c) for c in spec["paths"][path][method]["responses"] if c.isdigit()}
    assert codes <= documented, codes - documented
    assert spec["info"]["version"] == __import__("coda").__version__
