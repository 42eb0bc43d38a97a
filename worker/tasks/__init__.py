"""Task setup and checkers on a desktop: ScienceBoard ``initialize`` / ``evaluate`` items and
OSWorld ``config`` / ``evaluator`` entries, generic ones through the guest, application-specific
ones through one adapter per application (``worker.tasks.adapters``)."""

from worker.tasks.checkers import episode_end, run_checkers
from worker.tasks.context import TaskContext
from worker.tasks.setup import run_setup

__all__ = ["TaskContext", "episode_end", "run_checkers", "run_setup"]
