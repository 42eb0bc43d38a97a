"""vLLM against the in-process transformers backend, on the same tiny model and machine.

The benchmark starts vLLM's own server (``coda_app.vllm``, the CPU build installed by
``scripts/vllm-install.sh``) on the tiny random Qwen2.5-VL and, in this process, the
transformers backend on the same folder, and measures for each:

* the planner: ``G`` plans of one state in one request (plans/s, and the vLLM/transformers
  ratio), the state being the planner's own conversation of a stored state
  (``trainer.data.planner_messages``, as ``POST /v1/plan`` builds it);
* the executor: pre-filled continuations (``continue_final_message``), one per thought
  (actions/s);
* the judge: one call with ``k`` votes on a 4-frame trajectory (seconds);
* log-prob parity (truncated importance sampling rests on it): the trainer's own log-probs
  (``trainer.logprobs.shared_logprobs`` on ``trainer.data.encode_group``) of the token ids vLLM
  sampled, per token: max and mean |difference|.

    python -m benchmarks.serving --out benchmarks/results/serving.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import (
    configure_bench_logging,
    encode_png,
    machine,
    parse_screen,
    write_result,
)
from coda.actions import Click
from coda.artifacts import ArtifactStore
from coda.contracts.history import HistoryStep, ImageRef
from coda.contracts.training import Candidate, Group, StateRef
from coda.inference.base import ChatBackend, GenerateOptions
from coda.logging import get_logger
from coda.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "serving.json"
RECORDED_BY_TESTS = ("version_recovery_s", "version_recovery_from_kill_s")
"""Seconds until a restarted vLLM serves the current planner version again (after it answers;
after the kill), written here by ``CODA_RECORD_RESULTS=1 pytest tests/vllm/test_versions.py``."""
log = get_logger("benchmarks.serving")

INSTRUCTION = "Open the File menu of KAlgebra and save the current session as 'session.kal'."
THOUGHTS = [
    "Click the 'File' menu in the menu bar at the top-left of the window.",
    "Click the 'Save As...' entry of the open File menu.",
    "Type the file name session.kal into the name field and press Enter.",
    "Press ctrl s to open the save dialog.",
]


@dataclass(frozen=True)
class Config:
    out: Path
    model: str | None
    g: int
    max_tokens: int
    repeats: int
    votes: int
    screen: tuple[int, int]
    parity_groups: int


def parse_args(argv: Sequence[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--model", help="local model dir (default: the tiny random Qwen2.5-VL)")
    p.add_argument("--g", type=int, default=8, help="plans per request")
    p.add_argument("--max-tokens", type=int, default=32, help="max new tokens per sample")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (medians reported)")
    p.add_argument("--votes", type=int, default=4, help="judge votes per call")
    p.add_argument("--screen", default="640x400", help="screenshot size WxH")
    p.add_argument("--parity-groups", type=int, default=3, help="groups of G plans compared")
    a = p.parse_args(argv)
    if min(a.g, a.max_tokens, a.repeats, a.votes, a.parity_groups) < 1:
        p.error("--g, --max-tokens, --repeats, --votes and --parity-groups must be >= 1")
    try:
        w, h = parse_screen(a.screen)
    except ValueError as exc:
        p.error(f"--screen: {exc}")
    return Config(out=a.out, model=a.model, g=a.g, max_tokens=a.max_tokens, repeats=a.repeats,
                  votes=a.votes, screen=(w, h), parity_groups=a.parity_groups)


def png(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, color)
    draw = ImageDraw.Draw(img)
    for i, label in enumerate(("File", "Edit", "View", "Help")):
        draw.text((10 + 60 * i, 8), label, fill=(20, 20, 20))
    return encode_png(img)


def make_state(store_dir: Path, size: tuple[int, int]) -> StateRef:
    """A stored state: the current screenshot, the previous one and one past step."""
    store = ArtifactStore(f"file://{store_dir}")
    now = store.put(png(size, (200, 200, 210)), "image/png")
    before = store.put(png(size, (20, 90, 200)), "image/png")
    return StateRef(step_index=1, instruction=INSTRUCTION, app="kalgebra", screenshot=now,
                    previous_screenshot=before, screen_width=size[0], screen_height=size[1],
                    history=[HistoryStep(thought="Thought: open the menu\nAction: click File",
                                         action_text="click(start_box='(20,10)')",
                                         screenshot=ImageRef(ref=before))])


# --- log-prob parity ------------------------------------------------------------------------


@dataclass(frozen=True)
class Parity:
    tokens: int
    max_abs_diff: float
    mean_abs_diff: float
    groups: int


async def logprob_parity(backend: ChatBackend, model_dir: str | Path, store_dir: Path,
                         state: StateRef, *, g: int, max_tokens: int, groups: int,
                         temperature: float = 1.0) -> Parity:
    """Plans sampled by ``backend`` (at ``temperature``, with token ids and log-probs) against
    the trainer's own log-probs of the same ids under the weights in ``model_dir`` (taken at
    ``logits / temperature``, as the trainer does)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from coda.inference.encoding import ensure_processor_workaround
    from trainer.data import GroupDataError, artifact_reader, encode_group, planner_messages
    from trainer.logprobs import shared_logprobs

    ensure_processor_workaround()
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    reader = artifact_reader(f"file://{store_dir}")
    messages = planner_messages(state, reader)
    diffs: list[torch.Tensor] = []
    for seed in range(groups * 10):  # the random model may sample image placeholders: skip
        if len(diffs) == groups:
            break
        options = GenerateOptions(n=g, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                  logprobs=True)
        completions = await backend.chat(messages, options)
        group = Group(state=state, target=Click(x=20, y=10), planner_version="base", candidates=[
            Candidate(plan=c.text.replace("\x00", "\ufffd"), reward=0.0,
                      token_ids=list(c.token_ids or []), logprobs=list(c.logprobs or []))
            for c in completions])
        try:
            enc = encode_group(processor, group, reader)
        except GroupDataError:
            continue
        with torch.no_grad():
            mine = shared_logprobs(model, enc, temperature)
        sampler = enc.padded_sampler_logprobs()
        assert sampler is not None
        mask = enc.mask().bool()
        diffs.append((mine - sampler).abs()[mask])
    if not diffs:
        raise RuntimeError("no group without image placeholder tokens was sampled")
    every = torch.cat(diffs)
    return Parity(tokens=int(every.numel()), max_abs_diff=float(every.max()),
                  mean_abs_diff=float(every.mean()), groups=len(diffs))


