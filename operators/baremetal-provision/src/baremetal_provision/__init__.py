"""The baremetal-provision operator: provisions bare-metal servers through their BMCs with iPXE and NoCloud."""
