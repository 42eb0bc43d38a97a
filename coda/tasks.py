"""Task specifications, loaded from ScienceBoard or OSWorld task JSON without losing fields.

ScienceBoard (``type, sort, steps, instruction, version, snapshot, initialize, evaluate, ans``)
and OSWorld (``id, snapshot, instruction, config, evaluator, related_apps``) files both map to
one :class:`TaskSpec`. The original document is kept in ``source.raw`` so a task can be written
back exactly (:meth:`TaskSpec.to_native`).
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_STEP_BUDGET = 15


class TaskFormat(StrEnum):
    SCIENCEBOARD = "scienceboard"
    OSWORLD = "osworld"
    CODA = "coda"


class SetupStep(BaseModel):
    """One environment preparation step (ScienceBoard ``initialize`` item / OSWorld ``config``)."""

    model_config = ConfigDict(extra="allow")
    func: str = Field(min_length=1, description="launch, execute, open, download, tab, ...")
    wait: float | None = Field(default=None, ge=0, description="seconds to wait afterwards")


class EvaluatorSpec(BaseModel):
    """One check of the final state (ScienceBoard ``evaluate`` item / OSWorld ``evaluator``)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1, description="stop, eqn, val, file, states, osworld, ...")


class TaskSource(BaseModel):
    format: TaskFormat = TaskFormat.CODA
    path: str | None = None
    raw: dict[str, Any] | None = Field(default=None, description="the original document")


class TaskSpec(BaseModel):
    """What an episode must accomplish and how it is set up and checked."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    app: str = Field(min_length=1, max_length=100, description="application, e.g. KAlgebra")
    instruction: str = Field(min_length=1)
    step_budget: int = Field(default=DEFAULT_STEP_BUDGET, ge=1, le=1000)
    setup: list[SetupStep] = Field(default_factory=list)
    evaluators: list[EvaluatorSpec] = Field(default_factory=list)
    reference_answer: str | None = None
    snapshot: str | None = None
    penalty: str | None = Field(default=None, description="ScienceBoard 'k:n' penalty")
    related_apps: list[str] = Field(default_factory=list)
    source: TaskSource = Field(default_factory=TaskSource)

    @field_validator("instruction")
    @classmethod
    def _strip(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("instruction is blank")
        return v

    @property
    def content_hash(self) -> str:
        """Stable digest of what defines the task (not where it came from)."""
        body = self.model_dump(mode="json", exclude={"source", "id"})
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    def to_native(self) -> dict[str, Any]:
        """The task in its original format (the stored original when there is one)."""
        if self.source.raw is not None:
            return self.source.raw
        return self.model_dump(mode="json", exclude={"source"})


class TaskLoadError(ValueError):
    """A task document that cannot be understood; the message names the file and field."""


def from_scienceboard(doc: dict[str, Any], *, task_id: str, path: str | None = None) -> TaskSpec:
    """Map a ScienceBoard task document (``VM/<App>/<ID>.json``)."""
    for required in ("type", "instruction"):
        if required not in doc:
            raise TaskLoadError(f"{path or task_id}: field '{required}' is missing")
    ans = doc.get("ans")
    return TaskSpec(
        id=task_id,
        app=str(doc["type"]),
        instruction=doc["instruction"],
        step_budget=int(doc.get("steps", DEFAULT_STEP_BUDGET)),
        setup=[SetupStep.model_validate(s) for s in doc.get("initialize", [])],
        evaluators=[EvaluatorSpec.model_validate(e) for e in doc.get("evaluate", [])],
        reference_answer=None if ans is None else str(ans),
        snapshot=doc.get("snapshot"),
        penalty=doc.get("penalty"),
        source=TaskSource(format=TaskFormat.SCIENCEBOARD, path=path, raw=doc),
    )


def from_osworld(
    doc: dict[str, Any], *, path: str | None = None, app: str | None = None
) -> TaskSpec:
    """Map an OSWorld task document (``evaluation_examples/examples/<app>/<uuid>.json``)."""
    for required in ("id", "instruction"):
        if required not in doc:
            raise TaskLoadError(f"{path or '<osworld task>'}: field '{required}' is missing")
    related = [str(a) for a in doc.get("related_apps", [])]
    setup = []
    for item in doc.get("config", []):
        params = dict(item.get("parameters", {}))
        setup.append(SetupStep.model_validate({"func": item.get("type", ""), **params}))
    evaluator = doc.get("evaluator")
    evaluators = []
    if isinstance(evaluator, dict):
        evaluators.append(EvaluatorSpec.model_validate({"type": "osworld", **evaluator}))
    return TaskSpec(
        id=str(doc["id"]),
        app=app or (related[0] if related else "desktop"),
        instruction=doc["instruction"],
        setup=setup,
        evaluators=evaluators,
        snapshot=doc.get("snapshot"),
        related_apps=related,
        source=TaskSource(format=TaskFormat.OSWORLD, path=path, raw=doc),
    )


def detect_format(doc: dict[str, Any]) -> TaskFormat:
    if "initialize" in doc or ("type" in doc and "sort" in doc):
        return TaskFormat.SCIENCEBOARD
    if "config" in doc or "evaluator" in doc:
        return TaskFormat.OSWORLD
    return TaskFormat.CODA


def parse_task(
    doc: dict[str, Any], *, path: str | None = None, task_id: str | None = None
) -> TaskSpec:
    """Any supported task document -> :class:`TaskSpec`."""
    if not isinstance(doc, dict):
        raise TaskLoadError(f"{path or '<task>'}: a task must be a JSON object")
    fmt = detect_format(doc)
    try:
        if fmt is TaskFormat.SCIENCEBOARD:
            tid = task_id or doc.get("id") or _sb_id(path, doc)
            return from_scienceboard(doc, task_id=tid, path=path)
        if fmt is TaskFormat.OSWORLD:
            return from_osworld(doc, path=path)
        return TaskSpec.model_validate(doc)
    except ValidationError as exc:
        where = path or "<task>"
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise TaskLoadError(f"{where}: field '{field}': {first['msg']}") from exc


def _sb_id(path: str | None, doc: dict[str, Any]) -> str:
    if path:
        p = Path(path)
        return f"{p.parent.name or doc.get('type', 'task')}/{p.stem}"
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
    return f"{doc.get('type', 'task')}/{digest}"


def load_task_file(path: str | Path) -> TaskSpec:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskLoadError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    return parse_task(doc, path=str(p))


def load_tasks(path: str | Path) -> list[TaskSpec]:
    """A task file, a JSONL file of tasks, or a directory searched recursively for ``*.json``."""
    p = Path(path)
    if not p.exists():
        raise TaskLoadError(f"{p}: no such file or directory")
    if p.is_dir():
        return [load_task_file(f) for f in sorted(p.rglob("*.json"))]
    if p.suffix == ".jsonl":
        tasks = []
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskLoadError(f"{p}:{n}: not valid JSON ({exc.msg})") from exc
                tasks.append(parse_task(doc, path=f"{p}:{n}"))
        return tasks
    return [load_task_file(p)]
