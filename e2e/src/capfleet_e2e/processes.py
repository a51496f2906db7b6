"""Running the harness's daemons (etcd, kube-apiserver, ...) as child processes, and waiting on them.

Each component writes stdout and stderr to its own log file in the artifacts directory, so a failed run
can be diagnosed afterwards; a component that dies early raises an error carrying the tail of its log.
Waiting is always a poll of a real condition with a deadline, never a bare sleep.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL = 0.1


class ComponentError(RuntimeError):
    """A component could not be started or died."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a text file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Component:
    """One child process with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        *,
        inherit_env: bool = True,
    ):
        """`env` is added to this process's environment, or with `inherit_env=False` is all the child gets
        (with PATH): nothing of the test run's, such as a kubeconfig."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        with self.log_path.open("ab") as log:
            log.write(f"# {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**(os.environ if inherit_env else {"PATH": os.environ["PATH"]}), **(env or {})},
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        """Raise `ComponentError` with the log's tail if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with code {code}; last lines of {self.log_path}:\n{tail(self.log_path)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if the process has not exited after `timeout` seconds."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    watch: Sequence[Component] = (),
) -> T:
    """Poll `probe` until it returns something other than None; fail after `timeout` seconds.

    Any component in `watch` that dies meanwhile raises at once, with the tail of its log.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        for component in watch:
            component.check_alive()
        try:
            result = probe()
        except Exception as e:
            last_error = e
        else:
            if result is not None:
                return result
        if time.monotonic() >= deadline:
            logs = "".join(f"\nlast lines of {c.log_path}:\n{tail(c.log_path)}" for c in watch)
            raise ComponentError(
                f"timed out after {timeout}s waiting for {what} (last error: {last_error}){logs}"
            )
        time.sleep(POLL_INTERVAL)


def stop_pid(pid: int, what: str, timeout: float = 10.0) -> None:
    """SIGTERM a process that is not our child, then wait for it to be gone (SIGKILL after `timeout`)."""

    def gone() -> bool | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return True if stat.rsplit(")", 1)[1].split()[0] == "Z" else None  # a zombie has exited

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_for(f"{what} (pid {pid}) to exit", gone, timeout)
    except ComponentError:
        os.kill(pid, signal.SIGKILL)
