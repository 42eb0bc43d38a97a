"""Setup steps and checkers: typed outcomes for what the project does not know, ScienceBoard's
stop rules, OSWorld's config steps and command/file checks on a real desktop, the ChimeraX and
Lean adapters on a desktop without those applications, and the lambda sandbox."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coda.actions import Answer, Click, Done, Fail
from coda.contracts.desktop import BrokenReason, CheckStatus, CheckVerdict, EpisodeEnd, StepStatus
from coda.tasks import load_task_file, parse_task
from tests.fixtures.waiting import wait_for
from worker.providers.base import GuestLayout
from worker.providers.client import GuestClient
from worker.providers.local import LocalDesktop
from worker.tasks import TaskContext, episode_end, run_checkers, run_setup
from worker.tasks.expr import UnsafeExpression, compile_lambda

from .helpers import window

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM"


def sb_task(initialize: list[dict[str, Any]], evaluate: list[dict[str, Any]],
            app: str = "TeXstudio") -> Any:
    return parse_task({"type": app, "sort": "VM", "steps": 5, "instruction": "test",
                       "version": "0.1", "initialize": initialize, "evaluate": evaluate},
                      task_id=f"{app}/test")


def osworld_task(config: list[dict[str, Any]], evaluator: dict[str, Any] | None) -> Any:
    doc: dict[str, Any] = {"id": "t-1", "instruction": "test", "config": config}
    if evaluator is not None:
        doc["evaluator"] = evaluator
    return parse_task(doc)


def offline_ctx(task: Any) -> TaskContext:
    """A context whose guest nobody answers: for rules decided before any call."""
    return TaskContext(task=task, guest=GuestClient("http://127.0.0.1:9"), layout=GuestLayout())


# --- rules that need no desktop ------------------------------------------------------------

def test_an_unknown_setup_step_is_a_typed_unsupported_outcome_and_stops_setup() -> None:
    task = sb_task([{"func": "teleport", "where": "moon"}, {"func": "touch", "path": "/x"}], [])
    report = run_setup(offline_ctx(task))
    assert not report.ok and len(report.steps) == 1
    step = report.steps[0]
    assert step.status is StepStatus.UNSUPPORTED and "'teleport'" in step.detail
    chrome = osworld_task([{"type": "chrome_open_tabs", "parameters": {"urls_to_open": []}}], None)
    step = run_setup(offline_ctx(chrome)).steps[0]
    assert step.status is StepStatus.UNSUPPORTED and "'chrome_open_tabs'" in step.detail


def test_an_unknown_checker_is_unsupported_never_a_pass() -> None:
    task = sb_task([], [{"type": "telepathy", "key": "x"}])
    outcome = run_checkers(offline_ctx(task), EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.UNDECIDED and outcome.success is None
    assert outcome.results[0].status is CheckStatus.UNSUPPORTED
    assert "'telepathy'" in outcome.results[0].detail
    unknown_metric = osworld_task([], {"func": "compare_pptx_files", "result": {"type": "rule"}})
    result = run_checkers(offline_ctx(unknown_metric), EpisodeEnd(kind="DONE")).results[0]
    assert result.status is CheckStatus.UNSUPPORTED and "compare_pptx_files" in result.detail


def test_a_task_without_checkers_is_left_to_the_judge() -> None:
    outcome = run_checkers(offline_ctx(sb_task([], [])), EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.NO_CHECKER and outcome.success is None


@pytest.mark.parametrize(("last", "verdict"), [
    (Answer(text="13"), CheckVerdict.SUCCESS),
    (Answer(text="4098"), CheckVerdict.FAILURE),
    (Answer(text="13 steps"), CheckVerdict.FAILURE),
    (Done(), CheckVerdict.FAILURE),
    (Fail(), CheckVerdict.FAILURE),
    (None, CheckVerdict.FAILURE),
])
def test_scienceboard_stop_rules(last: Any, verdict: CheckVerdict) -> None:
    task = load_task_file(TASKS / "TeXstudio" / "D-01.json")  # evaluate: stop ANS ["13"]
    outcome = run_checkers(offline_ctx(task), episode_end(last))
    assert outcome.verdict is verdict, outcome


def test_episode_end_from_the_last_action() -> None:
    assert episode_end(Done()).kind == "DONE"
    assert episode_end(Fail()).kind == "FAIL"
    assert episode_end(Answer(text="52")) == EpisodeEnd(kind="ANS", answer="52")
    assert episode_end(Click(x=1, y=1)).kind == "TIMEOUT"
    assert episode_end(None).kind == "TIMEOUT"


def test_osworld_infeasible_and_fail_rules() -> None:
    infeasible = osworld_task([], {"func": "infeasible"})
    assert run_checkers(offline_ctx(infeasible), EpisodeEnd(kind="FAIL")).verdict is \
        CheckVerdict.SUCCESS
    assert run_checkers(offline_ctx(infeasible), EpisodeEnd(kind="DONE")).verdict is \
        CheckVerdict.FAILURE
    normal = osworld_task([], {"func": "exact_match", "result": {"type": "rule"}})
    assert run_checkers(offline_ctx(normal), EpisodeEnd(kind="FAIL")).verdict is \
        CheckVerdict.FAILURE


def test_task_lambdas_from_the_bundled_chimerax_tasks_compile() -> None:
    sources = []
    for f in sorted((TASKS / "ChimeraX").glob("*.json")):
        for item in load_task_file(f).evaluators:
            extra = item.model_extra or {}
            sources += [v for k, v in extra.items()
                        if k in ("find", "key", "value") and isinstance(v, str)
                        and v.startswith("lambda")]
    assert len(sources) > 10
    for src in sources:
        compile_lambda(src)
    key = compile_lambda("lambda key: '.'.join(key.split('.')[:-1] + ['_name'])")
    assert key("a.b.c") == "a.b._name"
    assert len(compile_lambda("lambda: __import__('datetime').datetime.today()"
                              ".strftime('%Y-%m-%d')")()) == 10
    # GRASS GIS's checkers: list comprehensions, any/all/abs, - and %
    names = compile_lambda("lambda dump: [w['name'] for w in dump['windows'] if w['on']]")
    assert names({"windows": [{"name": "a", "on": True}, {"name": "b", "on": False}]}) == ["a"]
    assert compile_lambda("lambda k, v: abs((k % 360) - v) < 0.1")(385.05, 25) is True


@pytest.mark.parametrize("source", [
    "lambda: __import__('os').system('true')",
    "lambda k: k.__class__",
    "lambda k: open('/etc/passwd')",
    "lambda k: (x for x in k)",
    "lambda k: [x.__class__ for x in k]",
    "lambda k: {x: 1 for x in k}",
    "print('not a lambda')",
])
def test_task_lambdas_cannot_escape(source: str) -> None:
    with pytest.raises(UnsafeExpression):
        compile_lambda(source)(*([] if source.startswith("lambda:") else ["k"]))


# --- on a real desktop --------------------------------------------------------------------

@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server on this host serving ``tmp_path`` (downloads need no internet)."""
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_osworld_config_steps_and_command_and_file_checks(desktop: LocalDesktop,
                                                          tmp_path: Path, web: str) -> None:
    local = tmp_path / "data.txt"
    local.write_text("uploaded from the host\n")
    home = "/home/user"  # OSWorld / ScienceBoard paths; the local slot maps them to its home
    task = osworld_task([
        {"type": "upload_file", "parameters": {"files": [
            {"local_path": str(local), "path": f"{home}/Desktop/data.txt"}]}},
        {"type": "download", "parameters": {"files": [
            {"url": f"{web}/data.txt", "path": f"{home}/Downloads/fetched.txt"}]}},
        {"type": "execute", "parameters": {"command": ["cp", f"{home}/Desktop/data.txt",
                                                       f"{home}/copy.txt"]}},
        {"type": "command", "parameters": {"command": "ls ~/copy.txt", "shell": True,
                                           "until": {"returncode": 0}}},
        {"type": "launch", "parameters": {"command": ["xterm", "-T", "osworld-cfg"]}},
        {"type": "activate_window", "parameters": {"window_name": "osworld-cfg"}},
        {"type": "sleep", "parameters": {"seconds": 0}},
        {"type": "open", "parameters": {"path": f"{home}/Downloads/fetched.txt"}},
    ], {
        "func": ["check_include_exclude", "exact_match", "file_contains"],
        "result": [{"type": "vm_command_line", "command": "cat ~/copy.txt", "shell": True},
                   {"type": "vm_command_line", "command": ["echo", "-n", "ok"]},
                   {"type": "vm_file", "path": f"{home}/copy.txt", "dest": "copy.txt"}],
        "expected": [{"type": "rule", "rules": {"include": ["uploaded"], "exclude": ["error"]}},
                     {"type": "rule", "rules": {"expected": "ok"}},
                     {"type": "rule", "rules": {"expected": ["from the host"]}}],
        "conj": "and",
        "postconfig": [{"type": "close_window", "parameters": {"window_name": "osworld-cfg"}}],
    })
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    wait_for(lambda: window(ctx.guest, "osworld-cfg"), "the launched xterm")
    assert ctx.guest.read_file(ctx.rw(f"{home}/Downloads/fetched.txt")) == local.read_bytes()
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    wait_for(lambda: window(ctx.guest, "osworld-cfg") is None, "postconfig to close the xterm")
    ctx.guest.execute("echo error >> ~/copy.txt", shell=True)
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.FAILURE
    assert outcome.results[0].detail == "score 0.000"


