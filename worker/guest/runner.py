"""Typed actions without a new Python process per action.

OSWorld runs every action as ``python -c "import pyautogui; ..."`` (a fresh interpreter, about
250 ms each). The agent instead keeps one runner process with pyautogui imported, sends it the
code :func:`coda.actions.to_pyautogui` produced, one JSON line per action, and kills and
restarts it when an action outlives its time bound.

``python -m worker.guest.runner`` is the runner itself; :class:`ActionRunner` drives it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any


class ActionFailed(RuntimeError):
    pass


class ActionTimeout(RuntimeError):
    pass


class ActionRunner:
    """One runner process per display; actions are serialised."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "worker.guest.runner"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env,
                bufsize=1)
        return self._proc

    def start(self) -> None:
        """Start the runner ahead of the first action (pyautogui's import is then paid)."""
        with self._lock:
            self._ensure()

    def run(self, code: str, *, timeout: float) -> None:
        """Execute pyautogui ``code``; raises :class:`ActionFailed` or :class:`ActionTimeout`."""
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"code": code}) + "\n")
                proc.stdin.flush()
            except BrokenPipeError:
                self._kill()
                raise ActionFailed("the action runner exited") from None
            line = _readline(proc.stdout, timeout)
            if line is None:
                self._kill()
                raise ActionTimeout(f"action did not finish within {timeout:g} s")
            if not line:
                self._kill()
                raise ActionFailed("the action runner exited (is the display up?)")
            reply = json.loads(line)
            if not reply.get("ok"):
                raise ActionFailed(str(reply.get("error")))

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._kill()


def _readline(stream: IO[str], timeout: float) -> str | None:
    """A line within ``timeout`` seconds ('' at end of file), None on expiry."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            return stream.readline()


def main() -> None:
    """Runner loop: one JSON request per stdin line, one JSON reply per line."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the executed code prints must not corrupt the replies
    sys.stdout = sys.stderr
    from worker.guest import keyboard
    from worker.guest.xsession import ensure_xauthority

    ensure_xauthority()
    import pyautogui

    pyautogui.FAILSAFE = False
    pyautogui.PAUSE = 0
    keyboard.install(pyautogui)
    for line in sys.stdin:
        namespace: dict[str, Any] = {"pyautogui": pyautogui, "time": time}
        try:
            exec(json.loads(line)["code"], namespace)
            reply: dict[str, Any] = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - any error of the action's code is its result
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
