"""One reader for screenshots given as ImageRef: inline base64, store keys, URLs and paths."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest
from PIL import Image

from coda.artifacts import ArtifactStore
from coda.contracts.services_api import ImageRef
from coda.imagerefs import (
    ImageRefError,
    decode_image_ref,
    load_image_ref,
    open_image,
    read_ref,
    ref_field,
)

FIELD = ("steps", 2, "screenshot")


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (12, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (30, 120, 200)).save(buf, format=fmt)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_error(image: ImageRef, artifacts_url: str = "/unused") -> ImageRefError:
    with pytest.raises(ImageRefError) as info:
        decode_image_ref(image, FIELD, artifacts_url)
    return info.value


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_inline_base64_of_each_format(fmt: str) -> None:
    data = image_bytes(fmt)
    assert decode_image_ref(ImageRef(b64=b64(data)), FIELD, "/unused") == data


def test_inline_data_url() -> None:
    data = image_bytes()
    image = ImageRef(b64=f"data:image/png;base64,{b64(data)}")
    assert decode_image_ref(image, FIELD, "/unused") == data


@pytest.mark.parametrize(("payload", "message"), [
    ("%%% not base64", "not valid base64"),
    (b64(b"just some text"), "not a PNG, JPEG or WebP image"),
    (b64(image_bytes("GIF")), "not a PNG, JPEG or WebP image"),
])
def test_bad_inline_image_names_the_b64_field(payload: str, message: str) -> None:
    error = decode_error(ImageRef(b64=payload))
    assert isinstance(error, ValueError)
    assert error.field == (*FIELD, "b64")
    assert not error.missing
    assert message in str(error)


@pytest.mark.parametrize("url_of", [str, lambda p: f"file://{p}"], ids=["path", "file-url"])
def test_store_key_under_the_artifacts_url(tmp_path: Path, url_of: Callable[[Path], str],
                                           ) -> None:
    data = image_bytes()
    key = ArtifactStore(str(tmp_path)).put(data, "image/png")
    assert decode_image_ref(ImageRef(ref=key), FIELD, url_of(tmp_path)) == data


def test_missing_store_key_is_missing(tmp_path: Path) -> None:
    error = decode_error(ImageRef(ref=f"sha256/ab/{'ab' * 32}.png"), str(tmp_path))
    assert error.field == (*FIELD, "ref")
    assert error.missing


@pytest.mark.parametrize("key", ["../../etc/passwd", "a.png", "episode/0.png",
                                 f"sha256/ab/{'ab' * 32}.png/../../x"])
def test_keys_outside_the_store_shape_are_refused(tmp_path: Path, key: str) -> None:
    (tmp_path / "a.png").write_bytes(image_bytes())
    error = decode_error(ImageRef(ref=key), str(tmp_path))
    assert error.field == (*FIELD, "ref")
    assert not error.missing
    assert "invalid artifact key" in str(error)


def test_absolute_path_and_full_urls(tmp_path: Path) -> None:
    data = image_bytes("JPEG")
    path = tmp_path / "shot.jpg"
    path.write_bytes(data)
    assert read_ref(str(path), str(tmp_path)) == data
    assert read_ref(f"file://{path}", f"file://{tmp_path}") == data
    with fsspec.open("memory://coda-imagerefs/shot.jpg", "wb") as fh:
        fh.write(data)
    assert decode_image_ref(ImageRef(ref="memory://coda-imagerefs/shot.jpg"), FIELD, "/x") == data


@pytest.mark.parametrize("ref", ["/no/such/dir/shot.png", "memory://coda-imagerefs/none.png"])
def test_missing_path_or_url_is_missing(ref: str) -> None:
    error = decode_error(ImageRef(ref=ref), artifacts_url="/no/such")
    assert error.field == (*FIELD, "ref")
    assert error.missing


@pytest.mark.parametrize("ref", ["/etc/passwd", "file:///etc/passwd", "/tmp/../etc/passwd",
                                 "ftp://example.org/x.png", "{root}/../outside.png"])
def test_refs_outside_the_store_are_refused(tmp_path: Path, ref: str) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (tmp_path / "outside.png").write_bytes(image_bytes("PNG"))
    error = decode_error(ImageRef(ref=ref.format(root=root)), artifacts_url=str(root))
    assert error.field == (*FIELD, "ref") and not error.missing
    assert "not allowed" in str(error) or "only read inside" in str(error)


def test_ref_that_is_not_an_image(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_bytes(b"not an image")
    error = decode_error(ImageRef(ref=str(tmp_path / "notes.png")), artifacts_url=str(tmp_path))
    assert error.field == (*FIELD, "ref")
    assert not error.missing


async def test_load_image_ref_off_the_loop(tmp_path: Path) -> None:
    data = image_bytes("WEBP")
    key = ArtifactStore(str(tmp_path)).put(data, "image/webp")
    assert await load_image_ref(ImageRef(ref=key), ("screenshot",), str(tmp_path)) == data
    with pytest.raises(ImageRefError) as info:
        await load_image_ref(ImageRef(b64="!!"), ("screenshot",), str(tmp_path))
    assert info.value.field == ("screenshot", "b64")


def test_open_image_and_ref_field() -> None:
    assert open_image(image_bytes(size=(20, 10)), ("s", "b64")).size == (20, 10)
    truncated = image_bytes(size=(200, 100))[:60]
    with pytest.raises(ImageRefError) as info:
        open_image(truncated, ("s", "ref"))
    assert info.value.field == ("s", "ref")
    assert "not a decodable image" in str(info.value)
    assert ref_field(ImageRef(ref="k"), ("a", 1)) == ("a", 1, "ref")
    assert ref_field(ImageRef(b64="k"), ()) == ("b64",)
