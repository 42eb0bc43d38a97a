"""The master service: REST API, Redis lease queue, Postgres records, status page, metrics."""
