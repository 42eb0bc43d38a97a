"""The GRASS GIS adapter (ScienceBoard ``sci/GrassGIS``): its steps (:mod:`.steps`) and
checkers (:mod:`.checkers`)."""

from __future__ import annotations

from worker.tasks.adapters.base import AppAdapter
from worker.tasks.adapters.grass.checkers import CHECKERS
from worker.tasks.adapters.grass.steps import STEPS

GRASS = AppAdapter(name="GrassGIS", steps=STEPS, checkers=CHECKERS)
