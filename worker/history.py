"""How stored steps become the models' history (pure). The episode loop and the group job both
use it, so a group's planner input is rebuilt exactly as the episode built it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from coda.contracts.records import Step
from coda.contracts.services_api import MAX_HISTORY, MAX_TEXT, HistoryStep, ImageRef

M = TypeVar("M", bound=BaseModel)

HISTORY_KEEP = 64
"""Past steps sent with a request (the prompt builders keep fewer; this bounds the body)."""


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """A model output fit for a request field: no NUL characters, at most ``limit`` chars."""
    return text.replace("\x00", "")[:limit]


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def storable(record: M) -> M:
    """The record with every NUL character removed from its strings: model output (a judge's
    raw vote, a sampled plan, an action's text) can hold NULs, which the master (and
    PostgreSQL) refuse."""
    return type(record).model_validate(_without_nul(record.model_dump(mode="json")))


def history_step(step: Step) -> HistoryStep | None:
    """A past step as the planner and executor see it, or None when it has no plan text (a
    model error before the planner answered)."""
    if not step.thought or not step.thought.strip():
        return None
    return HistoryStep(
        thought=clip(step.thought),
        action_text=clip(step.raw_executor_text) if step.raw_executor_text else None,
        screenshot=ImageRef(ref=step.screenshot) if step.screenshot else None)


def history_of(steps: Sequence[Step], keep: int = HISTORY_KEEP) -> list[HistoryStep]:
    """The history before the next step: the last ``keep`` steps that have plan text."""
    past = [h for h in (history_step(s) for s in steps) if h is not None]
    return past[-min(keep, MAX_HISTORY):]


def attempt_steps(steps: Sequence[Step], attempt: int | None = None) -> list[Step]:
    """The steps of one attempt (default: the latest attempt that has steps), by index."""
    if attempt is None:
        attempts = [s.attempt for s in steps if s.attempt is not None]
        attempt = max(attempts) if attempts else None
    chosen = [s for s in steps if attempt is None or s.attempt == attempt]
    return sorted(chosen, key=lambda s: s.index)
