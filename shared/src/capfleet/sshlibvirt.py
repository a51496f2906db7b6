"""libvirt over SSH without an `ssh` binary or key files: paramiko carries virt-ssh-helper's stream.

libvirt's own `qemu+ssh://` transport runs the `ssh` command and reads keys and known_hosts from disk. The
libvirt-vm operator holds its keys in Kubernetes Secrets instead, so it opens the SSH connection itself
with paramiko (the private key parsed from memory, the host key checked against the given known_hosts with
`RejectPolicy`: a wrong key raises `paramiko.BadHostKeyException` before anything is sent), runs
`virt-ssh-helper <remote URI>` on the hypervisor in an exec channel, bridges that channel to a private
local UNIX socket, and points libvirt-python at it with `qemu+unix:///system?socket=<that socket>`.

Every call here blocks: callers in an event loop run them in a thread (libvirt-vm's lane of them).
"""

from __future__ import annotations

import contextlib
import functools
import io
import select
import shlex
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capfleet import lean_imports

if TYPE_CHECKING:
    import libvirt
    import paramiko
else:
    libvirt = lean_imports.lazy("libvirt")
    # paramiko's ssh_config parser imports invoke, to run an ssh_config's `Match exec` lines: capfleet
    # reads no ssh_config, so invoke (58 modules, 2.6 MiB resident in libvirt-vm) is never loaded.
    lean_imports.refuse("invoke")
    paramiko = lean_imports.lazy("paramiko")

REMOTE_HELPER = "virt-ssh-helper"


@functools.cache
def quiet_lookups() -> None:
    """Lookups that miss are expected (and handled by the callers); libvirt would print each one to
    stderr. Set when the first connection opens, so a process that never opens one never loads libvirt."""
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


_CHUNK = 65536


class SSHLibvirtError(RuntimeError):
    """The SSH side worked (or failed without a more specific paramiko error) but libvirt did not."""


@dataclass(frozen=True)
class SSHTarget:
    """Where a hypervisor's libvirtd is and how to log in; `private_key` and `known_hosts` are file texts."""

    host: str
    user: str
    private_key: str
    known_hosts: str
    port: int = 22
    remote_uri: str = "qemu:///system"
    timeout: float = 10.0


def load_private_key(text: str) -> paramiko.PKey:
    """Parse an unencrypted OpenSSH or PEM private key (ed25519, ECDSA or RSA) from its text."""
    errors: list[str] = []
    key_classes: tuple[type[paramiko.PKey], ...] = (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)
    for cls in key_classes:
        try:
            return cls.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError) as e:
            errors.append(f"{cls.__name__}: {e}")
    raise paramiko.SSHException(f"unsupported or invalid private key ({'; '.join(errors)})")


def parse_known_hosts(text: str) -> paramiko.HostKeys:
    """The host keys of a known_hosts text (comments, blank and unparsable lines are skipped)."""
    keys = paramiko.HostKeys()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        if entry is None:
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys


def ssh_connect(target: SSHTarget) -> paramiko.SSHClient:
    """An authenticated SSH client; the host key must match `target.known_hosts` or nothing is sent."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    known = client.get_host_keys()
    for name, by_type in parse_known_hosts(target.known_hosts).items():
        for key_type, key in by_type.items():
            known.add(name, key_type, key)
    try:
        client.connect(
            target.host,
            port=target.port,
            username=target.user,
            pkey=load_private_key(target.private_key),
            look_for_keys=False,
            allow_agent=False,
            timeout=target.timeout,
            banner_timeout=target.timeout,
            auth_timeout=target.timeout,
            channel_timeout=target.timeout,
        )
    except BaseException:
        client.close()
        raise
    return client


class SSHLibvirtConnection:
    """One SSH session and the libvirt connection (`virConnect`, as `.conn`) that travels over it."""

    def __init__(self, target: SSHTarget):
        self.target = target
        self.client: paramiko.SSHClient | None = None
        self.channel: paramiko.Channel | None = None
        self.conn: Any = None
        self._stderr = bytearray()
        self._stop = threading.Event()
        self._bridge: threading.Thread | None = None

    def __enter__(self) -> Any:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def helper_stderr(self) -> str:
        """What virt-ssh-helper wrote to stderr (its reason when libvirt cannot connect)."""
        return self._stderr.decode(errors="replace")

    def open(self) -> Any:
        """Connect over SSH, start virt-ssh-helper, and return the libvirt connection."""
        try:
            self.client = ssh_connect(self.target)
            transport = self.client.get_transport()
            assert transport is not None
            transport.set_keepalive(15)
            self.channel = transport.open_session(timeout=self.target.timeout)
            self.channel.exec_command(f"{REMOTE_HELPER} {shlex.quote(self.target.remote_uri)}")
            sock_dir = Path(tempfile.mkdtemp(prefix="capfleet-libvirt-ssh-"))
            try:
                path = sock_dir / "sock"
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(str(path))
                listener.listen(1)
                self._bridge = threading.Thread(
                    target=self._serve, args=(listener, self.channel), name="ssh-libvirt-bridge", daemon=True
                )
                self._bridge.start()
                try:
                    quiet_lookups()
                    self.conn = libvirt.open(f"qemu+unix:///system?socket={path}")
                except libvirt.libvirtError as e:
                    raise SSHLibvirtError(f"{e}; {REMOTE_HELPER} said: {self.helper_stderr.strip()}") from e
            finally:
                shutil.rmtree(sock_dir, ignore_errors=True)
        except BaseException:
            self.close()
            raise
        return self.conn

    def _serve(self, listener: socket.socket, channel: paramiko.Channel) -> None:
        """Accept libvirt's one connection, then copy bytes both ways until either side ends."""
        with listener:
            listener.settimeout(self.target.timeout)
            try:
                local, _ = listener.accept()
            except OSError:
                channel.close()
                return
        with local:
            try:
                self._pump(local, channel)
            except OSError:
                pass
            finally:
                channel.close()

    def _pump(self, local: socket.socket, channel: paramiko.Channel) -> None:
        while not self._stop.is_set():
            readable, _, _ = select.select([local.fileno(), channel.fileno()], [], [], 0.5)
            while channel.recv_stderr_ready():
                self._stderr += channel.recv_stderr(_CHUNK)
            if channel.fileno() in readable:
                data = channel.recv(_CHUNK)
                if not data:
                    return
                local.sendall(data)
            if local.fileno() in readable:
                data = local.recv(_CHUNK)
                if not data:
                    return
                channel.sendall(data)

    def is_alive(self) -> bool:
        """Whether the SSH transport is up and libvirt still answers on it."""
        if self.client is None or self.conn is None:
            return False
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            return False
        try:
            return bool(self.conn.isAlive())
        except libvirt.libvirtError:
            return False

    def close(self) -> None:
        """Close the SSH connection, then libvirt; safe to call more than once, and from another thread
        while a call waits for an answer that is not coming: the transport goes first, so that call (and
        libvirt's own goodbye, itself a call) ends at once instead of waiting."""
        self._stop.set()
        if self.channel is not None:
            self.channel.close()
        if self.client is not None:
            self.client.close()
        if self._bridge is not None and self._bridge is not threading.current_thread():
            self._bridge.join(timeout=5)
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()
