"""One error mapping: each domain error class -> its status and body, always encodable."""

from __future__ import annotations

import json

import pytest

from coda.imagerefs import ArtifactStoreUnavailable, ImageRefError
from coda.inference.base import (
    AdapterInvalid,
    AdapterNotFound,
    BackendError,
    BackendRejected,
    PromptTooLong,
)
from coda.modelservice.errors import MAPPED, Conflict, NotFound, Unavailable, answer


@pytest.mark.parametrize(("exc", "status", "loc"), [
    (ImageRefError(("screenshot", "b64"), "not a PNG"), 422, ["body", "screenshot", "b64"]),
    (ImageRefError(("steps", 2, "screenshot", "ref"), "too big", status=413), 413,
     ["body", "steps", 2, "screenshot", "ref"]),
    (PromptTooLong(40_000, 8, 32_768), 413, ["body"]),
    (AdapterNotFound("no adapter_config.json"), 422, ["body", "uri"]),
    (AdapterInvalid("shape mismatch"), 422, ["body", "uri"]),
    (BackendRejected("HTTP 400: too long", 400), 422, ["body"]),
    (NotFound("adapter 'x' is not loaded"), 404, None),
    (Conflict("already loaded"), 409, None),
    (Unavailable("model loading"), 503, None),
    (BackendError("connection refused"), 502, None),
    (ArtifactStoreUnavailable("the artifact store could not be read (TimeoutError)"), 502, None),
])
def test_domain_errors_map_to_their_status(exc: Exception, status: int,
                                           loc: list[object] | None) -> None:
    assert isinstance(exc, MAPPED)
    response = answer(exc)
    assert response is not None and response.status_code == status
    body = json.loads(bytes(response.body).decode("ascii"))
    if loc is None:
        assert isinstance(body["detail"], str) and body["detail"]
    else:
        assert body["detail"][0]["loc"] == loc and body["detail"][0]["msg"]
    if status == 503:
        assert response.headers["retry-after"] == "5"


def test_other_exceptions_are_not_mapped() -> None:
    assert answer(RuntimeError("a bug")) is None
    assert answer(KeyError("k")) is None


def test_unencodable_text_in_a_message_still_encodes() -> None:
    response = answer(NotFound("adapter 'a\ud800' is not loaded"))
    assert response is not None
    bytes(response.body).decode("ascii")
