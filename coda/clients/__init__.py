"""Typed async HTTP clients for every CODA service (httpx)."""
