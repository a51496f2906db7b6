"""Using an existing cluster (CAPFLEET_TEST_KUBECONFIG) instead of starting a local control plane.

Some bugs only show on a real distribution, so the same integration tests can run against any cluster a
kubeconfig reaches. The harness installs capfleet's and Cluster API's CRDs there too, but never replaces
Cluster API CRDs that a real CAPI installation serves through its conversion webhook.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from capfleet_e2e import crds
from capfleet_e2e.kubebin import Kubectl, find_kubectl
from capfleet_e2e.kubeconfig import read_current_context


class ExistingCluster:
    """The current context of a user's kubeconfig; use as a context manager."""

    def __init__(self, kubeconfig: Path):
        if not kubeconfig.is_file():
            raise FileNotFoundError(f"kubeconfig {kubeconfig} (from CAPFLEET_TEST_KUBECONFIG) does not exist")
        self.kubeconfig = kubeconfig
        self.kubectl = Kubectl(find_kubectl(), kubeconfig)
        self.installed_crds: list[str] = []
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-existing-"))
        view = read_current_context(self.kubectl, self._tmp)
        self.server = view.server
        self.ca_path = view.ca_path
        self.admin_token = view.token

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Install the CRDs (the cluster itself is already running)."""
        try:
            self.installed_crds = crds.install_all(self.kubectl, keep_webhook_converted=True)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Remove the scratch directory; the cluster and the installed CRDs stay."""
        shutil.rmtree(self._tmp, ignore_errors=True)
