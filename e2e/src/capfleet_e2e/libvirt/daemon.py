"""A private libvirtd + virtlogd per test "hypervisor", isolated from the host and from each other.

Nothing runs at boot on a test machine (no systemd), and the operator tests need two hypervisors with
separate state, so each instance lives in a mount namespace of its own (`unshare --mount`): tmpfs over /run,
/var/lib/libvirt and /var/cache/libvirt; the instance's own directories bind-mounted over /etc/libvirt (its
libvirtd.conf, qemu.conf, domain and pool definitions), /var/log/libvirt (QEMU's per-domain logs, kept in
the artifacts directory) and /run/libvirt (its sockets, so the test reaches `socket_path` from outside).
Inside, everything is at Debian's default paths: an sshd started in the same namespace (`nsenter`, see
sshd.py) runs `virt-ssh-helper qemu:///system` exactly as on a production hypervisor (virt-ssh-helper 9.0
ignores `?socket=`). virtlogd holds the namespace, so libvirtd can be restarted inside it with its state.
QEMU runs as root without a security driver or cgroups, as a sandbox without them requires.
With `netns`, the instance also runs in that network namespace (`ip netns exec`), so bridged interfaces
join a bridge that exists only there (capfleet_e2e.baremetal's PXE network).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import libvirt

from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.processes import Component, ComponentError, stop_pid, wait_for

START_TIMEOUT = 60.0

QEMU_CONF = """\
user = "root"
group = "root"
security_driver = "none"
cgroup_controllers = [ ]
remember_owner = 0
"""

# Runs inside the new mount namespace; $1..$5: instance root, config dir, log dir, virtlogd pid file,
# and the storage pool's size in MiB (empty: the pool is a plain directory on the host's disk).
_NAMESPACE_SCRIPT = r"""
set -eu
root=$1 etc=$2 logs=$3 virtlogd_pid=$4 pool_mib=$5
mkdir -p /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /etc/libvirt
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/libvirt /run/sshd
mount --bind "$root/run" /run/libvirt
mount -t tmpfs -o mode=0755 tmpfs /var/lib/libvirt
mount -t tmpfs -o mode=0755 tmpfs /var/cache/libvirt
mount --bind "$etc" /etc/libvirt
mount --bind "$logs" /var/log/libvirt
mount --bind "$root/passwd" /etc/passwd
mount --bind "$root/group" /etc/group
[ -z "$pool_mib" ] || mount -t tmpfs -o "size=${pool_mib}m,mode=0755" tmpfs "$root/pool"
virtlogd --daemon --config "$etc/virtlogd.conf" --pid-file "$virtlogd_pid"
i=0
until [ -S /run/libvirt/virtlogd-sock ]; do
  i=$((i + 1)); [ "$i" -le 200 ] || { echo "virtlogd did not create its socket" >&2; exit 1; }
  sleep 0.05
