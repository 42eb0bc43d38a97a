"""A real uvicorn server in a thread for the kit's tests (real HTTP, real sockets)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from coda.procs import free_port


def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free port; yields its base URL, stops it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
