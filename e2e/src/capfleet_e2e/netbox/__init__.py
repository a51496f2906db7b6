"""NetBox for capfleet's tests: real releases installed and run by the harness, and the tools around them.

releases.py installs a release (source, packages, Python, a migrated database dump); services.py runs its
PostgreSQL and Redis; real.py serves it for a session; proxy.py and faults.py stand between it and the
operators to inject faults and log requests; client.py and seed.py create test data through the REST
API; fixtures.py gives each test an empty NetBox.
"""

from capfleet_e2e.netbox.client import NetboxClient, NetboxError
from capfleet_e2e.netbox.seed import Seeded, apply_seed

__all__ = ["NetboxClient", "NetboxError", "Seeded", "apply_seed"]
