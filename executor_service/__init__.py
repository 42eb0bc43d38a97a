"""Executor service: a planner thought + screenshot -> one typed GUI action (UI-TARS-1.5)."""
