"""Commands on the desktop: OSWorld's ``/execute`` and ``/setup/launch`` semantics, with a bound
on run time, and a mark on every process the agent starts so they can all be closed later.

Request shape (OSWorld): ``{"command": str | [str], "shell": bool}``; a string with
``shell=false`` is split like a shell would; arguments starting with ``~/`` are expanded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from coda import procs
from coda.guestenv import DESKTOP_MARK, TOKEN_ENV, is_guestinfo_env


def normalize(command: str | list[str], shell: bool) -> str | list[str]:
    """OSWorld's rules: split a string when not using a shell; expand leading ``~/``."""
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        return [os.path.expanduser(a) if a.startswith("~/") else a for a in command]
    return command


def python_shim_dir() -> Path:
    """A directory holding ``python`` (a script running this interpreter), put first on the
    children's PATH so OSWorld's ``python -c "import pyautogui; ..."`` payloads find pyautogui,
    while ``python3`` stays the system's (applications such as GRASS need its modules)."""
    tag = hashlib.sha1(sys.executable.encode()).hexdigest()[:10]
    d = Path(tempfile.gettempdir()) / f"coda-guest-bin-{os.getuid()}-{tag}"
    d.mkdir(exist_ok=True)
    script = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    shim = d / "python"
    if not shim.exists() or shim.read_text() != script:
        tmp = d / f".python-{os.getpid()}"
        tmp.write_text(script)
        tmp.chmod(0o755)
        tmp.replace(shim)
    return d


def child_env(desktop_id: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a command the agent starts: its own, less the agent's token and the
    VM's guestinfo values (which may carry it), plus ``extra`` and the desktop's mark."""
    env = {k: v for k, v in os.environ.items()
           if k != TOKEN_ENV and not is_guestinfo_env(k)}
    env.update(extra)
    env[DESKTOP_MARK] = desktop_id or "coda-guest"
    env["PATH"] = f"{python_shim_dir()}{os.pathsep}{env.get('PATH', os.defpath)}"
    for leak in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH"):
        env.pop(leak, None)
    return env


@dataclass
class Completed:
    output: str
    error: str
    returncode: int


class CommandTimeout(RuntimeError):
    pass


def run(command: str | list[str], *, shell: bool, timeout: float, env: Mapping[str, str],
        cwd: str | None = None) -> Completed:
    """Run to completion within ``timeout`` seconds; on expiry the whole process group dies."""
    proc = subprocess.Popen(command, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=dict(env), cwd=cwd,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        shown = command if isinstance(command, str) else " ".join(command)
        raise CommandTimeout(f"Command '{shown}' timed out after {timeout:g} seconds") from None
    return Completed(out, err, proc.returncode)


_launched: list[subprocess.Popen[bytes]] = []


def launch(command: str | list[str], *, shell: bool, env: Mapping[str, str]) -> int:
    """Start without waiting (its own session, output discarded); returns the pid."""
    reap()
    proc = subprocess.Popen(command, shell=shell, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(env), start_new_session=True)
    _launched.append(proc)
    return proc.pid


def reap() -> None:
    """Collect launched processes that exited, so none stays a zombie."""
    _launched[:] = [p for p in _launched if p.poll() is None]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def kill_marked(desktop_id: str) -> int:
    """Every process marked with ``desktop_id`` killed (:func:`coda.procs.kill_marked`), the
    launched ones collected; how many were found."""
    killed = procs.kill_marked(desktop_id)
    reap()
    return killed
