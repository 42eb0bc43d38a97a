"""The configuration reference (``docs/configuration.md``), generated from the settings classes
so it cannot drift: ``python -m coda_app.configdoc > docs/configuration.md`` (CI checks that the
committed file equals this output)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[1]

SECTIONS: list[tuple[str, str, str]] = [
    ("master.settings", "MasterSettings", "Master (`coda master`, `coda up`)"),
    ("worker.settings", "WorkerSettings", "Worker (`coda worker`)"),
    ("planner_service.settings", "PlannerSettings", "Planner service (`coda planner`)"),
    ("executor_service.settings", "ExecutorSettings", "Executor service (`coda executor`)"),
    ("judge_service.settings", "JudgeSettings", "Judge service (`coda judge`)"),
    ("trainer.config", "TrainerConfig", "Trainer (`coda trainer`)"),
    ("coda_app.learning.settings", "LearnSettings", "The closed loop (`coda learn`)"),
]

HEADER = """# Configuration reference

Generated from the settings classes by `python -m coda_app.configdoc > docs/configuration.md`;
CI fails when this file is not current. Every setting is an environment variable (the name
below); command-line flags override them where a command has one. Lists are comma-separated
or JSON, objects JSON. Secrets are never printed back.
"""


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        if getattr(field.default_factory, "__name__", "") == "gethostname":
            return "(this host's name)"
        try:
            value: Any = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Path) and value.is_absolute() and value.is_relative_to(ROOT):
        value = value.relative_to(ROOT)  # a file of the checkout: the same on every clone
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, list) and value and isinstance(value[0], Enum):
        value = [v.value for v in value]
    if isinstance(value, list) and value and isinstance(value[0], SecretStr):
        return "(secret)"
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return f"`{text}`" if text else "`\"\"`"


def _type(field: FieldInfo) -> str:
    ann = field.annotation
    name = getattr(ann, "__name__", None) or str(ann)
    return name.replace("typing.", "").replace("pydantic.types.", "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section(cls: type[BaseSettings], title: str) -> str:
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    lines = [f"## {title}", "", f"`{cls.__module__}.{cls.__name__}`; variables `{prefix}*`.",
             "", "| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        env = f"{prefix}{name.upper()}"
        choices = getattr(alias, "choices", None)
        if choices:
            env = " / ".join(str(c) for c in choices)
        lines.append(f"| `{env}` | {_cell(_type(field))} | {_cell(_default(field))} | "
                     f"{_cell(field.description or '')} |")
    return "\n".join(lines) + "\n"


def render() -> str:
    import importlib

    parts = [HEADER]
    for module, name, title in SECTIONS:
        cls = getattr(importlib.import_module(module), name)
        parts.append(section(cls, title))
    return "\n".join(parts)


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
