"""Shared fixtures live in tests/fixtures/ (one module per area) and are loaded here."""

pytest_plugins = ["tests.fixtures.infra", "tests.fixtures.models", "tests.fixtures.master",
                  "tests.fixtures.desktops", "tests.fixtures.services", "tests.fixtures.docker",
                  "tests.fixtures.vcsim"]


# The tests that must hold on a busy machine the way CI meets it (docs/testing.md, "On a busy
# machine"): those that drive a real application on a desktop (local slots, desktop containers,
# vcsim's VMs) and those that start vcsim, vLLM or `coda up`. Marked `busy` here, from what
# they use, so a new test of that kind is in the selection without a list to keep.
BUSY_FIXTURES = frozenset({"desktop_host", "desktop_image", "vcsim_bin"})
BUSY_MARKERS = ("vllm",)
BUSY_TESTS = ("test_up_", "test_closed_loop")  # `coda up` / `coda learn` as processes


def pytest_collection_modifyitems(config: object, items: list[object]) -> None:
    import pytest

    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        name = getattr(item, "name", "")
        if (names & BUSY_FIXTURES or any(item.get_closest_marker(m)  # type: ignore[attr-defined]
                                         for m in BUSY_MARKERS)
                or any(name.startswith(t) or f"/{t}" in str(getattr(item, "path", ""))
                       for t in BUSY_TESTS)):
            item.add_marker(pytest.mark.busy)  # type: ignore[attr-defined]
