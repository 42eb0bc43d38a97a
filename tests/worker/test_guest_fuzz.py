"""The guest agent's OpenAPI surface, fuzzed on a real desktop (Xvfb, openbox, the agent):
schema-valid and schema-violating requests; no 5xx, only documented statuses, content types
and bodies. Routes that read are fuzzed with the agent's token and without; routes that run
commands, write files or act on the desktop are fuzzed without a token only (each must refuse
with 401 before looking at the body): random commands and paths must not run as root on the
test machine. Their behaviour with the token has table tests in test_guest_agent.py."""

from __future__ import annotations

import httpx
import pytest

from tests.fuzz.harness import FuzzTarget, fuzz_operation, operation_labels
from worker.providers.local import LocalDesktop

READ_ONLY = frozenset({
    "GET /screenshot", "GET /screen_size", "GET /cursor_position", "GET /platform",
    "GET /accessibility", "GET /coda/windows", "GET /coda/popups", "GET /health", "GET /read",
    "POST /file", "POST /desktop_path", "POST /list_directory", "POST /screen_size",
})


def _target(desktop: LocalDesktop) -> FuzzTarget:
    assert desktop.guest is not None
    url = desktop.guest.base_url
    openapi = httpx.get(f"{url}/openapi.json", timeout=10,
                        headers={"Authorization": f"Bearer {desktop.token}"}).json()
    return FuzzTarget(base_url=url, openapi=openapi,
                      auth={"agent": {"Authorization": f"Bearer {desktop.token}"},
                            "anonymous": {}},
                      seeds={"path": ["/tmp", str(desktop.home / "atelier")]})


def test_every_route_is_in_the_openapi_document(desktop: LocalDesktop) -> None:
    labels = set(operation_labels(_target(desktop).openapi))
    assert {"GET /screenshot", "POST /execute", "POST /coda/act", "POST /setup/launch"} <= labels


def test_no_server_error_and_responses_as_documented(desktop: LocalDesktop) -> None:
    target = _target(desktop)
    failures = []
    for label in operation_labels(target.openapi):
        if label not in READ_ONLY:  # commands, writes, actions: only without a token
            failures += fuzz_operation(FuzzTarget(
                base_url=target.base_url, openapi=target.openapi,
                auth={"anonymous": {}}, max_examples=6), label)
        else:
            failures += fuzz_operation(target, label)
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(
        str(f) for f in failures[:8])


@pytest.fixture(autouse=True)
def _fresh(desktop: LocalDesktop) -> None:
    desktop.reset()
