"""Decoupled GRPO (stage 1) and SFT (stage 2) on the planner; lands with the trainer issue."""
