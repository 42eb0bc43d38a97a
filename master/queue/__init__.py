"""The Redis side of the job queue: ready sets, leases and tokens (rebuildable from Postgres)."""
