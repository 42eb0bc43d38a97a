"""Success metrics in the paper's Table 1 format (pure functions)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    app: str
    task_id: str
    success: bool


@dataclass(frozen=True)
class AppTable:
    app: str
    tasks: int
    rollouts: int
    average_at_k: float | None
    """Mean success over all finished rollouts, in percent."""
    pass_at_k: float | None
    """Share of tasks solved at least once, in percent."""


def table1(outcomes: Iterable[Outcome]) -> list[AppTable]:
    """Per-app Average@k and Pass@k plus an ``Overall`` row (mean of the apps, as the paper)."""
    by_app: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        by_app[o.app][o.task_id].append(o.success)
    rows = []
    for app in sorted(by_app):
        tasks = by_app[app]
        runs = [s for results in tasks.values() for s in results]
        rows.append(AppTable(
            app=app, tasks=len(tasks), rollouts=len(runs),
            average_at_k=round(100 * sum(runs) / len(runs), 2),
            pass_at_k=round(100 * sum(any(r) for r in tasks.values()) / len(tasks), 2),
        ))
    if rows:
        rows.append(AppTable(
            app="Overall", tasks=sum(r.tasks for r in rows), rollouts=sum(r.rollouts for r in rows),
            average_at_k=round(sum(r.average_at_k or 0 for r in rows) / len(rows), 2),
            pass_at_k=round(sum(r.pass_at_k or 0 for r in rows) / len(rows), 2),
        ))
    return rows
