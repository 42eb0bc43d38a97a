"""The accelerate configurations in deploy/accelerate load as accelerate's own config class,
and name classes that exist in the planner's model code."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers.models.qwen2_5_vl.modeling_qwen2_5_vl as qwen
from accelerate.commands.config.config_args import load_config_from_file

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "deploy" / "accelerate").glob("*.yaml"))


def test_the_three_configurations_are_there() -> None:
    assert {p.name for p in CONFIGS} == {"fsdp.yaml", "zero3.yaml", "cpu-2proc.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_accelerate_loads_the_configuration(path: Path) -> None:
    config = load_config_from_file(str(path))
    assert config.num_processes >= 2 and config.num_machines == 1
    kind = str(config.distributed_type)
    if path.name == "fsdp.yaml":
        assert kind.endswith("FSDP") and config.fsdp_config["fsdp_version"] == 2
        for cls in config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"].split(","):
            assert hasattr(qwen, cls), cls
    elif path.name == "zero3.yaml":
        assert kind.endswith("DEEPSPEED") and config.deepspeed_config["zero_stage"] == 3
    else:
        assert kind.endswith("MULTI_CPU") and config.use_cpu


def test_the_readme_launches_the_real_commands() -> None:
    text = (ROOT / "deploy" / "accelerate" / "README.md").read_text()
    for name in ("fsdp.yaml", "zero3.yaml"):
        assert f"accelerate launch --config_file deploy/accelerate/{name} -m coda_app.cli trainer" \
            in text
