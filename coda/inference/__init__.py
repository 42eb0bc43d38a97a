"""Inference backends shared by the planner, executor and judge services."""
