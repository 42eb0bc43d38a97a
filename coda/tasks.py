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
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
)

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
    instruction: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"})
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

    def to_native(self) -> dict[str, Any]:
        """The task in its original format (the stored original when there is one)."""
        if self.source.raw is not None:
            return self.source.raw
        return self.model_dump(mode="json", exclude={"source"})


class TaskLoadError(ValueError):
    """A task document that cannot be understood; the message names the file and field."""


# ---------------------------------------------------------------- raw documents as written
#
# These models check the documents as their authors write them (field names and types of the
# ScienceBoard and OSWorld releases), so a field of the wrong type is refused with its own
# name; they also give the OpenAPI document the shape of a task (see ``TaskDocument``).


def _require(*names: str, forbid_any_of: tuple[tuple[str, ...], ...] = ()) -> Any:
    """JSON-schema tweak: the schema is stricter than the parser where the format is found by
    the keys present (``detect_format``), so every document the schema admits parses."""

    def extra(schema: dict[str, Any]) -> None:
        schema["required"] = sorted({*schema.get("required", []), *names})
        if forbid_any_of:
            schema["not"] = {"anyOf": [{"required": list(keys)} for keys in forbid_any_of]}

    return extra


class ScienceBoardTask(BaseModel):
    """A ScienceBoard task document (``VM/<App>/<ID>.json``); other fields are kept."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_require("sort"))

    type: str = Field(min_length=1, max_length=100, description="application, e.g. KAlgebra")
    sort: str | None = Field(default=None, description="task category")
    instruction: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"})
    steps: int = Field(default=DEFAULT_STEP_BUDGET, ge=1, le=1000, description="step budget")
    version: str | None = None
    snapshot: str | None = None
    initialize: list[SetupStep] = Field(default_factory=list)
    evaluate: list[EvaluatorSpec] = Field(default_factory=list)
    ans: str | int | float | None = Field(default=None, description="reference answer")
    penalty: str | None = None
    id: str | None = Field(default=None, min_length=1, max_length=200,
                           description="task id (default: <App>/<file name>)")


class OSWorldConfigStep(BaseModel):
    """One OSWorld ``config`` item."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1, description="launch, execute, open, download, sleep, ...")
    parameters: dict[str, Any] = Field(default_factory=dict)


class OSWorldTask(BaseModel):
    """An OSWorld task document (``evaluation_examples/examples/<app>/<uuid>.json``)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_require(
        "config", forbid_any_of=(("initialize",), ("type", "sort"))))

    id: str = Field(min_length=1, max_length=200)
    instruction: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"})
    snapshot: str | None = None
    config: list[OSWorldConfigStep] = Field(default_factory=list)
    evaluator: dict[str, Any] | None = None
    related_apps: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list)


def _task_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("a task must be a JSON object")
    return value


TaskDocument = Annotated[dict[str, Any], PlainValidator(
    _task_object, json_schema_input_type=TaskSpec | ScienceBoardTask | OSWorldTask)]
"""A task document as an API accepts it: any JSON object here, parsed by :func:`parse_task`
(errors name the task's field); the OpenAPI schema is the union of the three formats."""


def _field_error(where: str, exc: ValidationError, prefix: tuple[Any, ...] = ()) -> TaskLoadError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in (*prefix, *first["loc"])) or "<document>"
    return TaskLoadError(f"{where}: field '{field}': {first['msg']}")


def from_scienceboard(doc: dict[str, Any], *, task_id: str | None = None,
                      path: str | None = None) -> TaskSpec:
    """Map a ScienceBoard task document (``VM/<App>/<ID>.json``)."""
    where = path or task_id or "<scienceboard task>"
    try:
        raw = ScienceBoardTask.model_validate(doc)
    except ValidationError as exc:
        raise _field_error(where, exc) from exc
    tid = task_id or raw.id or _sb_id(path, raw.type, doc)
    try:
        return TaskSpec(
            id=tid,
            app=raw.type,
            instruction=raw.instruction,
            step_budget=raw.steps,
            setup=raw.initialize,
            evaluators=raw.evaluate,
            reference_answer=None if raw.ans is None else str(raw.ans),
            snapshot=raw.snapshot,
            penalty=raw.penalty,
            source=TaskSource(format=TaskFormat.SCIENCEBOARD, path=path, raw=doc),
        )
    except ValidationError as exc:  # only the id can be wrong here (from the file name)
        raise _field_error(where, exc) from exc


