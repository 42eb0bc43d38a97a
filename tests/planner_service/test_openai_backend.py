"""The planner service in front of a real OpenAI-compatible server (`transformers serve`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from coda.clients.planner import PlannerClient
from coda.contracts.services_api import ImageRef, PlanRequest, Sampling
from planner_service.app import create_app
from planner_service.cli import app as cli_app
from planner_service.settings import PlannerSettings
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, asgi_client


async def test_plan_through_openai_backend(transformers_serve_url: str,
                                           tiny_model_dir: Path) -> None:
    settings = PlannerSettings(backend="openai", base_url=f"{transformers_serve_url}/v1",
                               model=str(tiny_model_dir), backend_retries=0, **TOKENS.env())
    async with asgi_client(create_app(settings)) as http:
        client = PlannerClient("http://service", client=http, retries=1)
        resp = await client.plan(PlanRequest(
            instruction="Plot sin(x)", screenshot=ImageRef(b64=image_b64()), n=2,
            sampling=Sampling(max_tokens=5)))
    assert len(resp.plans) == 2
    assert {p.version for p in resp.plans} == {"base"}


def test_openai_backend_needs_a_url() -> None:
    with pytest.raises(ValidationError, match="base_url is required"):
        PlannerSettings(backend="openai", base_url=None)


def test_cli_help() -> None:
    result = CliRunner().invoke(cli_app, ["--help"])
    assert result.exit_code == 0 and "--port" in result.output
