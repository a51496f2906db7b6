"""What libvirt-vm talks to: libvirt hypervisors over SSH (blocking calls, run off the event loop)."""
