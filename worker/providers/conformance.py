"""The provider contract as a check any desktop must pass (like Gymnasium's ``check_env``)."""

from __future__ import annotations

import io

from PIL import Image

from coda.actions import Move
from coda.contracts.desktop import BrokenReason, DesktopBroken, Observation
from worker.providers.base import Desktop


def _check_observation(obs: Observation, fmt: str, size: tuple[int, int] | None) -> None:
    assert isinstance(obs, Observation), f"expected an Observation, got {type(obs).__name__}"
    assert obs.format == fmt, f"asked for {fmt}, got {obs.format}"
    img = Image.open(io.BytesIO(obs.image))
    assert img.format == fmt.upper(), f"image bytes are {img.format}, not {fmt}"
    assert img.size == (obs.width, obs.height), f"image {img.size} != {obs.width}x{obs.height}"
    if size is not None:
        assert img.size == size, f"expected {size}, got {img.size}"


def check_desktop(desktop: Desktop) -> None:
    """reset -> healthy full-size PNG; observe in another format and size; act; reset again;
    close twice; a closed desktop refuses work with a typed reason. Raises AssertionError."""
    obs = desktop.reset()
    _check_observation(obs, "png", None)
    sw, sh = obs.screen_width, obs.screen_height
    assert (obs.width, obs.height) == (sw, sh), "reset's observation must be full size"
    health = desktop.health()
    assert health.ok, f"a reset desktop must be healthy: {health}"
    half = desktop.observe(fmt="webp", width=sw // 2)
    _check_observation(half, "webp", (sw // 2, round(sh * (sw // 2) / sw)))
    assert (half.screen_width, half.screen_height) == (sw, sh), "screen size must be reported"
    result = desktop.act(Move(x=sw // 3, y=sh // 3))
    assert result.ok, f"a move must succeed: {result.error}"
    again = desktop.reset()
    _check_observation(again, "png", (sw, sh))
    desktop.close()
    desktop.close()
    try:
        desktop.observe()
    except DesktopBroken as exc:
        assert exc.reason is BrokenReason.START_FAILED, exc.reason
    else:
        raise AssertionError("a closed desktop must refuse to observe")
