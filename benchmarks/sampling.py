"""Batched versus sequential sampling on the planner and executor services.

For one state (a 1280x800 screenshot, an instruction and a short history) the benchmark times

* the planner: one ``POST /v1/plan`` with ``n=N`` against ``N`` sequential calls with ``n=1``;
* the executor: one ``POST /v1/act/batch`` with ``N`` thoughts against ``N`` sequential
  ``POST /v1/act`` calls,

over real HTTP on the real services (uvicorn subprocesses on free ports), on the transformers
backend with a tiny random Qwen2.5-VL unless ``--model DIR`` names a local model (or
``--planner-url`` / ``--executor-url`` point at services already running, called with the
token in ``CODA_TOKEN``). Every path gets a warm-up call, then ``--repeats`` timed rounds; the
JSON holds the medians, the speedups (sequential / batch) and the tokens each path generated:
the API has no ``min_tokens``, so lengths are reported rather than forced. The executor's
results carry no token counts: its tokens are counted by re-tokenising the raw outputs with
the model's tokenizer.

    python -m benchmarks.sampling --out benchmarks/results/sampling.json --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
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
from coda.clients.executor import ExecutorClient
from coda.clients.planner import PlannerClient
from coda.contracts.services_api import (
    MAX_SAMPLES,
    ActBatchRequest,
    ActRequest,
    HistoryStep,
    ImageRef,
    PlanRequest,
    Sampling,
)
from coda.logging import get_logger
from coda_app.services import ServiceProcess

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "sampling.json"
START_TIMEOUT_S = 600.0
log = get_logger("benchmarks.sampling")

INSTRUCTION = "Open the File menu of KAlgebra and save the current session as 'session.kal'."
HISTORY = [
    "Thought: The KAlgebra window is open; I will open the File menu first.\n"
    "Action: click the 'File' menu in the top-left corner",
    "Thought: The File menu did not open; I will click on it again.\n"
    "Action: click the 'File' menu label",
]
THOUGHTS = [
    "Click the 'File' menu in the menu bar at the top-left of the window.",
    "Click the 'Save As...' entry of the open File menu.",
    "Type the file name session.kal into the name field and press Enter.",
    "Press ctrl s to open the save dialog.",
    "Scroll down in the file dialog to find the documents folder.",
    "Double-click the 'Documents' folder in the file dialog.",
    "Right-click the empty area of the console to open the context menu.",
    "Click the 'Save' button at the bottom right of the dialog.",
]


@dataclass(frozen=True)
class Config:
    out: Path
    model: str | None
    device: str
    n: int
    repeats: int
    max_tokens: int
    temperature: float
    threads: int | None
    screen: tuple[int, int]
    planner_url: str | None
    executor_url: str | None
    timeout_s: float


def parse_args(argv: Sequence[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--model", help="local model dir (default: a tiny random Qwen2.5-VL)")
    p.add_argument("--device", default="cpu", help="torch device of the services")
    p.add_argument("--n", type=int, default=8, help="plans / thoughts per state")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (medians reported)")
    p.add_argument("--max-tokens", type=int, default=64, help="max new tokens per sample")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--threads", type=int, help="torch threads of the services (OMP_NUM_THREADS)")
    p.add_argument("--screen", default="1280x800", help="screenshot size WxH")
    p.add_argument("--planner-url", help="use this running planner instead of starting one")
    p.add_argument("--executor-url", help="use this running executor instead of starting one")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per HTTP request")
    a = p.parse_args(argv)
    if a.n < 1 or a.repeats < 1 or a.max_tokens < 1:
        p.error("--n, --repeats and --max-tokens must be >= 1")
    if a.n > MAX_SAMPLES:
        p.error(f"--n: the services accept at most {MAX_SAMPLES} samples per request")
    if a.temperature <= 0:
        p.error("--temperature must be > 0 (greedy batches repeat one sample)")
    try:
        w, h = parse_screen(a.screen, minimum=28)
    except ValueError as exc:
        p.error(f"--screen: {exc}")
    return Config(out=a.out, model=a.model, device=a.device, n=a.n, repeats=a.repeats,
                  max_tokens=a.max_tokens, temperature=a.temperature, threads=a.threads,
                  screen=(w, h), planner_url=a.planner_url, executor_url=a.executor_url,
                  timeout_s=a.timeout)


# --- the state ------------------------------------------------------------------------------


def screenshot_png(width: int, height: int) -> bytes:
    """A deterministic desktop-like PNG: title bar, menu bar, panels, text."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (236, 236, 236))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, width, 28), fill=(52, 73, 94))
    draw.text((10, 8), "KAlgebra - session", fill=(255, 255, 255))
    for i, label in enumerate(("File", "Edit", "View", "Tools", "Help")):
        draw.text((10 + 60 * i, 36), label, fill=(20, 20, 20))
    draw.rectangle((0, 56, width // 4, height), fill=(250, 250, 250), outline=(180, 180, 180))
    for row in range(64, height - 20, 22):
        draw.text((width // 4 + 16, row), f"In[{row // 22}] := plot(sin(x) * {row})", fill=0)
    return encode_png(img)


@dataclass(frozen=True)
class State:
    screenshot: ImageRef
    history: list[HistoryStep]
    width: int
    height: int
    thoughts: list[str]


def make_state(width: int, height: int, n: int) -> State:
    shot = ImageRef(b64=base64.b64encode(screenshot_png(width, height)).decode("ascii"))
    thoughts = [THOUGHTS[i % len(THOUGHTS)] for i in range(n)]
    return State(shot, [HistoryStep(thought=t) for t in HISTORY], width, height, thoughts)


# --- the services ---------------------------------------------------------------------------


def service_env(cfg: Config, model: str, token: str) -> dict[str, dict[str, str]]:
    """Settings of the two services (transformers backend on ``model``, ``token`` accepted)."""
    common: dict[str, str] = {}
    if cfg.threads:
        common["OMP_NUM_THREADS"] = str(cfg.threads)
    env = {}
    for role in ("planner", "executor"):
        p = f"CODA_{role.upper()}_"
        env[role] = {**common, f"{p}BACKEND": "transformers", f"{p}MODEL": model,
                     f"{p}DEVICE": cfg.device, f"{p}LOG_LEVEL": "WARNING",
                     f"{p}INFERENCE_TOKENS": token, f"{p}ADMIN_TOKEN": secrets.token_hex(16),
                     f"{p}MAX_TOKENS": str(max(cfg.max_tokens, 1))}
    return env


@contextlib.contextmanager
def running_services(cfg: Config, workdir: Path,
                     ) -> Iterator[tuple[str, str, str | None, str | None]]:
    """(planner URL, executor URL, local model dir or None, token), starting what is not
    given (the services started here accept the token; running ones take ``CODA_TOKEN``)."""
    need = [role for role, url in (("planner", cfg.planner_url),
                                   ("executor", cfg.executor_url)) if url is None]
    model = cfg.model
    if need and model is None:
        from coda.inference.tiny import build_tiny_qwen25vl

        log.info("bench.building_tiny_model", dir=str(workdir / "tiny"))
        model = str(build_tiny_qwen25vl(workdir / "tiny"))
    token = os.environ.get("CODA_TOKEN") if not need else secrets.token_hex(16)
    envs = service_env(cfg, model or "", token or "")
    services = {role: ServiceProcess(role, envs[role], workdir / f"{role}.log") for role in need}
    try:
        for svc in services.values():
            svc.start()
        for name, svc in services.items():
            log.info("bench.waiting_for_service", service=name, url=svc.url)
            svc.wait_ready(START_TIMEOUT_S)
        planner = cfg.planner_url or services["planner"].url
        executor = cfg.executor_url or services["executor"].url
        yield planner, executor, model, token
    finally:
        for svc in services.values():
            svc.stop()


# --- the timed paths ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    seconds: float
    tokens: int
    chars: int


Counter = Callable[[str], int]


def sampling(cfg: Config) -> Sampling:
    return Sampling(temperature=cfg.temperature, top_p=1.0, max_tokens=cfg.max_tokens)


def plan_request(cfg: Config, st: State, n: int) -> PlanRequest:
    return PlanRequest(instruction=INSTRUCTION, screenshot=st.screenshot, history=st.history,
                       n=n, sampling=sampling(cfg))


async def plan_batch(client: PlannerClient, cfg: Config, st: State, _: Counter) -> Run:
    start = time.perf_counter()
    resp = await client.plan(plan_request(cfg, st, cfg.n))
    elapsed = time.perf_counter() - start
    return Run(elapsed, sum(p.completion_tokens for p in resp.plans),
               sum(len(p.text) for p in resp.plans))


async def plan_sequential(client: PlannerClient, cfg: Config, st: State, _: Counter) -> Run:
    tokens = chars = 0
    start = time.perf_counter()
    for _i in range(cfg.n):
        resp = await client.plan(plan_request(cfg, st, 1))
        tokens += sum(p.completion_tokens for p in resp.plans)
        chars += sum(len(p.text) for p in resp.plans)
    return Run(time.perf_counter() - start, tokens, chars)


async def act_batch(client: ExecutorClient, cfg: Config, st: State, count: Counter) -> Run:
    req = ActBatchRequest(instruction=INSTRUCTION, thoughts=st.thoughts, screenshot=st.screenshot,
                          history=st.history, screen_width=st.width, screen_height=st.height,
                          sampling=sampling(cfg))
    start = time.perf_counter()
    resp = await client.act_batch(req)
    elapsed = time.perf_counter() - start
    return Run(elapsed, sum(count(r.raw) for r in resp.results),
               sum(len(r.raw) for r in resp.results))


async def act_sequential(client: ExecutorClient, cfg: Config, st: State, count: Counter) -> Run:
    tokens = chars = 0
    start = time.perf_counter()
    for thought in st.thoughts:
        result = await client.act(ActRequest(
            instruction=INSTRUCTION, thought=thought, screenshot=st.screenshot,
            history=st.history, screen_width=st.width, screen_height=st.height,
            sampling=sampling(cfg)))
        tokens += count(result.raw)
        chars += len(result.raw)
    return Run(time.perf_counter() - start, tokens, chars)


TimedPath = Callable[[Any, Config, State, Counter], Awaitable[Run]]


async def measure(name: str, path: TimedPath, client: Any, cfg: Config, st: State,
                  count: Counter) -> list[Run]:
    """One warm-up call, then ``cfg.repeats`` timed rounds."""
    warm = await path(client, cfg, st, count)
    log.info("bench.warm_up", path=name, seconds=round(warm.seconds, 3))
    runs = []
    for i in range(cfg.repeats):
        run = await path(client, cfg, st, count)
        log.info("bench.timed", path=name, round=i + 1, of=cfg.repeats,
                 seconds=round(run.seconds, 3), tokens=run.tokens)
        runs.append(run)
    return runs


def token_counter(model: str | None) -> tuple[Counter, str]:
    """Count tokens of executor outputs with the model's tokenizer (characters otherwise)."""
    if model and Path(model).is_dir():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model)
        return (lambda text: len(tok.encode(text, add_special_tokens=False))), "tokens"
    return len, "characters"


# --- results --------------------------------------------------------------------------------


def median(runs: Sequence[Run], attr: str) -> float:
    return float(statistics.median(getattr(r, attr) for r in runs))


def speedup(sequential: float, batch: float) -> float | None:
    return round(sequential / batch, 3) if batch > 0 else None


def summarise(cfg: Config, runs: dict[str, list[Run]], *, model: str, unit: str,
              threads: int, load_before: Sequence[float]) -> dict[str, Any]:
    """The JSON figures: medians, speedups, tokens per path and the setup."""
    s = {k: median(v, "seconds") for k, v in runs.items()}
    return {
        "plan_batch_s": round(s["plan_batch"], 4),
        "plan_sequential_s": round(s["plan_sequential"], 4),
        "plan_batch_speedup": speedup(s["plan_sequential"], s["plan_batch"]),
        "act_batch_s": round(s["act_batch"], 4),
        "act_sequential_s": round(s["act_sequential"], 4),
        "act_batch_speedup": speedup(s["act_sequential"], s["act_batch"]),
        "tokens": {k: int(median(v, "tokens")) for k, v in runs.items()},
        "output_chars": {k: int(median(v, "chars")) for k, v in runs.items()},
        "tokens_note": ("median generated tokens per round, summed over the N samples; the "
                        "API has no min_tokens, so lengths are reported, not forced. Planner: "
                        "exact (completion_tokens). Executor: the raw outputs re-tokenised "
                        f"({unit}), approximate: decoded random tokens can re-tokenise longer"),
        "runs_s": {k: [round(r.seconds, 4) for r in v] for k, v in runs.items()},
        "best_s": {k: round(min(r.seconds for r in v), 4) for k, v in runs.items()},
        "n": cfg.n,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "repeats": cfg.repeats,
        "screen": f"{cfg.screen[0]}x{cfg.screen[1]}",
        "model": model,
        "backend": backend_of(cfg),
        "device": cfg.device,
        "torch_threads": threads,
        "machine": machine(load_before),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def backend_of(cfg: Config) -> str:
    """``transformers`` when this script started both services, else who served what."""
    if cfg.planner_url is None and cfg.executor_url is None:
        return "transformers"
    return (f"planner: {cfg.planner_url or 'transformers'}, "
            f"executor: {cfg.executor_url or 'transformers'}")


def torch_threads(cfg: Config) -> int:
    """The intra-op threads the service processes get (same environment as this one)."""
    if cfg.threads:
        return cfg.threads
    import torch

    return int(torch.get_num_threads())


async def bench(cfg: Config, planner_url: str, executor_url: str, token: str | None,
                count: Counter) -> dict[str, list[Run]]:
    st = make_state(*cfg.screen, cfg.n)
    runs: dict[str, list[Run]] = {}
    async with PlannerClient(planner_url, token=token, timeout=cfg.timeout_s,
                             retries=1) as planner:
        for name, plan_path in (("plan_batch", plan_batch), ("plan_sequential", plan_sequential)):
            log.info("bench.measuring", path=name, n=cfg.n)
            runs[name] = await measure(name, plan_path, planner, cfg, st, count)
    async with ExecutorClient(executor_url, token=token, timeout=cfg.timeout_s,
                              retries=1) as executor:
        for name, act_path in (("act_batch", act_batch), ("act_sequential", act_sequential)):
            log.info("bench.measuring", path=name, n=cfg.n)
            runs[name] = await measure(name, act_path, executor, cfg, st, count)
    return runs


def run(cfg: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="coda-bench-sampling-") as tmp, \
            running_services(cfg, Path(tmp)) as (planner_url, executor_url, model, token):
        count, unit = token_counter(model)
        load_before = os.getloadavg()
        runs = asyncio.run(bench(cfg, planner_url, executor_url, token, count))
        name = cfg.model or ("tiny random Qwen2.5-VL (coda.inference.tiny)" if model else "")
        return summarise(cfg, runs, model=name or "remote services", unit=unit,
                         threads=torch_threads(cfg), load_before=load_before)


def main(argv: Sequence[str] | None = None) -> int:
    configure_bench_logging()
    cfg = parse_args(argv)
    log.info("bench.sampling_start", n=cfg.n, repeats=cfg.repeats, max_tokens=cfg.max_tokens,
             device=cfg.device, model=cfg.model or "tiny")
    result = run(cfg)
    write_result(cfg.out, result)
    log.info("bench.done", out=str(cfg.out), plan_batch_speedup=result["plan_batch_speedup"],
             act_batch_speedup=result["act_batch_speedup"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
