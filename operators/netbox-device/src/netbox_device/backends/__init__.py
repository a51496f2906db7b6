"""NetBox behind small typed interfaces, each with one pynetbox implementation (devices, VMs)."""