done
exec libvirtd --config "$etc/libvirtd.conf"
"""


def libvirt_uri(socket_path: Path | str) -> str:
    """The URI of the system QEMU driver of the instance listening on `socket_path` (from the host)."""
    return f"qemu:///system?socket={socket_path}"


class LibvirtDaemon:
    """One isolated libvirtd (with its virtlogd) and a `dir` storage pool named `pool_name`.

    Remote clients reach it through an sshd started in `namespace_pid`'s mount namespace, with the plain
    `qemu:///system` URI; `connect()` opens a direct connection to `socket_path` for set-up and checks.
    """

    def __init__(
        self,
        name: str,
        pool_name: str = "default",
        pool_size_mib: int | None = None,
        log_dir: Path | None = None,
        netns: str | None = None,
        reaper: bool = False,
    ):
        """`pool_size_mib` puts the pool on a tmpfs of that size (seen only by this instance), so tests
        can fill it up or check capacity; without it the pool is a directory on the host's disk. With
        `reaper`, libvirtd runs under `capfleet_e2e.libvirt.reaper`, which adopts and reaps its QEMUs, so
        they stay in the caller's process tree (`frozen` and `restart` are then not for this instance)."""
        self.name = name
        self.netns = netns
        self.reaper = reaper
        self.pool_size_mib = pool_size_mib
        self.pool_name = pool_name
        self.log_dir = log_dir or artifacts_dir() / "libvirt" / name
        self.root = Path(tempfile.mkdtemp(prefix=f"capfleet-libvirt-{name}-"))
        self.etc_dir = self.root / "etc"
        self.sock_dir = self.root / "run"
        self.pool_dir = self.root / "pool"
        self.virtlogd_pid_file = self.root / "virtlogd.pid"
        self.process: Component | None = None

    @property
    def socket_path(self) -> Path:
        """libvirtd's read-write socket."""
        return self.sock_dir / "libvirt-sock"

    @property
    def uri(self) -> str:
        return libvirt_uri(self.socket_path)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> None:
        self.etc_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("qemu", "storage"):
            (self.etc_dir / sub).mkdir(exist_ok=True)
        for d in (self.sock_dir, self.pool_dir, self.log_dir / "qemu"):
            d.mkdir(parents=True, exist_ok=True)
        self._write_accounts()
        (self.etc_dir / "qemu.conf").write_text(QEMU_CONF)
        (self.etc_dir / "libvirt.conf").write_text("")
        (self.etc_dir / "libvirtd.conf").write_text(
            'unix_sock_group = "root"\n'
            'unix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            "log_level = 3\n"
            f'log_outputs = "3:file:{self.log_dir / "libvirtd-daemon.log"}"\n'
        )
        (self.etc_dir / "virtlogd.conf").write_text(
            f'log_outputs = "3:file:{self.log_dir / "virtlogd.log"}"\n'
        )

    def _write_accounts(self) -> None:
        """Copies of /etc/passwd and /etc/group, with the `libvirt-qemu` account added if missing.

        The QEMU driver looks its default user up before reading qemu.conf and refuses to start without it;
        Debian creates it in libvirt-daemon-system, whose maintainer scripts would also start a system
        libvirtd. Inside the namespace these copies are bind-mounted over the real files instead.
        """
        passwd = Path("/etc/passwd").read_text()
        group = Path("/etc/group").read_text()
        if not any(line.startswith("libvirt-qemu:") for line in passwd.splitlines()):
            passwd += "libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n"
        if not any(line.startswith("libvirt-qemu:") for line in group.splitlines()):
            group += "libvirt-qemu:x:64055:\n"
        (self.root / "passwd").write_text(passwd)
        (self.root / "group").write_text(group)

    @property
    def namespace_pid(self) -> int:
        """A process in the instance's mount namespace (virtlogd, which outlives libvirtd restarts)."""
        pid = _read_pid(self.virtlogd_pid_file)
        if pid is None:
            raise ComponentError(f"libvirt instance {self.name} is not running")
        return pid

    def start(self) -> Self:
        """Start virtlogd and libvirtd, wait until libvirtd answers, and create the storage pool."""
        self._write_config()
        self._run(self._first_start_argv())
        try:
            self._ensure_pool()
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Stop libvirtd and start it again in the same namespace (domains keep running meanwhile)."""
        self.stop_libvirtd()
        net = ["--net"] if self.netns else []
        argv = ["nsenter", "--mount", *net, f"--target={self.namespace_pid}", "libvirtd", "--config"]
        self._run([*argv, str(self.etc_dir / "libvirtd.conf")])

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """libvirtd stopped with SIGSTOP, not killed: connections stay open and its socket accepts, yet no
        call gets an answer, as with a host that hangs. SIGCONT on the way out."""
        assert self.process is not None
        # unshare, `ip netns exec`, nsenter and the namespace script all exec: this pid is libvirtd's.
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    def stop_libvirtd(self) -> None:
        """Stop libvirtd only (a hypervisor whose daemon is down); `restart()` brings it back."""
        if self.process is not None:
            self.process.stop()

    def _run(self, argv: list[str]) -> None:
        self.process = Component(f"libvirtd-{self.name}", argv, self.log_dir)
        try:
            self.version = wait_for(f"libvirtd {self.name}", self._version, START_TIMEOUT, [self.process])
        except BaseException:
            self.stop()
            raise

    def _first_start_argv(self) -> list[str]:
        in_netns = ["ip", "netns", "exec", self.netns] if self.netns else []
        reaper = [sys.executable, "-m", "capfleet_e2e.libvirt.reaper"] if self.reaper else []
        return [
            *reaper,
            *in_netns,
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", _NAMESPACE_SCRIPT, "capfleet-libvirt",
            str(self.root), str(self.etc_dir), str(self.log_dir), str(self.virtlogd_pid_file),
            str(self.pool_size_mib or ""),
        ]  # fmt: skip

    def _version(self) -> int | None:
        if not self.socket_path.exists():
            return None
        conn = libvirt.open(self.uri)
        try:
            version: int = conn.getLibVersion()
            return version
        finally:
            conn.close()

    def connect(self) -> Any:
        """A direct libvirt connection (`libvirt.virConnect`) over the local socket, for set-up and checks."""
        return libvirt.open(self.uri)

    def _ensure_pool(self) -> None:
        conn = self.connect()
        try:
            xml = (
                f"<pool type='dir'><name>{self.pool_name}</name>"
                f"<target><path>{self.pool_dir}</path></target></pool>"
            )
            pool = conn.storagePoolDefineXML(xml, 0)
            pool.setAutostart(True)
            pool.create(0)
        finally:
            conn.close()

    def destroy_domains(self) -> None:
        """Destroy every running domain (libvirtd leaves them running when it stops)."""
        conn = self.connect()
        try:
            for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                dom.destroy()
        finally:
            conn.close()

    def stop(self) -> None:
        """Destroy running domains, stop libvirtd, then virtlogd (by PID), and remove the instance's files."""
        if self.process is not None and self.process.process.poll() is None:
            with contextlib.suppress(libvirt.libvirtError):
                self.destroy_domains()
            self.process.stop()
        self._stop_virtlogd()
        shutil.rmtree(self.root, ignore_errors=True)

    def _stop_virtlogd(self) -> None:
        pid = _read_pid(self.virtlogd_pid_file)
        if pid is not None:
            stop_pid(pid, "virtlogd")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
