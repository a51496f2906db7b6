"""The netbox-device operator: claims bare-metal devices from NetBox and registers VMs in it."""

# First, before kopf: importing capfleet makes kubernetes_asyncio lazy (capfleet/lean_imports.py).
import capfleet  # noqa: F401
