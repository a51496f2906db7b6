"""The ipam-address operator: allocates IP addresses for CAPI IPAddressClaims from in-cluster and NetBox
pools.
"""
