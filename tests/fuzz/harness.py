"""Property-based fuzzing of a running CODA service over its OpenAPI document (schemathesis).

Reusable by any service's fuzz test: give :func:`fuzz_operation` a :class:`FuzzTarget` (the
running app's base URL, its OpenAPI document, the auth headers of each role, the real
resources seeded on it) and an operation label (``"POST /v1/jobs/lease"``). For every
generated request (schema-valid ones and schema-violating ones), a role is drawn (anonymous
included), and path parameters and top-level body fields named in ``seeds`` are, half of the
time, replaced by a real value (a registered worker, a live lease token), so the request
reaches past the 404s into the code that stores things. Each response must pass the checks:
no 5xx, the status code and content type documented for the operation, the body valid
against the documented schema. Failures are collected (no shrinking: bounded time) and
returned with a curl line that reproduces each.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
EXAMPLES_ENV = "CODA_FUZZ_EXAMPLES"
DEFAULT_EXAMPLES = 12


@dataclass
class FuzzTarget:
    """A running service to fuzz.

    ``auth``: role name -> headers (``{}`` for an anonymous caller).
    ``seeds``: a path parameter or top-level JSON body field -> real values for it.
    ``skip``: operation labels not to fuzz (say why where the set is built).
    """

    base_url: str
    openapi: dict[str, Any]
    auth: Mapping[str, Mapping[str, str]]
    seeds: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    max_examples: int = field(default_factory=lambda: int(
        os.environ.get(EXAMPLES_ENV, DEFAULT_EXAMPLES)))


@dataclass
class Failure:
    operation: str
    role: str
    mode: str
    status: int | None
    error: str
    curl: str

    def __str__(self) -> str:
        return (f"{self.operation} [{self.mode}, as {self.role}] -> {self.status}: "
                f"{self.error.strip()[:1500]}\n  reproduce: {self.curl[:1500]}")


def operation_labels(openapi: dict[str, Any]) -> list[str]:
    """``"METHOD /path"`` of every operation in an OpenAPI document."""
    methods = {"get", "put", "post", "delete", "patch"}
    return [f"{m.upper()} {path}" for path, item in openapi.get("paths", {}).items()
            for m in item if m in methods]


def _schema(target: FuzzTarget) -> Any:
    return schemathesis.openapi.from_dict(target.openapi)


def _seeded(case: Any, seeds: Mapping[str, Sequence[Any]], draw: Any) -> None:
    """Replace path parameters and top-level body fields by seeded values, each by chance."""
    for name, values in seeds.items():
        if name in case.path_parameters and draw(st.booleans()):
            case.path_parameters[name] = draw(st.sampled_from(list(values)))
        if isinstance(case.body, dict) and name in case.body and draw(st.booleans()):
            case.body[name] = draw(st.sampled_from(list(values)))


def fuzz_operation(target: FuzzTarget, label: str) -> list[Failure]:
    """Fuzz one operation in both generation modes; the failures found (empty: it held)."""
    operation = _schema(target).find_operation_by_label(label)
    if operation is None:
        raise LookupError(f"{label} is not in the OpenAPI document")
    failures: list[Failure] = []
    with requests.Session() as session:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            with contextlib.suppress(Unsatisfiable):  # nothing here can be made invalid
                _run(target, operation, label, mode, session, failures)
    return failures


def _run(target: FuzzTarget, operation: Any, label: str, mode: GenerationMode,
         session: requests.Session, failures: list[Failure]) -> None:
    @settings(max_examples=target.max_examples, deadline=None, database=None,
              derandomize=True, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode),
           role=st.sampled_from(sorted(target.auth)), data=st.data())
    def run(case: Any, role: str, data: st.DataObject) -> None:
        _seeded(case, target.seeds, data.draw)
        headers = {k: v for k, v in (case.headers or {}).items()
                   if k.lower() != "authorization"}
        headers.update(target.auth[role])
        case.headers = headers
        status = None
        try:
            response = case.call(base_url=target.base_url, session=session, timeout=60)
            status = response.status_code
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - each failure is recorded
            failures.append(Failure(operation=label, role=role, mode=mode.value, status=status,
                                    error=f"{type(exc).__name__}: {exc}",
                                    curl=curl_of(case, target.base_url)))

    run()


def curl_of(case: Any, base_url: str) -> str:
    """A curl line that sends ``case`` again."""
    try:
        return str(case.as_curl_command(base_url=base_url))
    except Exception as exc:  # noqa: BLE001 - a case that cannot even be written as curl
        return f"<no curl: {exc}>"
