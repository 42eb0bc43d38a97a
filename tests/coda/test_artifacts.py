import pytest

from coda.artifacts import ArtifactError, ArtifactStore
from tests.fixtures.images import image_bytes

PNG = image_bytes((8, 8), (0, 0, 0))


def test_put_get_content_addressed(tmp_path):
    store = ArtifactStore(str(tmp_path))
    key = store.put(PNG, "image/png")
    assert key == store.put(PNG, "image/png")
    assert store.get(key) == PNG and store.exists(key)
    with pytest.raises(KeyError):
        store.get("sha256/00/" + "0" * 64 + ".png")


@pytest.mark.parametrize("key", ["../x", "/etc/passwd", "sha256/../../etc/passwd",
                                 "sha256/ab/" + "a" * 64 + ".png/../x", "sha256/ab/short.png"])
def test_keys_cannot_escape(tmp_path, key):
    with pytest.raises(ArtifactError):
        ArtifactStore(str(tmp_path)).get(key)


def test_limits_and_types(tmp_path):
    store = ArtifactStore(str(tmp_path), max_bytes=100)
    with pytest.raises(ArtifactError, match="exceeds"):
        store.put(PNG + b"\0" * 200, "image/png")
    with pytest.raises(ArtifactError, match="not allowed"):
        store.put(b"x", "text/html")
    with pytest.raises(ArtifactError, match="not image/png"):
        ArtifactStore(str(tmp_path)).put(b"hello", "image/png")


def test_memory_filesystem_url():
    store = ArtifactStore("memory://coda-test")
    key = store.put(b'{"a": 1}', "application/json")
    assert store.get(key) == b'{"a": 1}'


@pytest.mark.parametrize("data", [
    PNG, b"\x89PNG\r\n", b"{not json", b'{"a": NaN}', b"[Infinity]", b"\xff\xfe{}",
    b"[" * 100_000 + b"]" * 100_000, b"", b'{"a": 1} {"b": 2}',
], ids=["png", "png-magic", "broken", "nan", "infinity", "not-utf8", "deep", "empty", "two"])
def test_json_artifacts_must_parse(tmp_path, data):
    with pytest.raises(ArtifactError, match="not application/json"):
        ArtifactStore(str(tmp_path)).put(data, "application/json")


def test_json_artifact_accepted(tmp_path):
    store = ArtifactStore(str(tmp_path))
    key = store.put('{"thought": "caf\u00e9", "n": [1, 2.5, null]}'.encode(), "application/json")
    assert key.endswith(".json")
