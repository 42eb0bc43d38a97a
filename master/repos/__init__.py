"""Repositories: every SQL statement of the master, one module per table family, all on the
asyncpg pool of :mod:`master.db.pg` (``$1`` parameters). Each function takes a ``Conn`` (the
pool, or a connection inside the caller's transaction) and knows nothing of Redis."""
