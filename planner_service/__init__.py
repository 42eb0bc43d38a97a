"""Planner service (cerebrum): next-step thoughts from a Qwen2.5-VL planner, n samples per
request, every sample tagged with the adapter version that produced it."""
