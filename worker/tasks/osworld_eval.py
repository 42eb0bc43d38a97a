"""OSWorld-style evaluators: command output and file checks.

An evaluator is ``{func, result, expected?, options?, conj?, postconfig?}`` (OSWorld's
``desktop_env.evaluate``): ``postconfig`` setup steps run first; ``infeasible`` passes only when
the agent said FAIL, and any other task fails when it did; each metric gets the ``result``
getter's value (and ``expected``'s) and scores 0..1; several metrics combine with ``conj``
(``and``: mean, 0 if any is 0; ``or``: max). Pass means a score of 1.

Getters here: ``vm_command_line`` (stdout), ``vm_command_error`` (stderr), ``vm_file`` (the file
fetched to a local path) and ``rule`` (the rules themselves). Metrics: ``exact_match``,
``check_include_exclude``, ``is_in_list``, ``literal_match``, ``diff_text_file``,
``file_contains`` (the semantics of OSWorld's ``metrics/general.py``). Others are *unsupported*.
"""

from __future__ import annotations

import difflib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, EpisodeEnd, StepStatus
from coda.tasks import SetupStep
from worker.tasks.context import TaskContext
from worker.tasks.setup import run_setup

Getter = Callable[[TaskContext, dict[str, Any], Path], Any]


class Unsupported(LookupError):
    pass


def _command(ctx: TaskContext, cfg: dict[str, Any], field: str) -> str | None:
    out = ctx.guest.execute(ctx.rw(cfg["command"]), shell=bool(cfg.get("shell", False)))
    return str(getattr(out, field)) if out.status == "success" else None


def _vm_file(ctx: TaskContext, cfg: dict[str, Any], cache: Path) -> str | None:
    data = ctx.guest.read_file(ctx.rw(cfg["path"]))
    if data is None:
        return None
    local = cache / Path(str(cfg.get("dest") or Path(cfg["path"]).name)).name
    local.write_bytes(data)
    return str(local)


GETTERS: dict[str, Getter] = {
    "vm_command_line": lambda ctx, cfg, _: _command(ctx, cfg, "output"),
    "vm_command_error": lambda ctx, cfg, _: _command(ctx, cfg, "error"),
    "vm_file": _vm_file,
    "rule": lambda ctx, cfg, _: cfg.get("rules"),
}


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    return float(result == rules["expected"])


def check_include_exclude(result: Any, rules: dict[str, Any]) -> float:
    if result is None:
        return 0.0
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return float(all(r in result for r in include) and all(r not in result for r in exclude))


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    return float(result is not None and rules["expected"] in result)


def literal_match(result: Any, expected: Any, **options: Any) -> float:
    ignore_case = bool(options.get("ignore_case", False))
    if options.get("type", "str") == "list":
        if not isinstance(result, list | tuple) or not isinstance(expected, list | tuple) \
                or len(result) != len(expected):
            return 0.0
        norm = [str(s).lower() if ignore_case else str(s) for s in result]
        want = [str(s).lower() if ignore_case else str(s) for s in expected]
        return float(norm == want)
    a, b = str(result), str(expected)
    return float(a.lower() == b.lower() if ignore_case else a == b)


def diff_text_file(result: str | None, expected: str) -> float:
    if result is None:
        return 0.0
    a = Path(result).read_text(errors="replace").splitlines()
    b = Path(expected).read_text(errors="replace").splitlines()
    return difflib.SequenceMatcher(a=a, b=b).ratio()


def file_contains(result: str | None, rules: dict[str, Any]) -> float:
    if not result or not Path(result).is_file():
        return 0.0
    text = Path(result).read_text(errors="replace")
    return float(all(t in text for t in rules["expected"]))


METRICS: dict[str, Callable[..., float]] = {
    "exact_match": exact_match, "check_include_exclude": check_include_exclude,
    "is_in_list": is_in_list, "literal_match": literal_match,
    "diff_text_file": diff_text_file, "file_contains": file_contains,
}


def _as_list(value: Any, n: int) -> list[Any]:
    return list(value) if isinstance(value, list) else [value] * n


def _score(ctx: TaskContext, item: dict[str, Any], cache: Path) -> float:
    funcs = _as_list(item["func"], 1)
    n = len(funcs)
    results = _as_list(item.get("result"), n)
    expecteds = _as_list(item.get("expected"), n)
    options = _as_list(item.get("options") or {}, n)
    conj = item.get("conj", "and")
    scores = []
    for func, res, exp, opt in zip(funcs, results, expecteds, options, strict=False):
        metric = METRICS.get(func)
        if metric is None:
            raise Unsupported(f"OSWorld metric {func!r} is not supported")
        state = _get(ctx, res, cache)
        want = _get(ctx, exp, cache) if exp else None
        opts = opt or {}
        score = metric(state, want, **opts) if want is not None else metric(state, **opts)
        if conj == "and" and score == 0:
            return 0.0
        if conj == "or" and score == 1:
            return 1.0
        scores.append(score)
    return sum(scores) / len(scores) if conj == "and" else max(scores)


def _get(ctx: TaskContext, cfg: dict[str, Any] | None, cache: Path) -> Any:
    if cfg is None:
        return None
    getter = GETTERS.get(str(cfg.get("type")))
    if getter is None:
        raise Unsupported(f"OSWorld getter {cfg.get('type')!r} is not supported")
    return getter(ctx, cfg, cache)


def run_osworld(ctx: TaskContext, item: dict[str, Any], end: EpisodeEnd) -> CheckResult:
    post = [SetupStep.model_validate({"func": s.get("type", ""), **s.get("parameters", {})})
            for s in item.get("postconfig", [])]
    if post:
        report = run_setup(ctx, post)
        problem = report.first_problem
        if problem is not None:
            status = (CheckStatus.UNSUPPORTED if problem.status is StepStatus.UNSUPPORTED
                      else CheckStatus.ERROR)
            return CheckResult(type="osworld", status=status,
                               detail=f"postconfig {problem.func}: {problem.detail}")
    if item.get("func") == "infeasible":
        ok = end.kind == "FAIL"
        return CheckResult(type="osworld", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                           detail="infeasible task: the agent must say FAIL")
    if end.kind == "FAIL":
        return CheckResult(type="osworld", status=CheckStatus.FAIL, detail="the agent said FAIL")
    try:
        with tempfile.TemporaryDirectory(prefix="coda-osworld-eval-") as tmp:
            score = _score(ctx, item, Path(tmp))
    except Unsupported as exc:
        return CheckResult(type="osworld", status=CheckStatus.UNSUPPORTED, detail=str(exc))
    return CheckResult(type="osworld", status=CheckStatus.PASS if score >= 1 else CheckStatus.FAIL,
                       detail=f"score {score:.3f}")
