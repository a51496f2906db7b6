"""Test hypervisors for the libvirt-vm operator: private libvirtd instances, an sshd in front of each, and a
tiny bootable Linux built from Debian packages, all started by the test session itself."""
