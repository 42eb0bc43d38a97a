"""Postgres records (SQLAlchemy 2)."""
