"""Success metrics in the paper's Table 1 format, and success rates with their confidence
intervals per planner version (pure functions)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

Z95 = 1.959964
"""The standard normal quantile of a two-sided 95 % interval."""


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


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a success rate (95 % by default): ``(0, 1)`` with no trial.
    Unlike the normal approximation it stays inside [0, 1] and is meaningful at 0 and n."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes: {successes} is not between 0 and n = {n}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, round(centre - half, 12)), min(1.0, round(centre + half, 12))


@dataclass(frozen=True)
class Rate:
    """Successes out of decided rollouts, with the rate and its 95 % Wilson interval."""

    key: str
    rollouts: int
    succeeded: int

    @property
    def rate(self) -> float | None:
        return self.succeeded / self.rollouts if self.rollouts else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.succeeded, self.rollouts)


def rates_by(outcomes: Iterable[tuple[str, bool]]) -> list[Rate]:
    """Success rates per key (e.g. the planner version), keys in order of first appearance."""
    counts: dict[str, list[int]] = {}
    for key, success in outcomes:
        c = counts.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += int(success)
    return [Rate(key=k, rollouts=n, succeeded=s) for k, (n, s) in counts.items()]
