"""One step-report path at every layer: a single report is a batch of one.

Both step routes (``POST /v1/jobs/steps`` and its alias ``POST /v1/jobs/{job_id}/steps``) go
through one helper to :func:`master.jobs.report_steps`, which alone stores steps, with one SQL
statement (:mod:`master.repos.steps`); the label rule is written once; the worker reports
every step through its :class:`~worker.steps.StepReporter` (window 0: at once) and raises the
typed outcome, never a made-up HTTP error. Checked over the source, as the conventions are.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from pathlib import Path

from tests.test_conventions import dotted

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "master"


def _calls(node: ast.AST) -> set[str]:
    return {dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def _sources(folder: Path) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(folder.rglob("*.py")):
        if "migrations" not in path.parts:
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _strings(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_both_step_routes_go_through_one_function() -> None:
    tree = ast.parse((MASTER / "routes" / "jobs.py").read_text())
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.AsyncFunctionDef)}
    routes = {name for name, f in funcs.items() for d in f.decorator_list
              if isinstance(d, ast.Call) and dotted(d.func) == "router.post"
              and isinstance(d.args[0], ast.Constant) and str(d.args[0].value).endswith("steps")}
    assert routes == {"report_steps", "report_step"}
    for name in routes:
        assert "_report" in _calls(funcs[name]), f"{name} does not go through _report"
        assert "jobs.report_steps" not in _calls(funcs[name])
    assert "jobs.report_steps" in _calls(funcs["_report"])


def test_the_master_stores_steps_with_one_function_and_one_statement() -> None:
    import master.jobs
    from master.repos import steps

    assert not hasattr(master.jobs, "report_step")
    assert [n for n in dir(steps) if "for_lease" in n.lower()] == ["_FOR_LEASE", "insert_for_lease"]
    inserts, callers, label_rules = [], [], []
    for where, tree in _sources(MASTER):
        inserts += [where for s in _strings(tree) if "insert into steps" in s.lower()]
        label_rules += [where for s in _strings(tree) if "set by the master from" in s]
        for f in ast.walk(tree):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    "step_rows.insert_for_lease" in _calls(f):
                callers.append(f"{where}:{f.name}")
    assert inserts == ["master/repos/steps.py"]
    assert callers == ["master/jobs.py:report_steps"]
    assert label_rules == ["master/jobs.py"]  # the label rule, once


def test_the_worker_reports_every_step_through_its_reporter() -> None:
    from worker.episode import EpisodeRun
    from worker.steps import StepReporter

    assert typing.get_type_hints(EpisodeRun)["reporter"] is StepReporter  # always there
    for where, tree in _sources(ROOT / "worker"):
        assert not any(c.endswith(".report_step") for c in _calls(tree)), where
    steps = ast.parse((ROOT / "worker" / "steps.py").read_text())
    made_up = [n.lineno for n in ast.walk(steps) if isinstance(n, ast.Call)
               and dotted(n.func) == "ServiceError" and n.args
               and isinstance(n.args[0], ast.Constant) and n.args[0].value in (404, 409, 410)]
    assert not made_up, f"worker/steps.py builds an HTTP refusal the master never sent: {made_up}"
