"""Running a capfleet operator as a subprocess, exactly as users run it: `python -m <package>`.

Integration and end-to-end tests start operators this way (not in-process) so that a test can kill one
mid-way, read its `/metrics` and liveness endpoints, and see the same start-up path a container runs,
from compiled bytecode as in the images (`capfleet_e2e.bytecode`).
"""

from __future__ import annotations

import itertools
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from capfleet_e2e import bytecode
from capfleet_e2e.processes import Component, free_port, wait_for

# Numbers each operator process of a test session, so two replicas of one module keep separate logs.
_processes = itertools.count(1)


class OperatorProcess:
    """One operator process with its own health and metrics ports on 127.0.0.1."""

    def __init__(
        self,
        module: str,
        kubeconfig: str,
        log_dir: Path,
        *,
        namespaces: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        verbose: bool = True,
    ) -> None:
        self.module = module
        self.verbose = verbose
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.namespaces = list(namespaces)
        self.extra_args = list(extra_args)
        # As if in a pod of `default` (the downward API's POD_NAMESPACE): where an operator keeps what
        # lives in its own namespace (baremetal-provision's token key), unless a test says otherwise.
        self.env = {**bytecode.compiled_env(), "POD_NAMESPACE": "default", **(env or {})}
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.component: Component | None = None
        self.starts = 0
        self.serial = next(_processes)

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    @property
    def name(self) -> str:
        return f"operator-{self.module}-{self.serial}-{self.starts}"

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        """Start (or restart) the process and wait until its liveness endpoint answers."""
        self.starts += 1
        argv = [
            sys.executable,
            "-m",
            self.module,
            "--standalone",
            *(["--verbose"] if self.verbose else []),
            "--kubeconfig",
            self.kubeconfig,
            "--health-address",
            f"127.0.0.1:{self.health_port}",
            "--metrics-address",
            f"127.0.0.1:{self.metrics_port}",
        ]
        for namespace in self.namespaces:
            argv += ["--namespace", namespace]
        argv += self.extra_args
        self.component = Component(self.name, argv, self.log_dir, env=self.env)
        wait_for(f"{self.module} liveness", self.healthy, timeout, watch=[self.component])
        return self

    def running(self) -> bool:
        return self.component is not None and self.component.process.poll() is None

    def healthy(self) -> bool | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
            ) as response:
                return True if response.status == 200 else None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the crash a fault test wants, with no chance to clean up."""
        if self.component is not None and self.component.process.poll() is None:
            self.component.process.send_signal(signal.SIGKILL)
            self.component.process.wait(timeout=10)

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
