"""coda.procs: the one way CODA starts a process and waits until it is ready."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from coda.procs import (
    ephemeral_ports,
    free_port,
    start_process,
    start_ready,
    stop_process,
    wait_ready,
)
from tests.fixtures.waiting import wait_for


def test_ready_when_the_url_answers_2xx(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "logs" / "http.log"
    proc = start_ready([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                       f"http://127.0.0.1:{port}/", name="http.server", log=log, cwd=tmp_path,
                       timeout=60)
    try:
        assert proc.poll() is None
    finally:
        stop_process(proc)
    assert log.is_file()  # its folder made, its output kept


def test_a_free_port_lies_below_the_ephemeral_range_docker_also_draws_from(
        tmp_path: Path) -> None:
    low, high = ephemeral_ports()
    assert 0 < low < high
    ports = {free_port() for _ in range(20)}
    assert all(20_000 <= p < low for p in ports) and len(ports) > 1
    for p in ports:  # free: binds
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", p))
    garbled = tmp_path / "range"
    garbled.write_text("not numbers\n")
    assert ephemeral_ports(garbled) == (32768, 60999)


def test_a_callable_probe_and_the_environment(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    code = "import os, pathlib, time; pathlib.Path(os.environ['FLAG']).touch(); time.sleep(60)"
    proc = start_ready([sys.executable, "-c", code], flag.exists, name="toucher",
                       env={"FLAG": str(flag)}, timeout=30)
    stop_process(proc)
    assert flag.exists()


def test_an_exit_fails_at_once_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "boom.log"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"boom exited with 3 while starting(.|\n)*no config"):
        start_ready([sys.executable, "-c", "import sys; print('no config'); sys.exit(3)"],
                    lambda: False, name="boom", log=log, timeout=60)
    assert time.monotonic() - started < 30


def test_a_timeout_names_the_probe_and_stops_the_process(tmp_path: Path) -> None:
    log = tmp_path / "slow.log"
    proc = start_process([sys.executable, "-c", "print('warming up', flush=True); "
                          "import time; time.sleep(60)"], log=log)
    try:
        port = free_port()
        with pytest.raises(TimeoutError, match=rf"slow not ready after 1s \(waiting for "
                                               rf"http://127.0.0.1:{port}/readyz\)"):
            wait_ready(proc, f"http://127.0.0.1:{port}/readyz", name="slow", timeout=1, log=log)
        assert proc.poll() is None  # wait_ready leaves it to the caller
    finally:
        stop_process(proc)
    pid_file = tmp_path / "pid"
    code = ("import os, pathlib, time; print('warming up', flush=True); "
            "tmp = pathlib.Path(os.environ['PID_FILE'] + '.tmp'); tmp.write_text(str(os.getpid()));"
            " tmp.rename(os.environ['PID_FILE']); time.sleep(60)")

    def started_but_never_ready() -> bool:  # however loaded the machine, it started first
        wait_for(pid_file.exists, "the child's pid file", 60, interval=0.05)
        return False

    with pytest.raises(TimeoutError, match="warming up"):
        start_ready([sys.executable, "-c", code], started_but_never_ready, name="slow", log=log,
                    env={"PID_FILE": str(pid_file)}, timeout=0.5)
    with pytest.raises(ProcessLookupError):  # start_ready stopped (and reaped) it
        os.kill(int(pid_file.read_text()), 0)
