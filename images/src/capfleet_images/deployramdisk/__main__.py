"""`python -m capfleet_e2e.deployramdisk` (`make deploy-ramdisk`): build the deploy ramdisk if it is not
cached, and print where it is, its size and how long its build took. CAPFLEET_CACHE moves the cache."""

from __future__ import annotations

import argparse
import time

from capfleet_e2e.deployramdisk.build import ensure_deploy_ramdisk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capfleet_e2e.deployramdisk", description=__doc__)
    parser.parse_args(argv)
    started = time.monotonic()
    ramdisk = ensure_deploy_ramdisk(progress=lambda line: print(line, flush=True))
    record = ramdisk.record
    print(
        f"kernel: {ramdisk.kernel} ({record['kernel_version']}, {ramdisk.kernel.stat().st_size / 1e6:.1f} MB)"
    )
    print(f"initrd: {ramdisk.initrd} ({ramdisk.initrd.stat().st_size / 1e6:.1f} MB)")
    print(f"build: {record['seconds']} s when built; {time.monotonic() - started:.1f} s now")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
