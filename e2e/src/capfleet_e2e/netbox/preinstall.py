"""NetBox releases installed in the background, at idle priority, while the session's other tests run.

A release's first install on a machine is mostly its database migration: many minutes of one core of
single-threaded Python (releases.py). Done before the first test, as the other cached parts are, it would
add those minutes to every run on a new machine, CI's included. A test session leaves much of the machine
idle (its tests wait on API servers, VMs and controllers), so the plugin starts the install beside the
tests at the lowest CPU and I/O priority, runs the tests that use NetBox after all the others, and waits
for it before the first of them, outside that test's timeout. On a machine that has the releases it
costs nothing: the install finds them and exits.

A background install that fails is not fatal here: the first test to need the release installs it again
in the foreground (`ensure_release`), which fails that test with the error, and the background's own
output is in `preinstall.log` beside NetBox's other logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from capfleet_e2e.netbox.releases import MIGRATION_TIMEOUT

log = logging.getLogger(__name__)

# Once the session waits, nothing else runs: both releases migrate side by side at full speed.
WAIT_TIMEOUT = MIGRATION_TIMEOUT
STOP_TIMEOUT = 30.0


class Preinstall:
    """`python -m capfleet_e2e.netbox.releases` for some releases, in a process group of its own."""

    def __init__(self, versions: Sequence[str], log_dir: Path):
        self.versions = list(versions)
        self.log_path = log_dir / "preinstall.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.waited = False

    def start(self) -> Preinstall:
        argv = ["nice", "-n", "19", "ionice", "-c", "3", sys.executable, "-m", "capfleet_e2e.netbox.releases"]
        argv += ["--log-dir", str(self.log_path.parent), *self.versions]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def wait(self) -> None:
        """Return once the install has ended, well or not (see the module's docstring), or has been stopped
        after WAIT_TIMEOUT seconds of waiting."""
        if self.process is None or self.waited:
            return
        self.waited = True
        if self.process.poll() is None:
            log.info("waiting for NetBox %s to install (%s)", ", ".join(self.versions), self.log_path)
            try:
                self.process.wait(timeout=WAIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("NetBox's background install took %.0f s more; stopping it", WAIT_TIMEOUT)
                self.stop()
        if self.process.returncode != 0:
            log.warning("NetBox's background install failed (exit %s); see %s", self.process.returncode,
                        self.log_path)  # fmt: skip

    def stop(self) -> None:
        """Interrupt the install if it still runs: its PostgreSQL and Redis shut down, the unfinished
        release is left unstamped (the next session installs it afresh)."""
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid  # start_new_session: the group is the install and all it started
        os.killpg(group, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)  # whatever has not exited by now
        self.process.wait()
