"""The one screenshot reader: inline images and artifact-store keys, through ONE rule."""

from __future__ import annotations

import base64
import os
import zlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from coda.artifacts import ArtifactStore
from coda.contracts.services_api import ImageRef
from coda.imagerefs import (
    ImageLimits,
    ImageRefError,
    ScreenshotReader,
    check_image,
    decode_b64,
    read_ref,
    ref_field,
)
from tests.fixtures.images import image_bytes, raw_png

FIELD = ("steps", 2, "screenshot")
MISSING = f"sha256/ab/{'ab' * 32}.png"
SMALL = (12, 8)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with one tiny (wrong) IDAT chunk."""
    return raw_png(width, height, zlib.compress(b"\0" * 64))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def read_error(reader: ScreenshotReader, image: ImageRef) -> ImageRefError:
    with pytest.raises(ImageRefError) as info:
        reader.read(image, FIELD)
    return info.value


@pytest.fixture
def reader(tmp_path: Path) -> ScreenshotReader:
    return ScreenshotReader(str(tmp_path / "store"))


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_inline_base64_of_each_format(reader: ScreenshotReader, fmt: str) -> None:
    data = image_bytes(SMALL, fmt=fmt)
    checked = reader.read(ImageRef(b64=b64(data)), FIELD)
    assert checked.data == data and checked.size == (12, 8)


@pytest.mark.parametrize("prefix", ["data:image/png;base64,", "DATA:image/PNG;base64,",
                                    "data:image/jpeg;base64,", "data:image/webp;base64,"])
def test_inline_data_url(reader: ScreenshotReader, prefix: str) -> None:
    data = image_bytes(SMALL)
    assert reader.read(ImageRef(b64=prefix + b64(data)), FIELD).data == data


def test_wrapped_base64_lines_are_accepted() -> None:
    data = image_bytes((60, 40))
    wrapped = "\n".join(b64(data)[i:i + 76] for i in range(0, len(b64(data)), 76))
    assert decode_b64(wrapped, ("b64",)) == data


@pytest.mark.parametrize(("payload", "message"), [
    ("%%% not base64", "not valid base64"),
    ("data:image/png;base64", "a data URL must look like"),
    ("data:image/png,abc", "a data URL must look like"),
    ("data:text/plain;base64,aGk=", "a data URL must look like"),
    ("data:image/png;base64,@@", "not valid base64"),
    (b64(b"just some text"), "not a PNG, JPEG or WebP image"),
    (b64(image_bytes(SMALL, fmt="GIF")), "not a PNG, JPEG or WebP image"),
    (b64(image_bytes((200, 100))[:60]), "not a decodable image"),
    (b64(b"\x89PNG\r\n\x1a\n" + b"\0" * 40), "not a decodable image"),
])
def test_bad_inline_image_names_the_b64_field(reader: ScreenshotReader, payload: str,
                                              message: str) -> None:
    error = read_error(reader, ImageRef(b64=payload))
    assert error.field == (*FIELD, "b64") and error.status == 422 and not error.missing
    assert message in str(error)


def test_store_key(tmp_path: Path) -> None:
    data = image_bytes(SMALL, fmt="WEBP")
    key = ArtifactStore(str(tmp_path)).put(data, "image/webp")
    for url in (str(tmp_path), f"file://{tmp_path}"):
        assert ScreenshotReader(url).read(ImageRef(ref=key), FIELD).data == data


def test_missing_key_is_missing(reader: ScreenshotReader) -> None:
    error = read_error(reader, ImageRef(ref=MISSING))
    assert error.field == (*FIELD, "ref") and error.missing and error.status == 422
    assert "store" not in str(reader.store.root) or str(reader.store.root) not in str(error)


@pytest.mark.parametrize("ref", ["../../etc/passwd", "/etc/passwd", "file:///etc/passwd",
                                 "http://127.0.0.1:9/x.png", "s3://bucket/x.png",
                                 "episode/0.png", f"{MISSING}/../../x"])
def test_a_ref_is_only_a_store_key(ref: str) -> None:
    with pytest.raises(ValidationError) as info:
        ImageRef(ref=ref)
    assert info.value.errors()[0]["loc"] == ("ref",)


def test_symlink_out_of_the_store_is_refused(tmp_path: Path) -> None:
    store_dir, outside = tmp_path / "store", tmp_path / "secret.png"
    outside.write_bytes(image_bytes(SMALL))
    key = ArtifactStore(str(store_dir)).put(image_bytes((5, 5)), "image/png")
    target = store_dir / key
    target.unlink()
    target.symlink_to(outside)
    error = read_error(ScreenshotReader(str(store_dir)), ImageRef(ref=key))
    assert error.field == (*FIELD, "ref") and "links outside the artifact store" in str(error)
    assert str(tmp_path) not in str(error)
    # a symlink that stays inside the store is fine
    inner = ArtifactStore(str(store_dir)).put(image_bytes((7, 7)), "image/png")
    os.replace(store_dir / inner, store_dir / "real.png")
    (store_dir / inner).symlink_to(store_dir / "real.png")
    assert ScreenshotReader(str(store_dir)).read(ImageRef(ref=inner), FIELD).size == (7, 7)


def test_pixel_limit_is_checked_before_decoding() -> None:
    limits = ImageLimits(max_pixels=100 * 100)
    for data in (png_header_only(20_000, 20_000), png_header_only(101, 100)):
        with pytest.raises(ImageRefError) as info:
            check_image(data, ("b64",), limits)  # the IDAT is wrong: it was never decoded
        assert info.value.status == 413 and "exceeds the limit" in str(info.value)
    bomb = png_header_only(100_000, 100_000)  # beyond Pillow's own bomb threshold
    with pytest.raises(ImageRefError) as info:
        check_image(bomb, ("b64",), ImageLimits())
    assert info.value.status == 413
    assert check_image(image_bytes((100, 100)), ("b64",), limits).size == (100, 100)


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP"])
def test_pixel_limit_for_jpeg_and_webp(fmt: str) -> None:
    with pytest.raises(ImageRefError) as info:
        check_image(image_bytes((300, 200), fmt=fmt), ("b64",),
                    ImageLimits(max_pixels=300 * 199))
    assert info.value.status == 413


@pytest.mark.parametrize("size", [(3000, 10), (10, 3000), (1001, 20)])
def test_extreme_aspect_ratio_is_a_clear_422(size: tuple[int, int]) -> None:
    with pytest.raises(ImageRefError) as info:
        check_image(image_bytes(size), ("b64",), ImageLimits())
    assert info.value.status == 422 and "aspect ratio" in str(info.value)
    assert check_image(image_bytes((1000, 20)), ("b64",), ImageLimits()).size == (1000, 20)


def test_oversized_store_object_is_413(tmp_path: Path) -> None:
    key = ArtifactStore(str(tmp_path)).put(image_bytes((300, 300)), "image/png")
    small = ScreenshotReader(str(tmp_path), ImageLimits(max_bytes=100))
    error = read_error(small, ImageRef(ref=key))
    assert error.status == 413 and error.field == (*FIELD, "ref")


async def test_aread_off_the_loop(tmp_path: Path) -> None:
    key = ArtifactStore(str(tmp_path)).put(image_bytes(SMALL, fmt="JPEG"), "image/jpeg")
    reader = ScreenshotReader(str(tmp_path))
    assert (await reader.aread(ImageRef(ref=key), ("screenshot",))).mime == "image/jpeg"
    with pytest.raises(ImageRefError) as info:
        await reader.aread(ImageRef(b64="!!"), ("screenshot",))
    assert info.value.field == ("screenshot", "b64")


def test_ref_field() -> None:
    assert ref_field(ImageRef(ref=MISSING), ("a", 1)) == ("a", 1, "ref")
    assert ref_field(ImageRef(b64="k"), ()) == ("b64",)


def test_read_ref_reads_a_key_through_the_store(tmp_path: Path) -> None:
    data = image_bytes(SMALL)
    key = ArtifactStore(str(tmp_path)).put(data, "image/png")
    assert read_ref(key, str(tmp_path)) == data
    for bad in ("/etc/passwd", "../x.png", "http://127.0.0.1:9/x.png"):
        with pytest.raises(ImageRefError):
            read_ref(bad, str(tmp_path))
