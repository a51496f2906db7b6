"""The capi-machine-glue operator: implements the Cluster API infrastructure contract by creating capfleet's
intermediate resources.
"""

# First, before kopf: importing capfleet makes kubernetes_asyncio lazy (capfleet/lean_imports.py).
import capfleet  # noqa: F401
