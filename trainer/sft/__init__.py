"""Stage 2: judged trajectories -> a dataset (``coda dataset export``) -> supervised
fine-tuning of a generalist planner (``coda train sft``)."""
