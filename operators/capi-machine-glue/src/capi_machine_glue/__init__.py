"""The capi-machine-glue operator: implements the Cluster API infrastructure contract by creating capfleet's
intermediate resources.
"""
