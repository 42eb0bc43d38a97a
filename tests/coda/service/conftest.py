"""A real uvicorn server in a thread for the kit's tests (real HTTP, real sockets)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from coda.procs import free_port
from tests.fixtures.waiting import wait_for


def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free port; yields its base URL, stops it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the server to start", 20, interval=0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