def test_texstudio_checkers_on_touched_files(desktop: LocalDesktop, tmp_path: Path,
                                            web: str) -> None:
    (tmp_path / "refs.txt").write_text("served\n")
    task = sb_task(
        [{"func": "touch", "path": "/home/user/atelier/main.tex",
          "text": "\\documentclass{article}\n\\begin{document}\nxxx\n\\end{document}\n"},
         {"func": "download", "url": f"{web}/refs.txt", "path": "/home/user/atelier/refs.txt"},
         {"func": "opt", "depth": 12},
         {"func": "execute", "command": "test -f /home/user/atelier/refs.txt", "shell": True}],
        [{"type": "file", "path": "/home/user/atelier/main.tex", "source": "xxx",
          "target": "42"},
         {"type": "include", "path": "/home/user/atelier/main.tex", "pattern": "\\\\begin"},
         {"type": "compile", "path": "/home/user/atelier", "file": "main"}])
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    assert report.steps[3].detail == "returncode 0"  # /home/user mapped inside the command too
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert [r.status for r in outcome.results] == [
        CheckStatus.FAIL, CheckStatus.PASS, CheckStatus.PASS]
    ctx.guest.execute(["sed", "-i", "s/xxx/42/", ctx.rw("/home/user/atelier/main.tex")])
    assert run_checkers(ctx, EpisodeEnd(kind="DONE")).verdict is CheckVerdict.SUCCESS
    ctx.guest.execute(["sed", "-i", "s/42/\\\\undefinedmacro/",
                       ctx.rw("/home/user/atelier/main.tex")])
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert outcome.results[2].status is CheckStatus.FAIL  # pdflatex refuses the document


