"""What a stack runs (:class:`StackShape`), apart from how it runs it (:mod:`coda_app.stack`):
``coda up``'s options hold one, and the CLI imports this module on images without the model
services' packages (the master's: no Pillow, no torch), so it imports nothing heavier than
the standard library."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

ModelsMode = Literal["tiny", "replay"]


@dataclass(frozen=True, kw_only=True)
class StackShape:
    """What a stack runs: its models (the tiny random ones, or the replayed outputs; a
    directory or a served URL per role), its local desktop slots, the trainer, vLLM.
    ``coda up``'s options are one, and so is a stack's configuration."""

    models: ModelsMode = "tiny"
    model_dirs: dict[str, str | None] = field(default_factory=dict)
    model_urls: dict[str, str | None] = field(default_factory=dict)
    slots: int = 2
    train: bool = False
    vllm: bool = False
    """Serve the tiny model with vLLM (``coda_app.stack_vllm``); the planner pulls the
    trainer's versions from the master instead of the trainer pushing them."""

    def shape(self) -> dict[str, Any]:
        """The :class:`StackShape` fields of this object, to build another shape from."""
        return {f.name: getattr(self, f.name) for f in fields(StackShape)}
