"""Kubeconfig files: written for the local control plane's users, read for an existing cluster.

The local control plane authenticates with bearer tokens and is verified against the session's CA; the
files hold a token, so they are 0600 like every other generated secret.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.pki import write_private


def write_kubeconfig(path: Path, server: str, ca_path: Path, user: str, token: str) -> Path:
    """A single-context kubeconfig: `user` with `token` against `server`, TLS verified with `ca_path`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "capfleet-test", "cluster": {"server": server, "certificate-authority": str(ca_path)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "capfleet-test", "context": {"cluster": "capfleet-test", "user": user}}],
        "current-context": "capfleet-test",
    }
    return write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


@dataclass(frozen=True)
class KubeconfigView:
    """What the harness needs to know about the current context of someone else's kubeconfig."""

    server: str
    ca_path: Path | None
    token: str | None


def read_current_context(kubectl: Kubectl, scratch: Path) -> KubeconfigView:
    """Resolve the current context (with kubectl, so every kubeconfig feature is honoured).

    Inline CA data is written to `scratch`/ca.crt so callers always get a path.
    """
    raw = json.loads(kubectl("config", "view", "--minify", "--raw", "--flatten", "-o", "json"))
    cluster = raw["clusters"][0]["cluster"]
    user = raw["users"][0]["user"] if raw.get("users") else {}
    ca_path: Path | None = None
    if cluster.get("certificate-authority-data"):
        ca_path = write_private(scratch / "ca.crt", base64.b64decode(cluster["certificate-authority-data"]))
    elif cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
    return KubeconfigView(server=cluster["server"], ca_path=ca_path, token=user.get("token"))
