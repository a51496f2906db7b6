"""The ipam-address operator: allocates IP addresses for CAPI IPAddressClaims from in-cluster and NetBox
pools.
"""

# First, before kopf: importing capfleet makes kubernetes_asyncio lazy (capfleet/lean_imports.py).
import capfleet  # noqa: F401
