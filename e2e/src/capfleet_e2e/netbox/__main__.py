"""`python -m capfleet_e2e.netbox`: run the NetBox API test server on 127.0.0.1 (see server.main)."""

import sys

from capfleet_e2e.netbox.server import main

sys.exit(main())
