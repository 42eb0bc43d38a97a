"""The kit the three model services (planner, executor, judge) are built on.

* :mod:`.settings` — :class:`ModelServiceSettings`, the one settings base (tokens, limits,
  artifact store, listening address), with :class:`~coda.inference.spec.BackendSpec` for the
  model;
* :mod:`.state` — :class:`ModelState`, the one state/lifespan shape: backends load in the
  background, the screenshot reader, readiness;
* :mod:`.errors` — domain errors -> HTTP statuses, in one place;
* :mod:`.app` — :func:`create_model_app`, and the auth dependencies of the two roles;
* :mod:`.cli` — ``coda planner|executor|judge`` serving, with clear start-up refusals;
* :mod:`.process` — a service as a real process (tests, benchmarks);
* :mod:`.imports` — telling a missing extra from a real import error.

Submodules are imported where used (this package imports nothing heavy).
"""
