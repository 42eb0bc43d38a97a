"""Pydantic contracts for everything that crosses a process boundary."""
