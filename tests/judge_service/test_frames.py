"""Subsampling of long trajectories and low-resolution rescaling."""

from __future__ import annotations

import pytest
from PIL import Image

from judge_service.frames import fit_within, select_frames


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


def test_fit_within_keeps_aspect_and_never_upscales() -> None:
    assert fit_within(Image.new("RGB", (1920, 1080)), (960, 540)).size == (960, 540)
    assert fit_within(Image.new("RGB", (1280, 800)), (960, 540)).size == (864, 540)
    small = Image.new("RGB", (100, 50))
    assert fit_within(small, (960, 540)) is small
