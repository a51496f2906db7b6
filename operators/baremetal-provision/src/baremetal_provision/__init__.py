"""The baremetal-provision operator: provisions bare-metal servers through their BMCs (iPXE, NoCloud)."""
