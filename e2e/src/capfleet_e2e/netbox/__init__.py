"""A NetBox 4.x REST API test server, because NetBox itself cannot be installed where capfleet is tested.

It implements what capfleet's operators use (IPAM with atomic available-ips, tags, custom fields,
tenants, DCIM devices and interfaces, MAC addresses, virtualization, journal entries) with NetBox's
semantics and error bodies, version-dependent behaviour (4.1 MAC field, 4.2 MAC objects, 4.5 v2 tokens,
4.6 ETags), and test-only fault injection. Operators talk to it with pynetbox exactly as to a real NetBox;
the same tests run against a real NetBox when CAPFLEET_NETBOX_URL and CAPFLEET_NETBOX_TOKEN are set.
"""

from capfleet_e2e.netbox.client import NetboxClient, NetboxError
from capfleet_e2e.netbox.config import ApiToken, ServerConfig
from capfleet_e2e.netbox.seed import Seeded, apply_seed
from capfleet_e2e.netbox.server import NetboxTestServer

__all__ = [
    "ApiToken",
    "NetboxClient",
    "NetboxError",
    "NetboxTestServer",
    "Seeded",
    "ServerConfig",
    "apply_seed",
]
