"""The libvirt-vm operator: places, creates and deletes VMs on libvirt hypervisors reached over SSH."""

# First, before kopf: importing capfleet makes kubernetes_asyncio lazy (capfleet/lean_imports.py).
import capfleet  # noqa: F401
