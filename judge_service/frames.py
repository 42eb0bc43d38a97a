"""Subsampling of long trajectories: first, last and evenly spaced middle frames."""

from __future__ import annotations


def select_frames(n_steps: int, max_frames: int) -> list[int]:
    """0-based indices of the steps to show (all when ``n_steps <= max_frames``).

    The first and the last step are always kept; the other ``max_frames - 2`` are spread
    evenly over the middle. Indices stay the original ones, so labels remain "step i+1".
    """
    if n_steps < 0:
        raise ValueError("n_steps must be >= 0")
    if max_frames < 2:
        raise ValueError("max_frames must be >= 2")
    if n_steps <= max_frames:
        return list(range(n_steps))
    middle = max_frames - 2
    span = n_steps - 2  # candidates 1 .. n_steps-2
    picked = [1 + (2 * k + 1) * span // (2 * middle) for k in range(middle)]
    return [0, *picked, n_steps - 1]
