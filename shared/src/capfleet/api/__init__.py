"""capfleet's API: typed models of every kind the fleet defines, and the registry that names them.

The models are the one source of truth for the CRDs in `crds/` (`capfleet.crdgen` generates those from
them) and are what operators parse objects with. Import the modules whole, e.g.
`from capfleet.api import kinds` then `kinds.HYBRID_IPPOOL.resource`, or `from capfleet.api import ipam`.
"""
