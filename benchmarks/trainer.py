"""One GRPO update on a group of G plans: the shared prompt encoding versus encoding each
plan's full input separately.

The group is one stored state as the planner sees it (the CODA prompt, the current screenshot
and one past step with its screenshot, ``--screen`` pixels each) and G plans of about
``--plan-tokens`` tokens. Each path runs the trainer's real update
(``trainer.grpo.update.train_step``: forward, loss, backward, AdamW step) on the tiny random
Qwen2.5-VL (``--model DIR`` for a local model) in its OWN process, so the peak memory of one
path is not the other's: peak RSS on CPU, ``torch.cuda.max_memory_allocated`` on a GPU. A
warm-up update, then ``--repeats`` timed updates; the JSON holds medians.

    python benchmarks/trainer.py --out benchmarks/results/trainer.json

Figures: ``shared_prefix_ratio`` (shared / separate update wall time; target <= 0.4) and
``shared_prefix_cpu_ratio`` (the same in process CPU time, which other jobs on a shared
machine disturb less), per path
``update_s``, ``cpu_s``, ``tokens_per_s`` (plan tokens trained per second),
``processed_tokens`` (tokens through the language model), ``peak_memory_mb``, and the sizes
(prompt tokens, image tokens).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if not __package__:  # run as a script: this file must not shadow the ``trainer`` package
    sys.path[0] = str(ROOT)
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "trainer.json"
PLAN = ("Thought: To save the document I open the File menu in the top left corner and then "
        "choose Save As from the list.\nAction: click(start_box='(34,12)')")


def _png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, color)
    draw = ImageDraw.Draw(image)
    for x in range(0, size[0], 40):  # some structure, so the PNG is not trivial
        draw.line([(x, 0), (size[0] - x, size[1])], fill=(255 - color[0], 80, 160), width=3)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def build_group(artifacts: Path, screen: tuple[int, int], g: int, plan_tokens: int,
                tokenizer: Any) -> Any:
    from coda.actions import Click
    from coda.artifacts import ArtifactStore
    from coda.contracts.training import Candidate, Group, StateRef

    store = ArtifactStore(f"file://{artifacts}")
    current = store.put(_png((230, 230, 240), screen), "image/png")
    previous = store.put(_png((40, 60, 90), screen), "image/png")
    words = PLAN.split()
    cands = []
    for i in range(g):
        text = " ".join(words[i % 5:] + words[: i % 5]) * 20  # G different plans
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: plan_tokens - 1]
        cands.append(Candidate(plan=tokenizer.decode(ids), reward=i / g))
    state = StateRef(step_index=1, instruction="Save the open document as report.tex in the "
                     "home folder", app="texstudio", screenshot=current,
                     previous_screenshot=previous, screen_width=screen[0], screen_height=screen[1],
                     history=[{"thought": "Thought: The editor is open.\nAction: click",
                               "screenshot": previous}])
    return Group(state=state, target=Click(x=34, y=12), candidates=cands)


def peak_memory_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in its own process: warm-up + timed updates of ONE path."""
    import torch

    from trainer.config import TrainerConfig
    from trainer.data import PromptOptions, artifact_reader, encode_group
    from trainer.grpo.loop import loss_settings
    from trainer.grpo.update import train_step
    from trainer.policy import load_policy, make_optimizer

    torch.set_num_threads(args.threads)
    shared = args.child == "shared"
    cfg = TrainerConfig(model=args.model, device=args.device, shared_prompt=shared,
                        max_pixels=args.screen[0] * args.screen[1], lora_rank=16,
                        gradient_checkpointing=args.gradient_checkpointing)
    policy = load_policy(cfg)
    optimizer, _ = make_optimizer(policy.model, cfg)
    group = build_group(Path(args.artifacts), tuple(args.screen), args.g, args.plan_tokens,
                        policy.processor.tokenizer)
    enc = encode_group(policy.processor, group, artifact_reader(f"file://{args.artifacts}"),
                       PromptOptions(max_pixels=cfg.max_pixels))
    settings = loss_settings(cfg)
    times, cpu_times = [], []
    for i in range(args.repeats + 1):
        if policy.device.startswith("cuda"):
            torch.cuda.synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        train_step(policy.model, optimizer, [enc], settings)
        if policy.device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:  # the first update warms up
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    update_s = statistics.median(times)
    plan_tokens = sum(enc.lengths)
    image_tokens = int((enc.prompt["input_ids"] == policy.processor.image_token_id).sum())
    processed = enc.prompt_len + plan_tokens if shared else args.g * enc.prompt_len + plan_tokens
    return {"update_s": update_s, "runs_s": times, "cpu_s": statistics.median(cpu_times),
            "tokens_per_s": plan_tokens / update_s,
            "processed_tokens": processed, "processed_tokens_per_s": processed / update_s,
            "peak_memory_mb": peak_memory_mb(policy.device), "prompt_tokens": enc.prompt_len,
            "image_tokens": image_tokens, "plan_tokens": plan_tokens,
            "images_encoded": 2 if shared else 2 * args.g, "device": policy.device,
            "dtype": str(policy.dtype)}


def run_child(args: argparse.Namespace, path: str, artifacts: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.trainer", "--child", path, "--model", args.model,
           "--artifacts", str(artifacts), "--screen", *map(str, args.screen), "--g", str(args.g),
           "--plan-tokens", str(args.plan_tokens), "--repeats", str(args.repeats),
           "--threads", str(args.threads), "--device", args.device]
    if args.gradient_checkpointing:
        cmd.append("--gradient-checkpointing")
    env = {**os.environ, "CODA_LOG_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{path} path failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--model", default=None, help="local model dir (default: tiny, built)")
    parser.add_argument("--screen", type=int, nargs=2, default=[1280, 800], metavar=("W", "H"))
    parser.add_argument("--g", type=int, default=8, help="plans per group")
    parser.add_argument("--plan-tokens", type=int, default=120, help="about this many per plan")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--child", choices=["shared", "separate"], help=argparse.SUPPRESS)
    parser.add_argument("--artifacts", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdout.write(json.dumps(child(args)) + "\n")
        return 0
    with tempfile.TemporaryDirectory(prefix="coda-bench-trainer-") as tmp:
        if args.model is None:
            from coda.inference.tiny import build_tiny_qwen25vl

            args.model = str(build_tiny_qwen25vl(Path(tmp) / "tiny"))
            model_name = "tiny random Qwen2.5-VL (coda.inference.tiny)"
        else:
            model_name = args.model
        artifacts = Path(tmp) / "artifacts"
        shared = run_child(args, "shared", artifacts)
        separate = run_child(args, "separate", artifacts)
    result = {
        "shared_prefix_ratio": shared["update_s"] / separate["update_s"],
        "shared_prefix_cpu_ratio": shared["cpu_s"] / separate["cpu_s"],
        "target_ratio": 0.4,
        "shared": shared, "separate": separate,
        "g": args.g, "screen": list(args.screen), "repeats": args.repeats,
        "threads": args.threads, "gradient_checkpointing": args.gradient_checkpointing,
        "model": model_name, "machine": platform.machine(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stderr.write(f"shared / separate update time: {result['shared_prefix_ratio']:.3f} "
                     f"({shared['update_s']:.3f} s vs {separate['update_s']:.3f} s) -> "
                     f"{args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
