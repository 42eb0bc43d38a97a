"""Fuzz tests: schemathesis over each service's OpenAPI surface (see tests/fuzz/harness.py)."""
