"""The libvirt-vm operator: places, creates and deletes VMs on libvirt hypervisors reached over SSH."""
