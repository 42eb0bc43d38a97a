"""Low-resolution rescaling of judge screenshots."""

from __future__ import annotations

from PIL import Image

from judge_service.images import fit_within


def test_fit_within_keeps_aspect_and_never_upscales() -> None:
    assert fit_within(Image.new("RGB", (1920, 1080)), (960, 540)).size == (960, 540)
    assert fit_within(Image.new("RGB", (1280, 800)), (960, 540)).size == (864, 540)
    small = Image.new("RGB", (100, 50))
    assert fit_within(small, (960, 540)) is small
