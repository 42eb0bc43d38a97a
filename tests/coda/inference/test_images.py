from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from coda.inference.images import (
    bound_pixels,
    bounded_size,
    decode_image,
    decode_part,
    encode_data_url,
    image_part,
    part_url,
)
from tests.fixtures.images import image_bytes


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_data_url_roundtrip(fmt: str) -> None:
    image = Image.new("RGB", (64, 48), (200, 30, 30))
    url = encode_data_url(image, fmt)
    assert url.startswith(f"data:image/{'png' if fmt == 'PNG' else 'jpeg'};base64,")
    decoded = decode_image(url)
    assert decoded.size == (64, 48)
    assert decoded.mode == "RGB"


def test_encode_bytes_sniffs_the_format() -> None:
    assert encode_data_url(image_bytes((40, 30))).startswith("data:image/png;base64,")
    with pytest.raises(ValueError, match="neither PNG"):
        encode_data_url(b"not an image")


def test_rgba_png_decodes_to_rgb() -> None:
    url = encode_data_url(Image.new("RGBA", (8, 8), (1, 2, 3, 4)))
    assert decode_image(url).mode == "RGB"


def test_decode_from_path_and_file_url(tmp_path: Path) -> None:
    path = tmp_path / "shot.png"
    path.write_bytes(image_bytes((50, 20)))
    assert decode_image(str(path)).size == (50, 20)
    assert decode_image(path.as_uri()).size == (50, 20)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:image/png,abc", "base64"),
        ("data:image/png;base64,@@@", "invalid base64"),
        ("data:image/png;base64,aGVsbG8=", "not a decodable image"),
        ("/nonexistent/shot.png", "cannot read"),
    ],
)
def test_bad_urls_name_the_field(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        decode_image(url)
    assert str(info.value).startswith("image_url")


def test_parts() -> None:
    image = Image.new("RGB", (10, 10))
    part = image_part(image)
    assert part["type"] == "image_url"
    assert part_url(part).startswith("data:image/png")
    assert part_url({"type": "image_url", "image_url": "data:x"}) == "data:x"
    assert decode_part(part).size == (10, 10)
    assert decode_part({"type": "image", "image": image}).size == (10, 10)
    with pytest.raises(ValueError, match=r"image_url\.url"):
        part_url({"type": "image_url", "image_url": {}})


@pytest.mark.parametrize(
    ("size", "max_pixels", "expected"),
    [
        ((1280, 800), 1280 * 800, (1280, 800)),
        ((1280, 800), 320 * 200, (320, 200)),
        ((2000, 10), 5000, (1000, 5)),
        ((1, 1), 1, (1, 1)),
    ],
)
def test_bounded_size(size: tuple[int, int], max_pixels: int, expected: tuple[int, int]) -> None:
    assert bounded_size(*size, max_pixels) == expected


@pytest.mark.parametrize("size", [(1920, 1080), (333, 777), (4097, 3)])
def test_bounded_size_respects_the_bound_and_aspect(size: tuple[int, int]) -> None:
    w, h = bounded_size(*size, 100_000)
    assert w * h <= 100_000
    assert abs(w / h - size[0] / size[1]) / (size[0] / size[1]) < 0.35


def test_bound_pixels() -> None:
    image = Image.new("RGB", (1280, 800))
    assert bound_pixels(image, None) is image
    assert bound_pixels(image, 2_000_000) is image
    assert bound_pixels(image, 640 * 400).size == (640, 400)
    with pytest.raises(ValueError, match="max_pixels"):
        bound_pixels(image, 0)
