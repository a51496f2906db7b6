"""A BMC for each test server: sushy-tools' Redfish emulator with its libvirt driver, or for the scale lab
its fake driver (made-up Systems with no machine behind them, which tell `notify_url` of every change).

It listens on 127.0.0.1 only, over HTTPS with a certificate from a CA generated for this run (clients
verify it with `ca_cert`), and requires basic auth against an htpasswd file holding a bcrypt hash of a
random password (sushy-tools accepts nothing else; its session login does not work). Each
libvirt domain of the instance at `libvirt_uri` is a Redfish System addressed by its libvirt UUID; each
fake System by its UUID or name.
"""

from __future__ import annotations

import secrets
import shutil
import ssl
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Self

import bcrypt

from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.pki import generate_pki, write_private
from capfleet_e2e.processes import Component, free_port, wait_for

START_TIMEOUT = 60.0
USERNAME = "capfleet-bmc"


class RedfishEmulator:
    """One `sushy-emulator` process; `start()`/`stop()` or `with`."""

    def __init__(
        self,
        libvirt_uri: str = "",
        log_dir: Path | None = None,
        username: str = USERNAME,
        *,
        fake_systems: list[dict[str, Any]] | None = None,
        notify_url: str = "",
    ):
        self.libvirt_uri = libvirt_uri
        self.fake_systems = fake_systems
        self.notify_url = notify_url
        self.log_dir = log_dir or artifacts_dir() / "baremetal"
        self.username = username
        self.password = secrets.token_urlsafe(15)  # 20 characters: IPMI's limit, so a virtualbmc can share it
        self.root = Path(tempfile.mkdtemp(prefix="capfleet-redfish-"))
        self.root.chmod(0o700)
        self.port = 0
        self.ca_cert = self.root / "pki" / "ca.crt"
        self.process: Component | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def system_url(self, system_id: str) -> str:
        """The Redfish System URL of a domain (`system_id`: its libvirt UUID)."""
        return f"{self.base_url}/redfish/v1/Systems/{system_id}"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts only this run's CA."""
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def _write_config(self) -> Path:
        pki = generate_pki(self.root / "pki")
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        htpasswd = write_private(self.root / "htpasswd", f"{self.username}:{hashed}\n".encode())
        settings = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(pki.serving_cert),
            "SUSHY_EMULATOR_SSL_KEY": str(pki.serving_key),
            "SUSHY_EMULATOR_AUTH_FILE": str(htpasswd),
            "SUSHY_EMULATOR_IGNORE_BOOT_DEVICE": False,
        }
        if self.fake_systems is None:
            settings["SUSHY_EMULATOR_LIBVIRT_URI"] = self.libvirt_uri
        else:
            settings |= {
                "SUSHY_EMULATOR_FAKE_DRIVER": True,
                # The fake driver keeps its Systems in a SQLite file there: this run's, not /tmp's.
                "SUSHY_EMULATOR_STATE_DIR": str(self.root / "state"),
                "SUSHY_EMULATOR_FAKE_SYSTEMS": self.fake_systems,
                "EXTERNAL_NOTIFICATION_URL": self.notify_url,
            }
        text = "".join(f"{key} = {value!r}\n" for key, value in settings.items())
        return write_private(self.root / "emulator.conf", text.encode())

    def start(self) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self._write_config()
        emulator = Path(sys.executable).parent / "sushy-emulator"
        argv = [str(emulator), "--config", str(config)]
        self.process = Component(f"sushy-emulator-{self.port}", argv, self.log_dir)
        try:
            wait_for("the Redfish emulator", self._ready, START_TIMEOUT, [self.process])
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool | None:
        # The service root needs no auth; a verified TLS handshake shows the certificate is in place.
        url = f"{self.base_url}/redfish/v1/"
        with urllib.request.urlopen(url, context=self.ssl_context(), timeout=5) as r:
            return True if r.status == 200 else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        shutil.rmtree(self.root, ignore_errors=True)
