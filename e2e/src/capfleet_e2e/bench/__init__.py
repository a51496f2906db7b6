"""Benchmarks that pit capfleet operators against their reference Go providers on the real control plane.

They are not tests: `make test` never runs them. `python -m capfleet_e2e.bench.ipam` (`make bench-ipam`)
measures ipam-address against sigs.k8s.io/cluster-api-ipam-provider-in-cluster.
"""
