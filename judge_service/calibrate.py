"""Calibration of the judge against labelled trajectories: precision, recall, F1.

Input: JSONL, one trajectory a line: ``{"instruction": ..., "steps": [{"screenshot": PATH or
base64, "thought": ..., "action": ...}], "label": true|false}``; relative paths are relative
to the file. Success is the positive class (reference judge.md, Table 2 of the paper).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coda.clients.judge import JudgeClient
from coda.contracts.services_api import ImageRef, JudgePolicy, JudgeStep


class LabelledStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    screenshot: str = Field(min_length=1, description="image path or base64")
    thought: str | None = None
    action: str | None = None


class LabelledTrajectory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    instruction: str = Field(min_length=1)
    steps: list[LabelledStep] = Field(min_length=1)
    label: bool


class CalibrationMetrics(BaseModel):
    n: int
    tp: int
    fp: int
    fn: int
    tn: int
    precision: float | None = Field(description="TP/(TP+FP); None when nothing was predicted")
    recall: float | None = Field(description="TP/(TP+FN); None when there are no positives")
    f1: float | None


def compute_metrics(pairs: Iterable[tuple[bool, bool]]) -> CalibrationMetrics:
    """Metrics of ``(predicted, label)`` pairs with success as the positive class."""
    tp = fp = fn = tn = 0
    for predicted, label in pairs:
        if predicted and label:
            tp += 1
        elif predicted:
            fp += 1
        elif label:
            fn += 1
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return CalibrationMetrics(n=tp + fp + fn + tn, tp=tp, fp=fp, fn=fn, tn=tn,
                              precision=precision, recall=recall, f1=f1)


class CalibrationError(ValueError):
    """A labelled file that cannot be used; the message names the line and field."""


def load_labelled(path: str | Path) -> list[LabelledTrajectory]:
    p = Path(path)
    if not p.is_file():
        raise CalibrationError(f"{p}: no such file")
    items = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(LabelledTrajectory.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(x) for x in first["loc"])
            raise CalibrationError(f"{p}:{n}: field '{field}': {first['msg']}") from exc
    if not items:
        raise CalibrationError(f"{p}: no trajectories")
    return items


def image_ref(screenshot: str, base_dir: Path) -> ImageRef:
    """A path (relative to ``base_dir``) is read and sent inline; anything else is base64."""
    candidate = Path(screenshot) if len(screenshot) < 4096 else None
    if candidate is not None:
        full = candidate if candidate.is_absolute() else base_dir / candidate
        if full.is_file():
            return ImageRef(b64=base64.b64encode(full.read_bytes()).decode("ascii"))
    return ImageRef(b64=screenshot)


class CalibrationResult(BaseModel):
    metrics: CalibrationMetrics
    predictions: list[bool]
    labels: list[bool]


async def calibrate(path: str | Path, client: JudgeClient, policy: JudgePolicy | None = None,
                    on_done: Callable[[int], None] | None = None) -> CalibrationResult:
    """Judge every labelled trajectory through the service and score the verdicts."""
    items = load_labelled(path)
    base_dir = Path(path).parent
    predictions: list[bool] = []
    for i, item in enumerate(items):
        steps = [JudgeStep(screenshot=image_ref(s.screenshot, base_dir), thought=s.thought,
                           action=s.action) for s in item.steps]
        response = await client.judge(item.instruction, steps, policy)
        predictions.append(response.verdict.correct)
        if on_done is not None:
            on_done(i)
    labels = [item.label for item in items]
    return CalibrationResult(metrics=compute_metrics(zip(predictions, labels, strict=True)),
                             predictions=predictions, labels=labels)


def dumps(result: CalibrationResult) -> str:
    return json.dumps(result.model_dump(mode="json"), indent=2)
