"""Bare-metal servers for tests: QEMU VMs on a private PXE network, driven through a Redfish emulator."""
