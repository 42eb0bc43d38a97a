"""``python -m worker.guest serve ...`` (what the local provider runs)."""

from worker.guest.cli import app

app()
