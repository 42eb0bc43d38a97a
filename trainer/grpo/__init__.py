"""Stage 1: decoupled GRPO on the planner (``coda trainer``), fed by the master's groups."""
