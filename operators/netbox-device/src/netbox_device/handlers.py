"""kopf handlers of the netbox-device operator: decorators and typed arguments only, logic lives elsewhere.

The operator's reconcilers are added by its own issue; until then it starts through the shared
runtime, serves its probes and metrics, and watches nothing.
"""

from capfleet import runtime

IDENTITY = runtime.Identity("netbox-device")
