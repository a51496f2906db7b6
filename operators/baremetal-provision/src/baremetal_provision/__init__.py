"""The baremetal-provision operator: provisions bare-metal servers through their BMCs (iPXE, NoCloud)."""

# First, before kopf: importing capfleet makes kubernetes_asyncio lazy (capfleet/lean_imports.py).
import capfleet  # noqa: F401
