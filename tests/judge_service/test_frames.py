"""Subsampling of long trajectories."""

from __future__ import annotations

import pytest

from judge_service.frames import select_frames


@pytest.mark.parametrize(("n", "k", "expected"), [
    (0, 4, []),
    (3, 16, [0, 1, 2]),
    (16, 16, list(range(16))),
    (100, 4, [0, 25, 74, 99]),
    (10, 5, [0, 2, 5, 7, 9]),
    (5, 2, [0, 4]),
])
def test_select_frames(n: int, k: int, expected: list[int]) -> None:
    assert select_frames(n, k) == expected


@pytest.mark.parametrize("n", [17, 50, 257, 1000])
@pytest.mark.parametrize("k", [2, 3, 8, 16])
def test_select_frames_properties(n: int, k: int) -> None:
    picked = select_frames(n, k)
    assert len(picked) == k
    assert picked[0] == 0 and picked[-1] == n - 1
    assert picked == sorted(set(picked))


def test_select_frames_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        select_frames(5, 1)
    with pytest.raises(ValueError):
        select_frames(-1, 4)
