"""Shared fixtures live in tests/fixtures/ (one module per area) and are loaded here."""

pytest_plugins = ["tests.fixtures.infra", "tests.fixtures.models", "tests.fixtures.master",
                  "tests.fixtures.desktops", "tests.fixtures.services", "tests.fixtures.docker",
                  "tests.fixtures.vcsim"]