# --- timings --------------------------------------------------------------------------------


async def median_s(call: Callable[[], Awaitable[Any]], repeats: int) -> tuple[float, list[float]]:
    await call()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        await call()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), runs


async def measure(backend: ChatBackend, cfg: Config, messages: list[dict[str, Any]],
                  judge_messages: list[dict[str, Any]]) -> dict[str, Any]:
    from coda.prompts.executor import build_executor_messages

    async def plans() -> None:
        await backend.chat(messages, GenerateOptions(n=cfg.g, max_tokens=cfg.max_tokens,
                                                     temperature=1.0, seed=1))

    shot = next(p["image_url"]["url"] for p in messages[-1]["content"]
                if isinstance(p, dict) and p.get("type") == "image_url")

    async def actions() -> None:
        for thought in THOUGHTS:
            conv = build_executor_messages(INSTRUCTION, [], shot, thought)
            await backend.chat(conv, GenerateOptions(max_tokens=cfg.max_tokens, temperature=1.0,
                                                     continue_final_message=True))

    async def judge() -> None:
        await backend.chat(judge_messages, GenerateOptions(n=cfg.votes, max_tokens=cfg.max_tokens,
                                                           temperature=1.0))

    plan_s, plan_runs = await median_s(plans, cfg.repeats)
    act_s, act_runs = await median_s(actions, cfg.repeats)
    judge_s, judge_runs = await median_s(judge, cfg.repeats)
    return {"plans_per_s": cfg.g / plan_s, "plan_request_s": plan_s,
            "actions_per_s": len(THOUGHTS) / act_s, "judge_call_s": judge_s,
            "runs_s": {"plan": plan_runs, "act": act_runs, "judge": judge_runs}}


