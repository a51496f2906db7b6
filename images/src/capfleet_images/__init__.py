"""capfleet's production artefacts, built on the operator's own machine: the node image (`nodeimage`: a
Debian disk that boots into a Kubernetes node with every image preloaded) and the deploy ramdisk
(`deployramdisk`: what a bare-metal server network-boots to get that disk written).

A package of its own, not part of the test harness (capfleet_e2e), because operators need these
artefacts in production: `capfleet-images` (cli.py) builds them, or reuses them from the cache
(cache.py, shared with the harness, which tests exactly these artefacts), and publishes them with their
checksums (publish.py). It depends on neither the harness nor pytest.
"""