def test_chimerax_and_lean_adapters_say_unavailable_where_the_apps_are_missing(
        desktop: LocalDesktop) -> None:
    desktop.reset()
    chimerax = sb_task([{"func": "open", "name": "2olx"}],
                       [{"type": "info", "key": "sel", "value": []}], app="ChimeraX")
    ctx = TaskContext.for_desktop(desktop, chimerax)
    step = run_setup(ctx).steps[0]
    assert step.status is StepStatus.UNAVAILABLE and "ChimeraX" in step.detail
    result = run_checkers(ctx, EpisodeEnd(kind="DONE")).results[0]
    assert result.status is CheckStatus.UNAVAILABLE
    prefixed = sb_task([{"func": "chimerax_turn", "axis": "y", "angle": 1}], [])
    step = run_setup(TaskContext.for_desktop(desktop, prefixed)).steps[0]
    assert step.status is StepStatus.UNAVAILABLE  # TeXstudio task, ChimeraX's step
    lean = load_task_file(TASKS / "Lean" / "A-01.json")
    ctx = TaskContext.for_desktop(desktop, lean)
    report = run_setup(ctx)
    assert report.first_problem is not None
    assert report.first_problem.func == "query"
    assert report.first_problem.status is StepStatus.UNAVAILABLE
    result = run_checkers(ctx, EpisodeEnd(kind="DONE")).results[0]
    assert result.type == "placeholder" and result.status is CheckStatus.UNAVAILABLE


def test_a_guest_that_accepts_but_never_answers_is_not_answering() -> None:
    """A VM whose network is up but whose guest server hangs: typed, bounded, no crash."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # connections queue, nothing ever answers
        port = listener.getsockname()[1]
        guest = GuestClient(f"http://127.0.0.1:{port}", kind=None, timeout=0.5)
        try:
            health = guest.health(timeout=0.5)
        finally:
            guest.close()
    assert not health.ok and health.reason is BrokenReason.NOT_ANSWERING
