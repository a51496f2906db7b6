"""A local sshd in front of each test hypervisor, reached the way production hypervisors are.

The libvirt-vm operator reaches libvirtd over SSH with key auth and host-key verification, so tests need
a real sshd: one per hypervisor, on 127.0.0.1 and a free port, with a generated ed25519 host key and a
generated client key. The client's private key (OpenSSH PEM text) and the known_hosts line are kept in
memory for tests to put into Kubernetes Secrets; only sshd's own files are on disk, in a temp directory.
It can be stopped and started again on the same port with the same keys, to test reconnection.
"""

from __future__ import annotations

import getpass
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Self

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.processes import Component, free_port, stop_pid, wait_for

SSHD = "/usr/sbin/sshd"
START_TIMEOUT = 20.0
HOST = "127.0.0.1"


def generate_ed25519() -> tuple[str, str]:
    """A new ed25519 key pair: (OpenSSH private key PEM text, `ssh-ed25519 AAAA…` public key)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return private, public


def known_hosts_name(host: str, port: int) -> str:
    """How known_hosts (and paramiko) name a host: bare on port 22, else `[host]:port`."""
    return host if port == 22 else f"[{host}]:{port}"


class Sshd:
    """An sshd on 127.0.0.1 that lets `user` in with `client_private_key`, and nothing else."""

    def __init__(
        self,
        name: str,
        log_dir: Path | None = None,
        user: str | None = None,
        mount_namespace: Callable[[], int] | None = None,
    ):
        """`mount_namespace` gives the PID of a process whose mount namespace sshd (and so the sessions'
        virt-ssh-helper) runs in: a private libvirtd's (`LibvirtDaemon.namespace_pid`)."""
        self.name = name
        self.mount_namespace = mount_namespace
        self.host = HOST
        self.user = user or getpass.getuser()
        self.port = free_port()
        self.log_dir = log_dir or artifacts_dir() / "libvirt" / name
        self.dir = Path(tempfile.mkdtemp(prefix=f"capfleet-sshd-{name}-"))
        host_private, self.host_public_key = generate_ed25519()
        self.client_private_key, self.client_public_key = generate_ed25519()
        self._write_files(host_private)
        self.process: Component | None = None

    @property
    def known_hosts(self) -> str:
        """The known_hosts line for this sshd's host key."""
        return self.known_hosts_as(self.host)

    def known_hosts_as(self, host: str) -> str:
        """The known_hosts line for this sshd's host key under another address of it (a relay's)."""
        return f"{known_hosts_name(host, self.port)} {self.host_public_key}\n"

    def _write_files(self, host_private: str) -> None:
        host_key = self.dir / "ssh_host_ed25519_key"
        host_key.touch(mode=0o600)
        host_key.write_text(host_private)
        (self.dir / "authorized_keys").write_text(f"{self.client_public_key} capfleet-tests\n")
        (self.dir / "sshd_config").write_text(
            f"Port {self.port}\n"
            f"ListenAddress {self.host}\n"
            f"HostKey {host_key}\n"
            f"PidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            f"AllowUsers {self.user}\n"
            "UsePAM no\n"
            # The key files live under /tmp, which StrictModes rejects as world-writable.
            "StrictModes no\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "AllowTcpForwarding no\n"
            "X11Forwarding no\n"
            "LogLevel VERBOSE\n"
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Self:
        """Start sshd (again) and wait until it greets on its port."""
        # sshd's privilege-separation directory; systemd's unit creates it on a normal host.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        argv = [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")]
        if self.mount_namespace is not None:
            argv = ["nsenter", "--mount", f"--target={self.mount_namespace()}", *argv]
        self.process = Component(f"sshd-{self.name}", argv, self.log_dir)
        try:
            wait_for(f"sshd on {self.host}:{self.port}", self._greets, START_TIMEOUT, [self.process])
        except BaseException:
            self.stop()
            raise
        return self

    def _greets(self) -> bool | None:
        with socket.create_connection((self.host, self.port), timeout=2) as s:
            return True if s.recv(64).startswith(b"SSH-2.0-") else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.process.poll() is None

    def stop(self) -> None:
        """Stop sshd and end its open sessions; `start()` brings it back on the same port and keys."""
        if self.process is None or self.process.process.poll() is not None:
            return
        sessions = _children(self.process.pid)
        self.process.stop()
        for pid in sessions:
            stop_pid(pid, "an sshd session")

    def close(self) -> None:
        """Stop sshd and remove its files."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The PIDs of a process's children (sshd forks one per connection)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]
