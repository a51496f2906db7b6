"""capfleet's deploy ramdisk: the kernel and initramfs a bare-metal server network-boots to have an OS image
written to its disk with a NoCloud seed beside it, or its disks' metadata wiped (build.py builds it,
deploy_init.sh is its /init; baremetal-provision's ramdisk_args.py writes its command line).
`capfleet-images ramdisk` (or `make deploy-ramdisk`) builds it."""
