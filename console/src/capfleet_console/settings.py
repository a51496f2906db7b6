"""The console's options, read once at start from `CAPFLEET_CONSOLE_*` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capfleet import reconciling


def interface_of(text: str) -> dict[str, Any]:
    """The NIC of console-made VMs: "network:<libvirt network>", "bridge:<host bridge>" or "user"."""
    kind, _, name = text.partition(":")
    if kind == "user" and not name:
        return {"userMode": True}
    if kind in {"network", "bridge"} and name:
        return {kind: name}
    raise ValueError(
        f"CAPFLEET_CONSOLE_INTERFACE must be network:<name>, bridge:<name> or user, not {text!r}"
    )


@dataclass(frozen=True)
class ConsoleSettings(reconciling.Settings):
    listen: str = reconciling.setting("127.0.0.1:8080", env="CAPFLEET_CONSOLE_LISTEN")
    """Address and port the console serves on."""
    images: str = reconciling.setting("capfleet-node", env="CAPFLEET_CONSOLE_IMAGES")
    """Comma-separated base image volumes the Create VM form offers (each in every hypervisor's pool)."""
    interface: str = reconciling.setting("network:default", env="CAPFLEET_CONSOLE_INTERFACE")
    """The NIC of console-made VMs (see `interface_of`)."""
    namespace: str = reconciling.setting("default", env="CAPFLEET_CONSOLE_NAMESPACE")
    """The namespace a page shows until the user picks another."""
    secure_cookies: bool = reconciling.setting(True, env="CAPFLEET_CONSOLE_SECURE_COOKIES")
    """Send the session cookie only over HTTPS (turn off only for a console on loopback)."""
    groups: str = reconciling.setting("system:authenticated", env="CAPFLEET_CONSOLE_GROUPS")
    """Comma-separated groups the console impersonates when a signed-in user is in them; every other
    group of the user is dropped. The console's ClusterRole may impersonate exactly these (its
    `resourceNames`): list a team's OIDC group in both to grant through it."""

    def group_list(self) -> list[str]:
        return [g.strip() for g in self.groups.split(",") if g.strip()]

    def image_list(self) -> list[str]:
        return [i.strip() for i in self.images.split(",") if i.strip()]

    def vm_interface(self) -> dict[str, Any]:
        return interface_of(self.interface)

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)
