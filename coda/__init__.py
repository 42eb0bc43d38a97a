"""CODA: a trainable dual-brain computer-use agent system (shared core)."""

__version__ = "0.1.0"
