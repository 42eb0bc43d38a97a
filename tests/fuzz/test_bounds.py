"""Every integer a request can carry is bounded in the OpenAPI document that takes it: the
master's (what it stores, a reader must be able to read back: a PostgreSQL integer, an index
cast to int, a token id in a tensor) and the model services'. A field added without a bound
fails here by name, before a fuzzer finds the 500 it leads to."""

from __future__ import annotations

from typing import Any

import pytest

from coda.bounds import INT64_MAX
from master.app import create_app
from master.settings import MasterSettings
from tests.fuzz.test_services_fuzz import ROLES, service_openapi

UNBOUNDED_BY_DESIGN = {
    # ScienceBoard's reference answer: kept as the task document gives it and read as text
    # (coda.tasks turns it into a string); no reader takes it as a number
    "POST /v1/batches BatchCreate.tasks ScienceBoardTask.ans",
}


def unbounded_integers(openapi: dict[str, Any]) -> set[str]:
    """``"METHOD /path Model.field"`` of every integer in a request body or parameter whose
    schema lacks a minimum or a maximum, or whose maximum is past a bigint."""
    components = openapi.get("components", {}).get("schemas", {})
    found: set[str] = set()

    def walk(node: Any, where: str, field: str, seen: frozenset[str]) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where, field, seen)
            return
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if name not in seen:
                walk(components[name], where, f"{field} {name}".strip(), seen | {name})
            return
        if node.get("type") == "integer" and (  # JSON numbers: a bigint's bound as a float
                "minimum" not in node or float(node.get("maximum", "inf")) > float(INT64_MAX)):
            found.add(f"{where} {field}")
        for key, value in node.items():
            if key == "properties":
                for name, prop in value.items():
                    walk(prop, where, f"{field}.{name}", seen)
            elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf",
                         "prefixItems"):
                walk(value, where, field, seen)

    for path, item in openapi.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict):
                continue
            where = f"{method.upper()} {path}"
            for content in op.get("requestBody", {}).get("content", {}).values():
                walk(content.get("schema"), where, "", frozenset())
            for param in op.get("parameters", []):
                walk(param.get("schema"), where, param["name"], frozenset())
    return found


def test_every_integer_the_master_takes_is_bounded() -> None:
    openapi = create_app(MasterSettings(dev=True), migrate=False).openapi()
    assert unbounded_integers(openapi) == UNBOUNDED_BY_DESIGN


@pytest.mark.parametrize("role", ROLES)
def test_every_integer_a_model_service_takes_is_bounded(role: str) -> None:
    assert unbounded_integers(service_openapi(role)) == set()


def test_the_check_finds_a_missing_bound() -> None:
    doc = {"paths": {"/x": {"post": {"requestBody": {"content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/M"}}}}}}},
        "components": {"schemas": {"M": {"properties": {
            "ok": {"type": "integer", "minimum": 0, "maximum": 10},
            "bad": {"type": "integer", "minimum": 0},
            "huge": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**64}]}}}}}}
    assert unbounded_integers(doc) == {"POST /x M.bad", "POST /x M.huge"}
