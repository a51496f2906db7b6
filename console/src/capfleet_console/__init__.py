"""capfleet's web console: a self-service page for VMs and a read-out of hypervisors, servers and clusters.

It signs users in with their Kubernetes identity and acts for them by impersonation, so Kubernetes RBAC
decides what each one sees and may do (`acting`); pages are rendered on the server from the same tables
and tree as the `capfleet` command (`views`).
"""
