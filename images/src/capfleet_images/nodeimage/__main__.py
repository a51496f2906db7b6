"""`python -m capfleet_e2e.nodeimage` (`make node-image`): build the node image if it is not cached, and
print where it is. The versions are the harness's (versions.py); CAPFLEET_CACHE moves the cache."""

from __future__ import annotations

import argparse

from capfleet_e2e.nodeimage.build import ensure_node_image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capfleet_e2e.nodeimage", description=__doc__)
    parser.parse_args(argv)
    image = ensure_node_image(progress=lambda line: print(line, flush=True))
    print(f"qcow2 (VM base volume): {image.qcow2}")
    print(f"raw (bare-metal disks): {image.raw}")
    print(f"build record: {image.record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
