"""Generating new tasks from seed tasks with an OpenAI-compatible LLM (reference judge.md).

Pure parts: :func:`build_generation_messages`, :func:`parse_instructions`, :func:`make_task`.
:func:`generate_tasks` drives a :class:`coda.inference.base.ChatBackend`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coda.inference.base import ChatBackend, GenerateOptions
from coda.tasks import TaskSource, TaskSpec
from coda_app.taskgen.dedup import DEFAULT_THRESHOLD, Deduplicator

GENERATION_PROMPT = """You write new tasks for a computer-use agent working in the application {app}.
{description}
Here are example tasks written by people for this application:
{seeds}

Write {n} NEW tasks for the same application. Every task must be:
- concise and specific (name the exact values, names, menus or files involved);
- executable from the application's initial state shown in the screenshot (when one is given), with nothing prepared outside the application;
- at least a few GUI steps long, not a single click;
- judgeable from the screenshots of the agent's trajectory: the final state must show whether it succeeded;
- different from the examples and from each other.
Answer with a JSON list of strings, one instruction per string, and nothing else."""  # noqa: E501


def build_generation_messages(
    *, app: str, seeds: Sequence[str], n: int, description: str | None = None,
    screenshot_url: str | None = None,
) -> list[dict[str, Any]]:
    """One user message: the rules, the seed instructions and the initial screenshot."""
    text = GENERATION_PROMPT.format(
        app=app, n=n, description=(description or "").strip(),
        seeds="\n".join(f"- {s.strip()}" for s in seeds),
    )
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if screenshot_url is not None:
        content.append({"type": "text", "text": "The application's initial state:"})
        content.append({"type": "image_url", "image_url": {"url": screenshot_url}})
    return [{"role": "user", "content": content}]


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\(\d+\))\s*")


def _clean(line: str) -> str:
    line = _BULLET.sub("", line).strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1].strip()
    return line


def parse_instructions(text: str) -> list[str]:
    """Instructions from an LLM reply: a JSON list (possibly fenced), else one per line.

    Bullets and numbering are dropped, empty lines and fence lines skipped.
    """
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        try:
            data = json.loads(text[start:end + 1])
        except ValueError:
            data = None
        if isinstance(data, list) and data and all(isinstance(x, str | dict) for x in data):
            items = [str(x.get("instruction", "")) if isinstance(x, dict) else str(x)
                     for x in data]
            return [s for s in (_clean(i) for i in items) if s]
    lines = [_clean(ln) for ln in text.splitlines() if not ln.strip().startswith("```")]
    return [ln for ln in lines if ln]


def make_task(seed: TaskSpec, instruction: str) -> TaskSpec:
    """A new task reusing the seed's app, setup, snapshot and step budget; no evaluators
    (the judge decides success); the id is derived from the seed id and the text."""
    digest = hashlib.sha256(f"{seed.id}\n{instruction}".encode()).hexdigest()[:12]
    return TaskSpec(
        id=f"gen/{seed.app}/{digest}",
        app=seed.app,
        instruction=instruction,
        step_budget=seed.step_budget,
        setup=[s.model_copy(deep=True) for s in seed.setup],
        snapshot=seed.snapshot,
        related_apps=list(seed.related_apps),
        source=TaskSource(path=seed.id),
    )


InstructionCheck = Callable[[str], Awaitable[bool]]


@dataclass
class GenerationReport:
    tasks: list[TaskSpec] = field(default_factory=list)
    proposed: int = 0
    duplicates: int = 0
    rejected: int = 0
    rounds: int = 0


async def generate_tasks(
    backend: ChatBackend,
    *,
    app: str,
    seeds: Sequence[TaskSpec],
    n: int,
    description: str | None = None,
    screenshot_url: str | None = None,
    existing: Sequence[str] = (),
    check: InstructionCheck | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    max_rounds: int = 3,
    options: GenerateOptions | None = None,
    on_task: Callable[[TaskSpec], None] | None = None,
) -> GenerationReport:
    """Ask the LLM for ``n`` instructions (up to ``max_rounds`` calls), keep new ones.

    Each accepted instruction is not a near-duplicate of a seed, of ``existing`` or of an
    earlier accepted one, and passes ``check`` when given. Tasks reuse seeds round-robin.
    """
    if not seeds:
        raise ValueError("at least one seed task is needed")
    seed_texts = [s.instruction for s in seeds]
    dedup = Deduplicator(threshold, seen=[*seed_texts, *existing])
    opts = options or GenerateOptions(n=1, temperature=1.0, top_p=0.95, max_tokens=2048)
    report = GenerationReport()
    while len(report.tasks) < n and report.rounds < max_rounds:
        report.rounds += 1
        want = n - len(report.tasks)
        messages = build_generation_messages(app=app, seeds=seed_texts, n=want,
                                             description=description,
                                             screenshot_url=screenshot_url)
        completions = await backend.chat(messages, opts)
        for completion in completions:
            for text in parse_instructions(completion.text):
                if len(report.tasks) >= n:
                    break
                report.proposed += 1
                if dedup.is_duplicate(text):
                    report.duplicates += 1
                    continue
                if check is not None and not await check(text):
                    report.rejected += 1
                    dedup.add(text)
                    continue
                dedup.add(text)
                task = make_task(seeds[len(report.tasks) % len(seeds)], text)
                report.tasks.append(task)
                if on_task is not None:
                    on_task(task)
    return report