async def run(cfg: Config, work: Path) -> dict[str, Any]:
    from coda.inference.openai_compat import OpenAICompatBackend
    from coda.inference.transformers_local import TransformersBackend
    from coda.prompts.judge import JudgeFrame, build_judge_messages
    from coda_app.vllm import (
        VLLM_VERSION,
        Role,
        ServeConfig,
        install,
        serve_command,
        start_server,
        stop_server,
        vllm_python,
    )
    from trainer.data import artifact_reader, planner_messages

    model = cfg.model
    if model is None:
        from coda.inference.tiny import build_tiny_qwen25vl

        model = str(build_tiny_qwen25vl(work / "tiny"))
    store_dir = work / "store"
    state = make_state(store_dir, cfg.screen)
    messages = planner_messages(state, artifact_reader(f"file://{store_dir}"))
    shot = next(p["image_url"]["url"] for p in messages[-1]["content"]
                if isinstance(p, dict) and p.get("type") == "image_url")
    judge_messages = build_judge_messages(INSTRUCTION, [
        JudgeFrame(step=i + 1, image_url=shot, thought=t) for i, t in enumerate(THOUGHTS)])

    python = vllm_python() or install()
    serve = ServeConfig(role=Role.planner, model=model, served_name="tiny", port=free_port(),
                        max_model_len=8192, images=8, max_lora_rank=16, dtype="float32",
                        kv_cache_gib=1)
    started = time.perf_counter()
    proc = start_server(serve, python=python, log_path=work / "vllm.log")
    start_s = time.perf_counter() - started
    vllm = OpenAICompatBackend(f"http://127.0.0.1:{serve.port}/v1", model="tiny", retries=0,
                               timeout=600)
    try:
        first = time.perf_counter()
        await vllm.chat([{"role": "user", "content": "hello"}], GenerateOptions(max_tokens=2))
        first_s = time.perf_counter() - first
        log.info("bench.vllm_ready", start_s=round(start_s, 1), first_request_s=round(first_s, 1))
        on_vllm = await measure(vllm, cfg, messages, judge_messages)
        parity = await logprob_parity(vllm, model, store_dir, state, g=cfg.g,
                                      max_tokens=cfg.max_tokens, groups=cfg.parity_groups)
    finally:
        await vllm.aclose()
        stop_server(proc)
    local = TransformersBackend(model)
    on_transformers = await measure(local, cfg, messages, judge_messages)
    return {
        "vllm": on_vllm, "transformers": on_transformers,
        "plans_per_s_ratio": on_vllm["plans_per_s"] / on_transformers["plans_per_s"],
        "actions_per_s_ratio": on_vllm["actions_per_s"] / on_transformers["actions_per_s"],
        "logprob_parity": asdict(parity),
        "vllm_start_s": start_s, "vllm_first_request_s": first_s,
        "vllm_version": VLLM_VERSION,
        "vllm_flags": " ".join("MODEL" if a == model else a
                               for a in serve_command(serve, "python")[0][3:]),
        "g": cfg.g, "max_tokens": cfg.max_tokens, "repeats": cfg.repeats, "votes": cfg.votes,
        "screen": f"{cfg.screen[0]}x{cfg.screen[1]}", "model": cfg.model or "tiny (built)",
        "machine": machine(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    configure_bench_logging()
    with tempfile.TemporaryDirectory(prefix="coda-serving-") as tmp:
        result = asyncio.run(run(cfg, Path(tmp)))
    if cfg.out.exists():  # figures measured by tests/vllm/test_versions.py are kept
        old = json.loads(cfg.out.read_text())
        result.update({k: old[k] for k in RECORDED_BY_TESTS if k in old})
    write_result(cfg.out, result)
    log.info("bench.serving_written", out=str(cfg.out),
             plans_per_s_ratio=round(result["plans_per_s_ratio"], 2),
             mean_abs_diff=result["logprob_parity"]["mean_abs_diff"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
