"""The CODA application: the ``coda`` command line, ``coda up``'s stack and live view,
``coda eval``, the model services as processes and the configuration reference. It composes
the services (master, worker, planner / executor / judge services, trainer) on top of the
shared library ``coda``; nothing imports it but tests and benchmarks (the layering contract in
pyproject.toml, checked by ``lint-imports`` and tests/test_layering.py)."""