def from_osworld(
    doc: dict[str, Any], *, path: str | None = None, app: str | None = None
) -> TaskSpec:
    """Map an OSWorld task document (``evaluation_examples/examples/<app>/<uuid>.json``)."""
    where = path or "<osworld task>"
    try:
        raw = OSWorldTask.model_validate(doc)
    except ValidationError as exc:
        raise _field_error(where, exc) from exc
    setup = []
    for i, item in enumerate(raw.config):
        try:
            setup.append(SetupStep.model_validate({**item.parameters, "func": item.type}))
        except ValidationError as exc:
            raise _field_error(where, exc, ("config", i, "parameters")) from exc
    evaluators = []
    if raw.evaluator is not None:
        evaluators.append(EvaluatorSpec.model_validate({**raw.evaluator, "type": "osworld"}))
    return TaskSpec(
        id=raw.id,
        app=app or (raw.related_apps[0] if raw.related_apps else "desktop"),
        instruction=raw.instruction,
        setup=setup,
        evaluators=evaluators,
        snapshot=raw.snapshot,
        related_apps=raw.related_apps,
        source=TaskSource(format=TaskFormat.OSWORLD, path=path, raw=doc),
    )


def detect_format(doc: dict[str, Any]) -> TaskFormat:
    if "initialize" in doc or ("type" in doc and "sort" in doc):
        return TaskFormat.SCIENCEBOARD
    if "config" in doc or "evaluator" in doc:
        return TaskFormat.OSWORLD
    return TaskFormat.CODA


def parse_task(
    doc: Any, *, path: str | None = None, task_id: str | None = None
) -> TaskSpec:
    """Any supported task document -> :class:`TaskSpec`; anything wrong in it is a
    :class:`TaskLoadError` naming the field."""
    where = path or "<task>"
    if not isinstance(doc, dict):
        raise TaskLoadError(f"{where}: a task must be a JSON object")
    fmt = detect_format(doc)
    if fmt is TaskFormat.SCIENCEBOARD:
        return from_scienceboard(doc, task_id=task_id, path=path)
    if fmt is TaskFormat.OSWORLD:
        return from_osworld(doc, path=path)
    try:
        return TaskSpec.model_validate(doc)
    except ValidationError as exc:
        raise _field_error(where, exc) from exc


def _sb_id(path: str | None, app: str, doc: dict[str, Any]) -> str:
    if path:
        p = Path(path)
        return f"{p.parent.name or app}/{p.stem}"
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
    return f"{app}/{digest}"


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskLoadError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
        raise TaskLoadError(f"{where}: not valid JSON ({type(exc).__name__}: {exc})") from exc


def load_task_file(path: str | Path) -> TaskSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(f"{p}: not UTF-8 text ({exc.reason})") from exc
    return parse_task(_load_json(text, str(p)), path=str(p))


def load_tasks(path: str | Path) -> list[TaskSpec]:
    """A task file, a JSONL file of tasks, or a directory searched recursively for ``*.json``."""
    p = Path(path)
    if not p.exists():
        raise TaskLoadError(f"{p}: no such file or directory")
    if p.is_dir():
        return [load_task_file(f) for f in sorted(p.rglob("*.json"))]
    if p.suffix == ".jsonl":
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise TaskLoadError(f"{p}: not UTF-8 text ({exc.reason})") from exc
        return [parse_task(_load_json(line, f"{p}:{n}"), path=f"{p}:{n}")
                for n, line in enumerate(lines, start=1) if line.strip()]
    return [load_task_file(p)]
