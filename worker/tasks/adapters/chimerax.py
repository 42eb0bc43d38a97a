"""ChimeraX (ScienceBoard ``sci/ChimeraX``): commands go to ChimeraX's REST remote control
(``remotecontrol rest start json true port «PORTLIKE»``) through the guest's ``/chimerax/run``;
a reply is ``{"error": null | ..., "log messages": {"note": [...]}}``. Steps ``open``, ``turn``,
``clear_log``, ``color``, ``alphafold_match``, ``destroy``; checkers ``states`` (a session-state
dump written by the ``states`` command of ScienceBoard's chimerax-states bundle), ``info`` (the
lines ``info <key>`` logs) and ``file`` (a guest file contains a value)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, StepStatus
from coda.tasks import SetupStep
from worker.providers.client import GuestError
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.context import CheckError, StepError, TaskContext, params
from worker.tasks.expr import UnsafeExpression, compile_lambda

STATES_DIR = "/home/user/Downloads"


class ChimeraxUnavailable(RuntimeError):
    pass


def run(ctx: TaskContext, command: str) -> tuple[list[str], bool]:
    """(log notes, succeeded) of one ChimeraX command."""
    try:
        reply = ctx.guest.chimerax(ctx.layout.portlike, command)
    except GuestError as exc:
        raise ChimeraxUnavailable(f"ChimeraX remote control: {exc.detail[:300]}") from exc
    return reply.notes, reply.error is None


def _command_step(build: Any) -> Any:
    def handler(ctx: TaskContext, step: SetupStep) -> str:
        command = build(params(step))
        try:
            _, ok = run(ctx, command)
        except ChimeraxUnavailable as exc:
            raise StepError(StepStatus.UNAVAILABLE, str(exc)) from exc
        if not ok:
            raise StepError(StepStatus.FAILED, f"ChimeraX refused {command!r}")
        return f"chimerax: {command}"
    return handler


def _color(p: dict[str, Any]) -> str:
    style = str(p["style"])
    return style if style == "rainbow" else f"color {style}"


STEPS = {
    "open": _command_step(lambda p: f"open {p['name']}"),
    "turn": _command_step(lambda p: f"turn {p['axis']} {p['angle']}"),
    "clear_log": _command_step(lambda p: "log clear"),
    "color": _command_step(_color),
    "alphafold_match": _command_step(lambda p: f"alphafold match {p['name']}"),
    "destroy": _command_step(lambda p: "destroy"),
}


def _checked_run(ctx: TaskContext, command: str) -> list[str]:
    try:
        notes, ok = run(ctx, command)
    except ChimeraxUnavailable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
    if not ok:
        raise CheckError(CheckStatus.ERROR, f"ChimeraX refused {command!r}")
    return notes


def states_dump(ctx: TaskContext) -> dict[str, Any]:
    """ScienceBoard's ``states <dir> <timestamp>`` dump, read back from the guest (cached for
    the checkers of one evaluation)."""
    if "chimerax_states" not in ctx.scratch:
        stamp = str(int(time.time() * 1000))
        folder = ctx.rw(STATES_DIR)
        _checked_run(ctx, f"states {folder} {stamp}")
        data = ctx.guest.read_file(f"{folder}/{stamp}.json")
        if data is None:
            raise CheckError(CheckStatus.ERROR, "ChimeraX wrote no states dump")
        ctx.scratch["chimerax_states"] = json.loads(data)
    states: dict[str, Any] = ctx.scratch["chimerax_states"]
    return states


def _lambda(source: str) -> Any:
    try:
        return compile_lambda(source)
    except UnsafeExpression as exc:
        raise CheckError(CheckStatus.ERROR, str(exc)) from exc


def check_states(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    states = states_dump(ctx)
    key_src: str = item["key"]
    check_null = "value" in item and item["value"] is None
    if "find" in item:
        find = _lambda(item["find"])
        keys = [k for k, v in states.items() if find(k, v)]
        if check_null:
            return _states_result(not keys, "no entry expected")
        if not keys:
            return _states_result(False, "nothing matched 'find'")
        raw_key = _lambda(key_src)(keys[0])
    elif key_src.startswith("lambda"):
        keys = [k for k in states if _lambda(key_src)(k)]
        if check_null:
            return _states_result(not keys, "no entry expected")
        if not keys:
            return _states_result(False, "no key matched")
        raw_key = keys[0]
    else:
        if check_null:
            return _states_result(key_src not in states, f"{key_src} must be absent")
        raw_key = key_src
    if raw_key not in states:
        return _states_result(False, f"{raw_key} not in the session state")
    value = states[raw_key]
    if item.get("pattern") is not None:
        text = value if isinstance(value, str) else json.dumps(value)
        return _states_result(re.search(item["pattern"], text) is not None, raw_key)
    if item.get("value") is not None:
        return _states_result(item["value"] == value, raw_key)
    return _states_result(False, f"{raw_key}: neither value nor pattern given")


def _states_result(ok: bool, detail: str) -> CheckResult:
    return CheckResult(type="states", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=detail)


def check_info(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    notes = _checked_run(ctx, f"info {item['key']}")
    lines = {line for note in notes for line in note.strip().split("\n") if line != ""}
    ok = lines == set(item["value"])
    return CheckResult(type="info", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=f"info {item['key']}: {len(lines)} lines")


def check_file(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    value = item["value"]
    if isinstance(value, str) and value.startswith("lambda"):
        value = _lambda(value)()
    data = ctx.guest.read_file(ctx.rw(item["key"]))
    ok = data is not None and str(value) in data.decode("utf-8", "replace")
    return CheckResult(type="file", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=f"{item['key']} contains {str(value)[:60]!r}")


CHIMERAX = AppAdapter(
    name="ChimeraX",
    steps=STEPS,
    checkers={"states": check_states, "info": check_info, "file": check_file},
)
