"""libvirt-vm's own options, read once at startup (`runtime.run`) from `CAPFLEET_*` environment variables.

The poll intervals are a safety net (changes are handled at once) and set the two timers' intervals, so
the timers are registered from these settings (`handlers.register_polls`). The overcommit ratios and the
domain type are read by reconciles through their `Context`.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling
from libvirt_vm.backends import connections


@dataclass(frozen=True)
class LibvirtSettings(reconciling.Settings):
    hypervisor_poll_seconds: float = 60.0
    """How often a Hypervisor is re-checked (CAPFLEET_HYPERVISOR_POLL_SECONDS)."""
    vm_poll_seconds: float = 60.0
    """How often a LibvirtVM is re-converged (CAPFLEET_VM_POLL_SECONDS)."""
    call_timeout_seconds: float = connections.TIMEOUT
    """How long opening a hypervisor's connection or one libvirt call may take before the connection is
    closed under it and the reconcile retried (CAPFLEET_CALL_TIMEOUT_SECONDS)."""
    vcpu_overcommit: float = 1.0
    """How many vCPUs placement may give out per host CPU (1.0: none)."""
    storage_overcommit: float = 1.0
    """How many GiB of disk placement may give out per GiB of pool (copy-on-write disks are thin)."""
    domain_type: str = reconciling.setting("auto", env="CAPFLEET_LIBVIRT_DOMAIN_TYPE")
    """libvirt domain type: "kvm", "qemu" (TCG), or "auto" (kvm when the host offers it)."""
    instance: str = reconciling.setting("", env="CAPFLEET_INSTANCE_NAME")
    """This management cluster's name in the domains it defines (`capfleet.instances`; empty or "auto":
    derived from the cluster), so two management clusters sharing a hypervisor never take each other's."""

    @property
    def configured_virt_type(self) -> str | None:
        """The domain type when configured ("kvm" or "qemu"); None under "auto", where the host decides."""
        return self.domain_type if self.domain_type in {"kvm", "qemu"} else None

    def virt_type(self, kvm_offered: bool) -> str:
        """The domain type to define: the configured one, or under "auto" kvm when the host offers it."""
        return self.configured_virt_type or ("kvm" if kvm_offered else "qemu")
