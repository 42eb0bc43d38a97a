"""Helpers for stateful fuzzing over an OpenAPI document (schemathesis + Hypothesis).

* :func:`component_strategies`: request bodies drawn from the document's own component schemas
  (``#/components/schemas/<Name>``), schema-valid or schema-violating, by schemathesis: a
  fuzzer can then write a typed part of a request (a step, a job result, a group) while the
  test fills in what makes the request reach the code behind it (a real lease token, the kind
  of the leased job).
* :func:`splice`: put real values (ids of things the service holds) into a drawn body, at any
  depth, each by chance, so a nested ``episode_id`` names an episode that exists.
* :class:`Exchange`: one request and its answer, checked as the per-operation fuzzer checks
  them (no 5xx, status code, content type and body as documented), with a curl line.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.fuzz.harness import CHECKS, curl_of

COMPONENT_PATH = "/__components__/{name}"


def component_strategies(openapi: dict[str, Any], names: Sequence[str],
                         mode: GenerationMode = GenerationMode.POSITIVE,
                         ) -> dict[str, st.SearchStrategy[Any]]:
    """name -> a strategy of JSON values for ``#/components/schemas/<name>`` (each schema made
    the body of an operation of a derived document, so schemathesis generates it)."""
    doc = copy.deepcopy(openapi)
    doc["paths"] = {COMPONENT_PATH.format(name=n): {"post": {
        "operationId": f"component_{n}", "responses": {"200": {"description": "ok"}},
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{n}"}}}}}} for n in names}
    schema = schemathesis.openapi.from_dict(doc)
    out = {}
    for n in names:
        operation = schema.find_operation_by_label(f"POST {COMPONENT_PATH.format(name=n)}")
        assert operation is not None, n
        out[n] = operation.as_strategy(generation_mode=mode).map(lambda case: case.body)
    return out


Draw = Callable[[st.SearchStrategy[Any]], Any]


def splice(value: Any, seeds: Mapping[str, Sequence[Any]], draw: Draw,
           always: frozenset[str] = frozenset()) -> Any:
    """``value`` with every scalar member named in ``seeds`` (at any depth), half of the
    time (those named in ``always``: every time), replaced by one of its seeded values (real
    ids, keys)."""
    if isinstance(value, list):
        return [splice(v, seeds, draw, always) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        choices = seeds.get(key)
        if choices and not isinstance(item, dict | list) and (
                key in always or draw(st.booleans())):
            out[key] = draw(st.sampled_from(list(choices)))
        else:
            out[key] = splice(item, seeds, draw, always)
    return out


@dataclass
class Exchange:
    """One request and its answer."""

    label: str
    status: int | None
    body: Any
    curl: str
    problem: str | None

    def __str__(self) -> str:
        answer = json.dumps(self.body)[:500] if self.body is not None else ""
        return (f"{self.label} -> {self.status}: {self.problem or 'ok'} {answer}\n"
                f"  {self.curl[:1500]}")


def exchange(schema: Any, session: requests.Session, base_url: str, label: str, *,
             headers: Mapping[str, str], path_parameters: dict[str, Any] | None = None,
             query: dict[str, Any] | None = None, body: Any = None) -> Exchange:
    """Send one request of operation ``label`` and check the answer as documented."""
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    kw: dict[str, Any] = {"path_parameters": path_parameters, "query": query,
                          "headers": dict(headers)}
    if body is not None:
        kw["body"], kw["media_type"] = body, "application/json"
    return send(operation.Case(**kw), label, session, base_url)


def send(case: Any, label: str, session: requests.Session, base_url: str) -> Exchange:
    """Send a schemathesis case and check the answer as documented."""
    status, problem, payload = None, None, None
    try:
        response = case.call(base_url=base_url, session=session, timeout=60)
        status = response.status_code
        if response.content and any("json" in v for v in response.headers.get(
                "content-type", [])):
            payload = response.json()
        case.validate_response(response, checks=CHECKS)
    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - recorded as the problem
        problem = f"{type(exc).__name__}: {exc}"[:3000]
    return Exchange(label=label, status=status, body=payload, problem=problem,
                    curl=curl_of(case, base_url))
